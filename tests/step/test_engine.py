"""The step's update and forwards (zoo.step) on hand-built batches with a tiny model: the update's normalisation over micro-batches
(C2/C3), frozen old log-probs and clipping on later optimizer steps (C4), step counts."""

import copy

import pytest
import torch

from zoo.backends.generate.hf import encode_prompts
from zoo.config.variant import load_variant
from zoo.core.batch import Batch
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.forwards import rollout_forwards
from zoo.step.logprobs import token_logprobs
from zoo.step.types import Models, Slots, StepSettings
from zoo.step.update import step_counts, update

PROMPTS = ["1+1", "What is 12 + 30?", "hi", "a much longer prompt than the others", "7 * 6 ="]
LENGTHS = [1, 6, 3, 2, 5]  # completion tokens per row (T = 6): rows of very different lengths


def make_batch(tok, seed: int = 0, lengths=LENGTHS, prompts=PROMPTS) -> Batch:
    """Left-padded prompts, right-padded completions of `lengths` real tokens, random advantages."""
    g = torch.Generator().manual_seed(seed)
    ids, pmask = encode_prompts(tok, list(prompts))  # [N, P]
    N, T = len(lengths), max(lengths)
    comp = torch.randint(5, len(tok), (N, T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [N, T]
    comp = torch.where(mask, comp, torch.full_like(comp, tok.pad_token_id))
    adv = torch.randn(N, generator=g)[:, None].expand(N, T).clone() * mask  # sequence-level, 0 on padding
    return Batch(
        prompt_ids=ids,
        prompt_mask=pmask.bool(),
        completion_ids=comp,
        loss_mask=mask,
        group_ids=torch.arange(N),
        truncated=torch.zeros(N, dtype=torch.bool),
        lengths=torch.tensor(lengths),
        advantages=adv,
    )


def slots_for(aggregate: str = "token_mean", clip: str | dict = "ppo", variant: str = "grpo") -> Slots:
    return Slots.of(load_variant(variant, {"aggregate": aggregate, "clip": clip, "kl": "none"}))


def settings(micro_batch: int, epochs: int = 1, minibatches: int = 1, max_new_tokens: int = 6) -> StepSettings:
    return StepSettings(
        temperature=1.0,
        micro_batch=micro_batch,
        max_new_tokens=max_new_tokens,
        epochs=epochs,
        minibatches=minibatches,
        autocast="none",
        max_grad_norm=None,
    )


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def sgd_update(model, tok, batch, slots, s, lr=1.0) -> dict[str, float]:
    models = Models(policy=model, tokenizer=tok, reference=None)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return update(batch, models, slots, s, opt, None)


def reference_loss(model, batch: Batch, aggregate: str) -> torch.Tensor:
    """The step's loss written out by hand on the whole, untrimmed batch in one forward (ratio 1)."""
    logp, _ = token_logprobs(model, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    per_token = torch.where(batch.loss_mask, -batch.advantages * logp, torch.zeros_like(logp))  # [N, T]
    if aggregate == "token_mean":
        return per_token.sum() / batch.loss_mask.sum()
    assert aggregate == "seq_mean_token_mean"
    return (per_token.sum(1) / batch.loss_mask.sum(1)).sum() / batch.size


# ---------------------------------------------------------------- C2/C3 through update
@pytest.mark.parametrize("aggregate", ["token_mean", "seq_mean_token_mean"])
def test_c2_update_same_whatever_the_micro_batch(aggregate):
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    slots = slots_for(aggregate)
    start = params(model)

    # the hand-written loss's SGD step (lr 1): theta - grad
    ref = copy.deepcopy(model)
    reference_loss(ref, batch, aggregate).backward()
    want = {k: start[k] - p.grad for k, p in ref.named_parameters()}

    results = {}
    for mb in (1, 2, 100):
        m = copy.deepcopy(model)
        out = sgd_update(m, tok, batch, slots, settings(micro_batch=mb))
        results[mb] = params(m)
        assert out["optim/steps"] == 1.0
        for k in want:
            torch.testing.assert_close(results[mb][k], want[k], atol=2e-6, rtol=1e-5, msg=f"micro_batch={mb} {k}")
    # and the step really moved the weights (else the comparison above proves nothing)
    moved = max(float((results[1][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-4


def test_c2_wrong_normalisation_would_differ():
    """Sanity of the test above: per-micro-batch means (the C2 fault) give a different update."""
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    step_total = reference_loss(model, batch, "token_mean")
    per_mb = [reference_loss(model, batch.select([i]), "token_mean") for i in range(batch.size)]
    assert abs(float(step_total.detach()) - float(sum(per_mb).detach() / len(per_mb))) > 1e-3


def test_step_counts_single_process():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    c = step_counts(mask, max_new_tokens=7)
    assert (c.tokens, c.sequences, c.max_new_tokens) == (3.0, 2.0, 7)


def test_update_skips_a_step_without_tokens():
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    batch = Batch(**{**batch.__dict__, "loss_mask": torch.zeros_like(batch.loss_mask)})
    start = params(model)
    out = sgd_update(model, tok, batch, slots_for(), settings(micro_batch=2))
    assert "loss/policy" not in out
    for k, v in params(model).items():
        assert torch.equal(v, start[k])


# ---------------------------------------------------------------- C4 through update
def _record_ratios(slots: Slots) -> list[torch.Tensor]:
    """Wrap the clip rule so every call's ratios (real tokens only) are kept, in call order."""
    seen: list[torch.Tensor] = []
    inner = slots.clip

    def clip(logp, old, adv, mask):
        res = inner(logp, old, adv, mask)
        seen.append(res.ratio[mask.bool()].detach().clone())
        return res

    slots.clip = clip
    return seen


def _with_old_logp(model, tok, batch, slots, s) -> Batch:
    models = Models(policy=model, tokenizer=tok, reference=None)
    out = rollout_forwards(batch, models, slots, s)
    assert out.logp_old is not None, "several optimizer steps per rollout need frozen old log-probs"
    return out


@pytest.mark.parametrize("epochs,minibatches", [(1, 2), (2, 1)])
def test_c4_later_optimizer_steps_see_ratios_off_one(epochs, minibatches):
    model, tok = tiny_model_and_tokenizer(seed=4)
    s = settings(micro_batch=2, epochs=epochs, minibatches=minibatches)
    slots = slots_for()
    batch = _with_old_logp(model, tok, make_batch(tok, seed=1), slots, s)
    seen = _record_ratios(slots)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    out = update(
        batch,
        Models(policy=model, tokenizer=tok, reference=None),
        slots,
        s,
        opt,
        None,
        generator=torch.Generator().manual_seed(0),
    )
    assert out["optim/steps"] == 2.0
    # micro-batches of the first optimizer step are on-policy: ratio 1 (up to float noise)
    n_first = sum(len(mb) for mb in torch.arange(batch.size).tensor_split(minibatches)[0].split(2))
    first = torch.cat(seen[: -(-n_first // 2)])
    torch.testing.assert_close(first, torch.ones_like(first), atol=1e-5, rtol=0)
    later = torch.cat(seen[-(-n_first // 2) :])
    assert float((later - 1).abs().max()) > 1e-3, "the second optimizer step must see pi_now / pi_at_rollout"
    assert out["ratio/approx_kl"] > 0
    assert out["ratio/max"] != pytest.approx(1.0, abs=1e-4)


def test_c4_clip_fractions_on_a_crafted_case():
    """A large learning rate moves the policy far enough in the first minibatch step that the
    second one clips: clip fractions > 0, and the clipped tokens carry no gradient."""
    model, tok = tiny_model_and_tokenizer(seed=5)
    s = settings(micro_batch=8, epochs=1, minibatches=2)
    slots = slots_for()
    # the same rows twice: the second minibatch contains what the first one just pushed on
    prompts, lengths = PROMPTS + PROMPTS, LENGTHS + LENGTHS
    b = make_batch(tok, seed=2, lengths=lengths, prompts=prompts)
    b = Batch(
        **{
            **b.__dict__,
            "advantages": torch.where(b.loss_mask, torch.sign(b.advantages) * 5.0, 0.0),
            "group_ids": torch.arange(b.size) % 5,
        }
    )
    batch = _with_old_logp(model, tok, b, slots, s)
    seen = _record_ratios(slots)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    order = torch.Generator().manual_seed(0)
    out = update(batch, Models(policy=model, tokenizer=tok, reference=None), slots, s, opt, None, generator=order)
    assert len(seen) == 2
    torch.testing.assert_close(seen[0], torch.ones_like(seen[0]), atol=1e-5, rtol=0)
    assert float((seen[1] - 1).abs().max()) > 0.2
    assert out["clip/low_frac"] + out["clip/high_frac"] > 0


def test_c4_clipped_tokens_have_no_gradient():
    """Per-token check of C4 through the clip slot the engine uses: rollout -1.0, now -0.5."""
    slots = slots_for()
    logp = torch.tensor([[-0.5, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])
    adv = torch.tensor([[1.0, -1.0]])
    res = slots.clip(logp, old, adv, torch.ones(1, 2, dtype=torch.bool))
    torch.testing.assert_close(res.loss, torch.tensor([[-1.2, 1.648721]]), atol=1e-6, rtol=0)
    res.loss.sum().backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] != 0


def test_on_policy_single_update_needs_no_old_logprobs():
    model, tok = tiny_model_and_tokenizer(seed=4)
    s = settings(micro_batch=2)
    out = rollout_forwards(make_batch(tok), Models(policy=model, tokenizer=tok, reference=None), slots_for(), s)
    assert out.logp_old is None and out.logp_ref is None and out.values is None


def test_rollout_forwards_old_logprobs_match_one_forward():
    """Old log-probs computed micro-batch by micro-batch on trimmed rows equal one padded forward
    (C10 through the engine's own helpers), 0 on padding."""
    model, tok = tiny_model_and_tokenizer(seed=6)
    batch = make_batch(tok)
    out = _with_old_logp(model, tok, batch, slots_for(), settings(micro_batch=2, minibatches=2))
    with torch.no_grad():
        full, _ = token_logprobs(model, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    torch.testing.assert_close(out.logp_old[batch.loss_mask], full[batch.loss_mask], atol=1e-5, rtol=0)
    assert torch.all(out.logp_old[~batch.loss_mask] == 0)
