"""On-policy distillation in the step (zoo/step/distill.py, zoo/models/teacher.py): the reverse-KL signal
by hand, its discount and centring, no signal off the loss mask or when teacher == student, beta 0
leaves the advantages as they were, the teacher's own context on the token ids, the teachers."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_engine import make_batch

from zoo.config.distill import DistillSignal, DistillSpec, TeacherConfig
from zoo.models.teacher import open_teacher
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.distill import FIELD, discounted, distill, score_teacher, teacher_prompts, teacher_signal
from zoo.step.forwards import fill_rows, forward_logp
from zoo.step.types import StepSettings

OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
TEACHER = torch.tensor([[-1.5, -1.0, -0.5, -9.0]])
MASK = torch.tensor([[True, True, True, False]])  # d = [0.5, -1.0, 0.0, (masked)]


def test_reverse_kl_signal_by_hand():
    s, kl = teacher_signal(OLD, TEACHER, MASK, beta=2.0)
    assert s.tolist() == [[-1.0, 2.0, 0.0, 0.0]]  # -beta * (logp_old - logp_teacher)
    assert kl == pytest.approx(-0.5 / 3, rel=1e-6)  # the mean over the 3 trained tokens


def test_discount_gamma_by_hand():
    s, _ = teacher_signal(OLD, TEACHER, MASK, beta=2.0, gamma=0.5)
    # y_3 = 0, y_2 = 0 + 0.5 * 0 = 0, y_1 = 2 + 0 = 2, y_0 = -1 + 0.5 * 2 = 0
    assert s.tolist() == [[0.0, 2.0, 0.0, 0.0]]
    assert discounted(torch.tensor([[1.0, 1.0, 1.0]]), 0.5).tolist() == [[1.75, 1.5, 1.0]]


def test_centred_signal_by_hand():  # tinker-cookbook incorporate_kl_penalty: beta * (mean(d) - d_t)
    s, _ = teacher_signal(OLD, TEACHER, MASK, beta=2.0, center=True)
    mean = (0.5 - 1.0 + 0.0) / 3
    want = [2 * (mean - 0.5), 2 * (mean + 1.0), 2 * mean, 0.0]
    assert s[0].tolist() == pytest.approx(want, rel=1e-6)


def test_teacher_equal_to_student_gives_zero_signal():
    for center in (False, True):
        s, kl = teacher_signal(OLD, OLD.clone(), MASK, beta=3.0, gamma=0.9, center=center)
        assert torch.equal(s, torch.zeros_like(s)) and kl == 0.0


def test_padding_and_masked_tokens_give_no_signal():
    old, teacher = torch.randn(3, 5), torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]).bool()
    for center in (False, True):
        s, _ = teacher_signal(old, teacher, mask, beta=1.0, center=center)
        assert torch.equal(s[~mask], torch.zeros(int((~mask).sum())))


def _batch_with(adv: torch.Tensor) -> object:
    _, tok = tiny_model_and_tokenizer()
    b = make_batch(tok, seed=0, lengths=[4, 2], prompts=["1+1", "hi"])
    mask = b.loss_mask
    b = replace(b, logp_old=torch.randn(2, 4) * mask, advantages=adv, extras={FIELD: torch.randn(2, 4) * mask})
    return b


class _Slots:
    def __init__(self, spec):
        self.distill = DistillSignal(spec) if spec is not None else None


def test_beta_zero_leaves_the_advantages_bit_for_bit():
    adv = torch.randn(2, 4)
    b = _batch_with(adv.clone())
    out, m = distill(b, _Slots(DistillSpec(beta=0.0, gamma=0.7)))
    assert torch.equal(out.advantages, adv) and m["distill/beta"] == 0.0
    out, m = distill(b, _Slots(None))
    assert torch.equal(out.advantages, adv) and m == {}


def test_signal_is_added_to_the_normalised_advantage():
    adv = torch.randn(2, 4)
    b = _batch_with(adv.clone())
    out, _ = distill(b, _Slots(DistillSpec(beta=0.5)))
    want = adv - 0.5 * (b.logp_old - b.extras[FIELD]) * b.loss_mask
    assert torch.allclose(out.advantages, want, rtol=1e-6, atol=0)


def _settings() -> StepSettings:
    return StepSettings(
        temperature=1.0, micro_batch=4, max_new_tokens=4, epochs=1, minibatches=1, autocast="none", max_grad_norm=None
    )


def _prompt_batch(tok):
    b = make_batch(tok, seed=1, lengths=[3, 2], prompts=["ab", "xyz"])
    ids = [b.prompt_ids[i][b.prompt_mask[i].bool()].tolist() for i in range(2)]
    return replace(b, rows=[{"answer": "7"}, {"answer": "42"}]), ids


def test_the_teacher_reads_its_context_and_the_student_its_prompt():
    _, tok = tiny_model_and_tokenizer()
    b, ids = _prompt_batch(tok)
    t_ids, t_mask = teacher_prompts(b, tok, "A={answer};")
    for i, answer in enumerate(("7", "42")):
        ctx = tok(f"A={answer};", add_special_tokens=False)["input_ids"]
        assert t_ids[i][t_mask[i].bool()].tolist() == ctx + ids[i]  # the teacher: context, then the prompt
        assert b.prompt_ids[i][b.prompt_mask[i].bool()].tolist() == ids[i]  # the student: its prompt alone
    same = teacher_prompts(b, tok, None)
    assert same[0] is b.prompt_ids
    with pytest.raises(ValueError, match="teacher.context: cannot format"):
        teacher_prompts(b, tok, "{nosuch}")


def test_current_teacher_without_context_scores_as_the_policy():
    model, tok = tiny_model_and_tokenizer()
    b, _ = _prompt_batch(tok)
    cfg = TeacherConfig(batch_size=1)
    out = score_teacher(b, open_teacher("current", model, cfg), cfg, tok, _settings())
    want = fill_rows(b, [forward_logp(model, b, _settings())[0].detach()], [torch.arange(2)])
    assert torch.allclose(out.extras[FIELD], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(out.extras[FIELD][~b.loss_mask], torch.zeros(int((~b.loss_mask).sum())))


def test_ema_teacher_moves_by_alpha_and_frozen_stays():
    model, _ = tiny_model_and_tokenizer()
    ema = open_teacher({"name": "ema", "alpha": 0.25}, model, TeacherConfig())
    frozen = open_teacher("frozen", model, TeacherConfig())
    w0 = model.lm_head.weight.detach().clone()
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    ema.after_update(model)
    frozen.after_update(model)
    assert torch.allclose(ema.model.lm_head.weight, w0 + 0.25, rtol=1e-6)
    assert torch.equal(frozen.model.lm_head.weight, w0)
    ema.close()
    with pytest.raises(RuntimeError, match="closed"):
        with ema.forward():
            pass


def test_frozen_teacher_with_lora_is_the_adapters_disabled_forward():
    peft = pytest.importorskip("peft")
    model, tok = tiny_model_and_tokenizer()
    b, _ = _prompt_batch(tok)
    base = forward_logp(model, b, _settings())[0].detach()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # move the adapters: the student now differs from the base
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
    teacher = open_teacher("frozen", lora, TeacherConfig())
    assert teacher.model is lora  # one model serves both
    with teacher.forward() as m:
        t = forward_logp(m, b, _settings())[0]
    assert torch.allclose(t, base, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(forward_logp(lora, b, _settings())[0].detach(), base, rtol=1e-3, atol=1e-4)


def test_the_distill_block_resolves_for_show_and_diff():
    from zoo.config.variant import load_variant

    r = load_variant("self_distill").resolved()
    assert r["distill"]["teacher"] == {"name": "ema", "alpha": 0.01} and r["distill"]["beta"] == 1.0
    assert "distill" not in load_variant("grpo").resolved()  # plain variants resolve as before
    assert load_variant("on_policy_distill", {"distill.beta": 0.0}).distill.beta == 0.0


def test_the_vocabulary_forward_gives_forward_logps_and_the_teachers_distribution():
    from zoo.step.distill_vocab import teacher_vocab, vocab_forward

    model, tok = tiny_model_and_tokenizer()
    b, _ = _prompt_batch(tok)
    logp, ent, vocab = vocab_forward(model, b, _settings())
    want, went = forward_logp(model, b, _settings(), with_entropy=True)
    m = b.loss_mask
    assert torch.allclose(logp[m], want[m], rtol=1e-5, atol=1e-6) and torch.allclose(ent[m], went[m], rtol=1e-5)
    assert torch.allclose(vocab.exp().sum(-1), torch.ones(m.shape), rtol=1e-5)
    assert logp.requires_grad and vocab.requires_grad
    t = teacher_vocab(model, b, 1.0, [torch.tensor([1]), torch.tensor([0])], _settings())  # rows out of order
    assert torch.allclose(t[m], vocab.detach()[m], rtol=1e-5, atol=1e-6)
    assert torch.equal(t[~m], torch.zeros_like(t[~m]))


def test_a_context_of_messages_goes_into_the_teachers_chat_before_the_prompt():
    from zoo.backends.generate.hf import encode_prompts

    _, tok = tiny_model_and_tokenizer()
    prompts = [
        [{"role": "system", "content": "S"}, {"role": "user", "content": "1+1"}],
        [{"role": "user", "content": "hi"}],
    ]
    ids, pmask = encode_prompts(tok, prompts)
    b = replace(
        make_batch(tok, seed=2, lengths=[2, 3], prompts=["1+1", "hi"]),
        prompt_ids=ids,
        prompt_mask=pmask.bool(),
        rows=[{"prompt": prompts[0], "answer": "2"}, {"prompt": prompts[1], "answer": "?"}],
    )
    turns = [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4 ({answer})"}]
    t_ids, t_mask = teacher_prompts(b, tok, turns)
    want = [
        [prompts[0][0], {"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4 (2)"}, prompts[0][1]],
        [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4 (?)"}, prompts[1][0]],
    ]
    w_ids, w_mask = encode_prompts(tok, want)
    for i in range(2):  # the teacher: the worked turns inside its chat (after the system message)
        assert t_ids[i][t_mask[i].bool()].tolist() == w_ids[i][w_mask[i].bool()].tolist()
    assert torch.equal(b.prompt_ids, ids)  # the student's prompt is untouched
