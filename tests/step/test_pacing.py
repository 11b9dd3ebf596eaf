"""The pacing of asynchronous training (zoo/step/pacing.py), worked by hand: the capacity rule
accepted + running <= B x (version + k + 1), staleness = consuming step - sampling version, slots
taking their prompts at dispatch, reassembly by group index, the checkpointed queue, and an
overshooting group counted, not dropped."""

from __future__ import annotations

import pytest

from zoo.step.pacing import Finished, Pacer, capacity, group_seed, staleness, staleness_metrics


class Stream:
    """Rows 0, 1, 2, ... in order; its state is the index of the next row."""

    def __init__(self):
        self.i = 0

    def take(self, n):
        out = [{"prompt": f"p{self.i + j}"} for j in range(n)]
        self.i += n
        return out

    def state(self):
        return self.i


def _pacer(B=2, k=1, start_step=0):
    s = Stream()
    s.i = start_step * B
    return Pacer(B, k, seed=7, take_rows=s.take, stream_state=s.state, start_step=start_step), s


def test_capacity_is_groups_per_step_times_version_plus_k_plus_one():
    assert capacity(2, 1, 0) == 4  # B 2, k 1, version 0: steps 0 and 1
    assert capacity(2, 0, 0) == 2  # k 0: only step 0, sampled with version 0
    assert capacity(4, 2, 3) == 24  # 4 x (3 + 2 + 1)
    assert staleness(5, 3) == 2


def test_k1_dispatches_two_steps_ahead_then_waits_for_a_version():
    p, _ = _pacer(B=2, k=1)
    slots = [p.dispatch() for _ in range(4)]  # 4 = 2 x (0 + 1 + 1)
    assert [(s.step, s.group) for s in slots] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert not p.may_dispatch()
    with pytest.raises(RuntimeError, match="capacity rule"):
        p.dispatch()
    p.publish(1)  # the trainer finished step 0
    assert p.may_dispatch() and p.next_step() == 2
    assert [(s.step, s.group) for s in (p.dispatch(), p.dispatch())] == [(2, 0), (2, 1)]
    assert not p.may_dispatch()


def test_k0_is_the_synchronous_schedule():
    p, _ = _pacer(B=3, k=0)
    for _ in range(3):
        p.dispatch()
    assert not p.may_dispatch()  # step 1 waits for version 1: every group is sampled with its step's version


def test_slots_take_the_steps_rows_in_order_and_seeds_from_seed_step_group():
    p, stream = _pacer(B=2, k=1)
    a, b, c = p.dispatch(), p.dispatch(), p.dispatch()
    assert [x.row["prompt"] for x in (a, b, c)] == ["p0", "p1", "p2"]
    assert stream.i == 4  # step 1's two rows were taken with its first slot
    assert a.seed == group_seed(7, 0, 0) and c.seed == group_seed(7, 1, 0)
    assert len({a.seed, b.seed, c.seed}) == 3 and group_seed(7, 1, 0) == group_seed(7, 1, 0)
    assert group_seed(8, 1, 0) != group_seed(7, 1, 0)


def test_take_reassembles_by_group_index_whatever_the_finishing_order():
    p, _ = _pacer(B=3, k=0)
    slots = [p.dispatch() for _ in range(3)]
    for s in reversed(slots):
        assert not p.ready(0)
        p.finish(Finished(s, 0, batch=f"b{s.group}"))
    assert p.ready(0)
    assert [f.batch for f in p.take(0)] == ["b0", "b1", "b2"]
    assert not p.done and not p.running


def test_state_dict_keeps_the_stream_before_the_untrained_step_and_the_pending_slots():
    p, _ = _pacer(B=2, k=1)
    s = [p.dispatch() for _ in range(4)]
    for x in s[:3]:
        p.finish(Finished(x, 0, batch=None))
    p.take(0)
    p.publish(1)
    state = p.state_dict(1)
    assert state == {"stream": 2, "pending": [[1, 0, 0], [1, 1, -1]]}  # (1, 1) still running
    r, _ = _pacer(B=2, k=1, start_step=1)  # a resume from that state regenerates step 1's slots first
    assert [(x.step, x.group, x.seed) for x in (r.dispatch(), r.dispatch())] == [(1, 0, s[2].seed), (1, 1, s[3].seed)]


def test_an_overshooting_group_is_trained_and_counted():
    p, _ = _pacer(B=2, k=1)
    groups = [Finished(p.dispatch(), v, batch=None) for v in (0, 0)]
    m = staleness_metrics(groups, step=3, max_staleness=1)  # sampled with version 0, trained at step 3
    assert m == {"async/staleness_mean": 3.0, "async/staleness_max": 3.0, "async/overshoot": 2.0}
    m = staleness_metrics([Finished(None, 2, None), Finished(None, 3, None)], step=3, max_staleness=1)
    assert m == {"async/staleness_mean": 0.5, "async/staleness_max": 1.0, "async/overshoot": 0.0}
