"""The pacing of asynchronous training (docs/guides/async.md) as plain code: no threads, no Ray.

Versions: the trainer's weights after s steps are policy version s, so step s (0-based) trains with
version s. A group that step s trains on, sampled with version v, has

    staleness = s - v                                    (consuming version - sampling version)

Slots: the groups of the run are numbered in step order, slot n = (step n // B, group n % B), B the
prompts per step. A slot gets its prompt when it is dispatched (the step's B rows are taken from the
run's prompt stream when its first slot is dispatched, so step s trains on the prompts the synchronous
run's step s draws) and its sampling seed from (seed, step, group) (`group_seed`), so every arm of a
study sees the same prompts and the same draws whatever the workers' timing.

Capacity rule (AReaL arXiv:2505.24298, "staleness-aware training", `rollout.max_head_offpolicyness`;
SkyRL's `max_staleness_steps`):
with the newest published version v and the bound k,

    accepted + running groups (counted over the run)  <=  B x (v + k + 1)

so the n-th slot (0-based) is dispatched only once v >= n // B - k: no group is sampled more than k
versions before the step that trains it. The trainer of step s waits for its B groups, which may be
sampled with any version in [s - k, s]. A group whose staleness still exceeds k (a worker that kept an
older version, a resume) is trained, logged and counted (`async/overshoot`), never dropped: dropping
stale groups biases training towards the short rollouts that finish first (tinker-cookbook PR #822).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from zoo.tasks.base import derive_seed


def group_seed(seed: int, step: int, group: int) -> int:
    """The sampling seed of slot (step, group) of a run with seed `seed` (in [0, 2**31))."""
    return derive_seed(seed, f"async:{int(step)}:{int(group)}")


def capacity(groups_per_step: int, max_staleness: int, version: int) -> int:
    """How many groups (accepted + running, over the run) the capacity rule allows at `version`:
    B x (version + k + 1)."""
    return groups_per_step * (version + max_staleness + 1)


def staleness(consuming_step: int, version: int) -> int:
    """Versions between the weights a group was sampled with and the step that trains on it."""
    return int(consuming_step) - int(version)


@dataclass(frozen=True)
class Slot:
    """One group of the run: the step that trains on it, its index in that step, its seed and prompt row."""

    step: int
    group: int
    seed: int
    row: Any = None


@dataclass
class Finished:
    """A generated group: its slot, the policy version it was sampled with (one version for the whole
    group: workers load weights only between groups), its rows (a Batch of G rows) and seconds."""

    slot: Slot
    version: int
    batch: Any
    seconds: float = 0.0


@dataclass
class Pacer:
    """The bookkeeping of one run's groups (not thread-safe: the caller holds a lock).

    groups_per_step: B; max_staleness: k; seed: the run's; take_rows(n): the next n prompt rows of the
    run's stream; stream_state(): the stream's position (saved in checkpoints, `state_dict`);
    start_step: the first step not yet trained (a resume's), also the version published first."""

    groups_per_step: int
    max_staleness: int
    seed: int
    take_rows: Callable[[int], list[Any]]
    stream_state: Callable[[], Any] = lambda: None
    start_step: int = 0
    version: int = field(init=False)
    dispatched: int = field(init=False)  # slots dispatched so far, over the run (incl. the trained ones)
    done: dict[tuple[int, int], Finished] = field(default_factory=dict, init=False)
    running: dict[tuple[int, int], Slot] = field(default_factory=dict, init=False)
    rows: dict[int, list[Any]] = field(default_factory=dict, init=False)  # step -> its B rows
    streams: dict[int, Any] = field(default_factory=dict, init=False)  # step -> stream position before its rows

    def __post_init__(self) -> None:
        self.version = self.start_step
        self.dispatched = self.start_step * self.groups_per_step

    def next_step(self) -> int:
        """The step of the next slot to dispatch."""
        return self.dispatched // self.groups_per_step

    def may_dispatch(self) -> bool:
        """The capacity rule for one more group: dispatched + 1 <= B x (version + k + 1)."""
        return self.dispatched + 1 <= capacity(self.groups_per_step, self.max_staleness, self.version)

    def dispatch(self) -> Slot:
        """The next slot (its prompt taken now); counts it as running. Raises RuntimeError when the
        capacity rule does not allow it."""
        if not self.may_dispatch():
            raise RuntimeError(f"capacity rule: {self.dispatched} groups dispatched at version {self.version}")
        step, group = divmod(self.dispatched, self.groups_per_step)
        if group == 0:
            self.streams[step] = self.stream_state()
            self.rows[step] = list(self.take_rows(self.groups_per_step))
        slot = Slot(step, group, group_seed(self.seed, step, group), self.rows[step][group])
        self.running[(step, group)] = slot
        self.dispatched += 1
        return slot

    def finish(self, f: Finished) -> None:
        """A running group has been generated."""
        self.running.pop((f.slot.step, f.slot.group), None)
        self.done[(f.slot.step, f.slot.group)] = f

    def ready(self, step: int) -> bool:
        """Whether every group of `step` has been generated."""
        return all((step, g) in self.done for g in range(self.groups_per_step))

    def take(self, step: int) -> list[Finished]:
        """The B groups of `step` in group order (reassembly by group index), removed from the queue.
        Raises KeyError when one is missing."""
        out = [self.done.pop((step, g)) for g in range(self.groups_per_step)]
        self.rows.pop(step, None)
        self.streams.pop(step, None)
        return out

    def publish(self, version: int) -> None:
        """The trainer published `version` (after its step `version - 1`): more slots may be dispatched."""
        self.version = max(self.version, int(version))

    def state_dict(self, step: int) -> dict[str, Any]:
        """What a checkpoint after `step` steps keeps: the stream's position before step `step`'s rows
        (a resume takes them again) and the slots dispatched but not trained, [[step, group, version]]
        (version -1: still running), which a resume regenerates from their seeds."""
        pending = [[s, g, f.version] for (s, g), f in self.done.items() if s >= step]
        pending += [[s, g, -1] for (s, g) in self.running if s >= step]
        stream = self.streams[step] if step in self.streams else self.stream_state()  # not dispatched yet: now
        return {"stream": stream, "pending": sorted(pending)}


def staleness_metrics(groups: list[Finished], step: int, max_staleness: int) -> dict[str, float]:
    """async/staleness_mean|max over the step's groups and async/overshoot: how many exceed the bound
    (trained all the same)."""
    s = [staleness(step, f.version) for f in groups]
    return {
        "async/staleness_mean": sum(s) / max(len(s), 1),
        "async/staleness_max": float(max(s, default=0)),
        "async/overshoot": float(sum(x > max_staleness for x in s)),
    }
