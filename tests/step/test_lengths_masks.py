"""Lengths and masks (docs/concepts/engine.md "Lengths and masks"): a row's attention extent (`Batch.lengths`)
is separate from the count of the policy's own tokens (`Batch.policy_tokens`). Single-turn the two
are equal and nothing changes; in a hand-built multi-turn row with environment tokens, length
shaping, the aggregators and the length metrics count only the policy's tokens."""

from types import SimpleNamespace

import torch

from zoo.backends.generate.hf import generate_rollout
from zoo.bench.probe import phase_tokens
from zoo.components.aggregate import seq_mean_token_sum_norm, token_mean
from zoo.core.batch import Batch, concat
from zoo.core.registry import build
from zoo.core.types import LengthRows, StepCounts
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.diagnostics import LEN, row_table
from zoo.step.hooks import Phase
from zoo.step.sample import _completion_metrics
from zoo.step.scoring import length_shaping

T, P, MAX_NEW = 9, 2, 8
# P = policy token, E = environment token (attended, never trained), . = after the row's end
ROWS = (
    "PPPPPP...",  # single-turn: 6 policy tokens
    "PPPEEEEEP",  # two assistant turns around a tool result: 4 policy tokens, extent 9
    "PPPPP....",
)  # single-turn: 5 policy tokens


def multi_turn_batch() -> Batch:
    """Three completions of one prompt; the middle one has five environment tokens."""
    loss = torch.tensor([[c == "P" for c in r] for r in ROWS])  # [3, T]
    extent = torch.tensor([len(r.rstrip(".")) for r in ROWS])  # [3] = 6, 9, 5
    ids = torch.arange(3 * T).reshape(3, T) + 10
    return Batch(
        prompt_ids=torch.full((3, P), 7),
        prompt_mask=torch.ones(3, P, dtype=torch.bool),
        completion_ids=ids,
        loss_mask=loss,
        group_ids=torch.zeros(3, dtype=torch.long),
        truncated=torch.zeros(3, dtype=torch.bool),
        lengths=extent,
        policy_tokens=loss.sum(1),
    )


def length_slots() -> SimpleNamespace:
    soft = build("length", {"name": "overlong_soft", "cache_len": 4}, context={"max_new_tokens": MAX_NEW})
    return SimpleNamespace(length=[soft, build("length", "kimi_length")])


def test_a_generated_single_turn_batch_has_policy_tokens_equal_to_lengths():
    model, tok = tiny_model_and_tokenizer()
    torch.manual_seed(0)
    b = generate_rollout(model, tok, ["ab", "abc"], group_size=3, max_new_tokens=6)
    assert b.policy_tokens.tolist() == b.lengths.tolist() == b.loss_mask.sum(1).tolist()
    assert b.policy_tokens.dtype == torch.long


def test_single_turn_length_shaping_and_aggregation_are_unchanged():
    """A batch built without policy_tokens takes lengths; length shaping gives what the components give
    on lengths (the path before policy_tokens existed), and the aggregators see the same mask."""
    lengths = torch.tensor([6, 3, 5, 8])
    att = torch.arange(T)[None, :] < lengths[:, None]
    b = Batch(
        prompt_ids=torch.full((4, P), 7),
        prompt_mask=torch.ones(4, P, dtype=torch.bool),
        completion_ids=torch.ones(4, T, dtype=torch.long),
        loss_mask=att,
        group_ids=torch.tensor([0, 0, 1, 1]),
        truncated=lengths == MAX_NEW,
        lengths=lengths,
    )
    assert b.policy_tokens.tolist() == [6, 3, 5, 8]
    obj = torch.tensor([[1.0], [1.0], [0.0], [1.0]])
    slots = length_slots()
    _, cols, names, _, _ = length_shaping(b, obj, ["correctness"], [1.0], slots, MAX_NEW, 0)
    rows = LengthRows(group_ids=b.group_ids, metrics={"correctness": obj[:, 0], "accuracy": obj[:, 0]})
    for k, comp in enumerate(slots.length):
        torch.testing.assert_close(cols[:, 1 + k], comp(lengths, b.truncated, MAX_NEW, rows).column.float())
    assert names == ["correctness", "overlong_soft", "kimi_length"]
    # DAPO soft overlong, expected length 8 - 4 = 4: (4 - n) / 4 for n in (4, 8], else 0
    torch.testing.assert_close(cols[:, 1], torch.tensor([-0.5, 0.0, -0.25, -1.0]))


def test_length_shaping_counts_the_policys_tokens_not_the_environments():
    b = multi_turn_batch()
    assert b.lengths.tolist() == [6, 9, 5] and b.policy_tokens.tolist() == [6, 4, 5]
    assert b.attention_mask().sum(1).tolist() == [P + 6, P + 9, P + 5]  # the tool result is context
    obj = torch.ones(3, 1)  # all correct
    _, cols, _, _, _ = length_shaping(b, obj, ["correctness"], [1.0], length_slots(), MAX_NEW, 0)
    # overlong_soft on 6, 4, 5 policy tokens: (4 - 6) / 4, 0, (4 - 5) / 4  (on the extent 9 it would be -1)
    torch.testing.assert_close(cols[:, 1], torch.tensor([-0.5, 0.0, -0.25]))
    # kimi_length, min 4, max 6: 0.5 - (n - 4) / 2 -> -0.5, 0.5, 0  (on the extents 6, 9, 5: 0.25, -0.5, 0.5)
    torch.testing.assert_close(cols[:, 2], torch.tensor([-0.5, 0.5, 0.0]))


def test_aggregators_sum_only_the_policys_tokens():
    b = multi_turn_batch()
    loss = torch.where(b.loss_mask, torch.ones(3, T), torch.full((3, T), 100.0))  # environment columns: 100
    counts = StepCounts.of(b.loss_mask, MAX_NEW)
    assert counts.tokens == 15.0 and counts.sequences == 3.0
    # Dr. GRPO: (6 + 4 + 5) / (3 sequences * L = 8)
    torch.testing.assert_close(seq_mean_token_sum_norm(loss, b.loss_mask, counts), torch.tensor(15 / 24))
    torch.testing.assert_close(token_mean(loss, b.loss_mask, counts), torch.tensor(1.0))


def test_length_metrics_count_the_policys_tokens():
    b = multi_turn_batch()
    m = _completion_metrics(b)
    assert m["completion/len_mean"] == 5.0 and m["completion/len_max"] == 6.0  # extents: 20 / 3 and 9
    b.advantages, b.objectives = torch.zeros(3, T), torch.ones(3, 1)
    assert row_table(b, 1, [1.0], 0)[:, LEN].tolist() == [6.0, 4.0, 5.0]
    assert phase_tokens(Phase("generate", b)) == 15.0


def test_policy_tokens_follow_select_concat_and_trimmed():
    b = multi_turn_batch()
    assert b.select([1, 2]).policy_tokens.tolist() == [4, 5]
    assert b.select(torch.tensor([True, False, True])).policy_tokens.tolist() == [6, 5]
    single = Batch(
        prompt_ids=torch.full((1, 3), 7),
        prompt_mask=torch.ones(1, 3, dtype=torch.bool),
        completion_ids=torch.ones(1, 2, dtype=torch.long),
        loss_mask=torch.ones(1, 2, dtype=torch.bool),
        group_ids=torch.tensor([1]),
        truncated=torch.tensor([False]),
        lengths=torch.tensor([2]),
    )
    c = concat([b, single], pad_id=0)
    assert c.policy_tokens.tolist() == [6, 4, 5, 2] and c.lengths.tolist() == [6, 9, 5, 2]
    t = b.trimmed()
    assert t.policy_tokens.tolist() == [6, 4, 5] and t.lengths.tolist() == [6, 9, 5]
