"""zoo.core.batch.Batch, the one record of a step: the loss mask vs the attention mask after EOS, and
`extras` following the rows through select / trimmed / concat."""

import torch

from zoo.core.batch import Batch, concat
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs


def batch(lengths=(2, 4), T=4, P=2, pad=0) -> Batch:
    N = len(lengths)
    L = torch.tensor(lengths)
    att = torch.arange(T)[None, :] < L[:, None]  # [N, T]
    ids = torch.randint(3, 50, (N, T), generator=torch.Generator().manual_seed(0))
    return Batch(
        prompt_ids=torch.full((N, P), 7),
        prompt_mask=torch.ones(N, P, dtype=torch.bool),
        completion_ids=torch.where(att, ids, torch.full_like(ids, pad)),
        loss_mask=att.clone(),
        group_ids=torch.arange(N),
        truncated=L == T,
        lengths=L,
    )


def test_tokens_after_eos_are_neither_attended_nor_trained():
    b = batch(lengths=(2, 4))
    att = b.attention_mask()  # [N, P + T]
    assert att.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]
    # the loss mask is its own field: length shaping clears a row without touching attention
    b.loss_mask[1] = False
    assert b.attention_mask()[1].tolist() == [1] * 6


def test_attention_after_eos_changes_no_real_token_logprob():
    """Causal attention: whether post-EOS padding is attended (the old Batch) or not (now), the
    log-probs of the real tokens are the same."""
    model, tok = tiny_model_and_tokenizer()
    b = batch(lengths=(1, 3, 4), T=4, pad=tok.pad_token_id)
    T = b.completion_ids.shape[1]
    old_att = torch.cat([b.prompt_mask.long(), torch.ones_like(b.completion_ids)], dim=1)  # post-EOS = 1
    new, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), T)
    old, _ = token_logprobs(model, b.input_ids(), old_att, T)
    torch.testing.assert_close(new[b.loss_mask], old[b.loss_mask], rtol=1e-5, atol=1e-6)


def test_extras_follow_rows_and_columns():
    b = batch(lengths=(2, 3))
    b.extras["token_weight"] = torch.arange(8.0).reshape(2, 4)  # [N, T]
    b.extras["row_score"] = torch.tensor([5.0, 6.0])  # [N]
    s = b.select(torch.tensor([1]))
    assert s.extras["token_weight"].tolist() == [[4.0, 5.0, 6.0, 7.0]] and s.extras["row_score"].tolist() == [6.0]
    t = b.trimmed()  # longest loss mask is 3 columns
    assert t.extras["token_weight"].shape == (2, 3) and t.extras["row_score"].shape == (2,)
    other = batch(lengths=(1,), T=2)
    other.extras.update(token_weight=torch.ones(1, 2), row_score=torch.tensor([9.0]))
    c = concat([b, other], pad_id=0)
    assert c.extras["token_weight"].shape == (3, 4)
    assert c.extras["token_weight"][2].tolist() == [1.0, 1.0, 0.0, 0.0]  # right-padded with 0
    assert c.extras["row_score"].tolist() == [5.0, 6.0, 9.0]


def test_bool_mask_select_equals_index_select():
    b = batch(lengths=(1, 2, 3, 4))
    keep = torch.tensor([True, False, True, False])
    assert b.select(keep).lengths.tolist() == b.select([0, 2]).lengths.tolist() == [1, 3]
