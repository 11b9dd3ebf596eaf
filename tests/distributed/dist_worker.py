"""Worker for tests/distributed/test_distributed.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/dist_worker.py OUT_DIR

Each rank runs `update` on its own, deliberately unequal share of one fixed batch and saves
what it ends with under OUT_DIR; the test compares that with one process updating on the whole
batch. `build_case` is shared by both sides so they start from the same model and rows.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

TESTS = (
    Path(__file__).resolve().parents[1]
)  # tests/ (conftest: every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

PROMPTS = ["1+1", "What is 12 + 30?", "hi", "a much longer prompt than the others", "7 * 6 ="]
LENGTHS = [1, 6, 3, 2, 5]  # real completion tokens per row
SHARES = [[0], [1, 2, 3, 4]]  # rank 0: 1 row / 1 token, rank 1: 4 rows / 16 tokens
AGGREGATES = ["token_mean", "seq_mean_token_mean"]


def build_case(aggregate: str):
    """(model, tokenizer, batch, slots, settings) - identical in every process."""
    from zoo.backends.generate.hf import encode_prompts
    from zoo.config.variant import load_variant
    from zoo.core.batch import Batch
    from zoo.models.tiny import tiny_model_and_tokenizer
    from zoo.step.types import Slots, StepSettings

    model, tok = tiny_model_and_tokenizer(seed=7)
    g = torch.Generator().manual_seed(11)
    ids, pmask = encode_prompts(tok, PROMPTS)
    N, T = len(LENGTHS), max(LENGTHS)
    comp = torch.randint(5, len(tok), (N, T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]
    comp = torch.where(mask, comp, torch.full_like(comp, tok.pad_token_id))
    adv = torch.where(mask, torch.randn(N, generator=g)[:, None].expand(N, T), torch.zeros(N, T))
    batch = Batch(
        prompt_ids=ids,
        prompt_mask=pmask.bool(),
        completion_ids=comp,
        loss_mask=mask,
        group_ids=torch.arange(N),
        truncated=torch.zeros(N, dtype=torch.bool),
        lengths=torch.tensor(LENGTHS),
        advantages=adv,
    )
    slots = Slots.of(load_variant("grpo", {"aggregate": aggregate, "kl": "none"}))
    s = StepSettings(
        temperature=1.0, micro_batch=2, max_new_tokens=T, epochs=1, minibatches=1, autocast="none", max_grad_norm=None
    )
    return model, tok, batch, slots, s


def correction_case():
    """build_case("token_mean") with the sampler's log-probs: the trainer's plus delta in [-0.8, 0.8]
    (rho = exp(-delta) in [0.45, 2.2]) and the correction mis [0.6, 1.5], which masks some tokens."""
    from zoo.core import registry
    from zoo.core.batch import replace
    from zoo.step.logprobs import token_logprobs

    model, tok, batch, slots, s = build_case("token_mean")
    with torch.no_grad():
        old, _ = token_logprobs(model, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    delta = torch.linspace(-0.8, 0.8, old.numel()).reshape(old.shape)
    batch = replace(batch, logp_rollout=torch.where(batch.loss_mask, old + delta, torch.zeros_like(old)))
    slots.correction = [registry.build("correction", {"name": "mis", "c_low": 0.6, "c_high": 1.5})]
    return model, tok, batch, slots, s


def normalizer_case():
    """(adv [5, 6], mask [5, 6], group_ids [5], batch_std normalizer) with a non-zero batch mean."""
    from zoo.core import registry

    g = torch.Generator().manual_seed(3)
    N, T = len(LENGTHS), max(LENGTHS)
    mask = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]
    adv = torch.where(mask, 2.0 + torch.randn(N, T, generator=g), torch.zeros(N, T))
    return (
        adv,
        mask,
        torch.tensor([0, 0, 1, 1, 2]),
        registry.build("normalizer", {"name": "batch_std", "shift_mean": True}),
    )


def normalize_share(rank: int) -> list[list[float]]:
    """This rank's rows, trimmed to their own longest length, normalised over both ranks' rows."""
    from zoo.step.advantages import normalize_global

    adv, mask, gids, norm = normalizer_case()
    rows = SHARES[rank]
    T = max(LENGTHS[i] for i in rows)
    return normalize_global(norm, adv[rows, :T], mask[rows, :T], gids[rows]).tolist()


DIAG_SHARES = [[0, 1], [2, 3]]  # one group per rank (a group never spans ranks)
DIAG_ARGS = (["correctness", "r2", "const"], [1.0, 0.1, 1.0], 2, 0)  # names, weights, n_rewards, accuracy column


def diagnostics_share(rank: int) -> dict:
    """zoo.step.diagnostics on this rank's group of test_diagnostics' two-group batch."""
    import conftest  # noqa: F401  (puts tests/step, test_diagnostics' folder, on sys.path)
    from test_diagnostics import two_group_batch

    from zoo.step.diagnostics import step_diagnostics

    return step_diagnostics(two_group_batch().select(DIAG_SHARES[rank]), *DIAG_ARGS)


def run_update(model, tok, batch, slots, s) -> dict[str, float]:
    from zoo.backends.train import strategy
    from zoo.core import dist
    from zoo.step.types import Models
    from zoo.step.update import update

    par = strategy.wrap(model, None, None, "ddp", torch.device("cpu")) if dist.is_distributed() else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    return update(batch, Models(policy=model, tokenizer=tok, reference=None, parallel=par), slots, s, opt, None)


def main(out: Path, model_dir: Path | None = None) -> None:
    import torch.distributed as td

    from zoo.core import dist
    from zoo.step.update import step_counts

    torch.set_num_threads(1)
    td.init_process_group("gloo")
    rank = td.get_rank()
    report: dict = {"rank": rank, "world_size": dist.world_size(), "is_distributed": dist.is_distributed()}

    x = torch.tensor([rank + 1.0, 10.0])
    report["all_reduce_sum"] = dist.all_reduce_sum(x).tolist()
    report["input_unchanged"] = x.tolist() == [rank + 1.0, 10.0]
    report["mean_dict"] = dist.all_reduce_mean_dict({"a": float(rank), "b": 4.0})

    report["batch_std"] = normalize_share(rank)
    report["diagnostics"] = diagnostics_share(rank)

    for agg in AGGREGATES:
        model, tok, batch, slots, s = build_case(agg)
        mine = batch.select(SHARES[rank])
        c = step_counts(mine.loss_mask, s.max_new_tokens)
        report[f"counts/{agg}"] = [c.tokens, c.sequences, float(mine.loss_mask.sum())]
        report[f"metrics/{agg}"] = run_update(model, tok, mine, slots, s)
        torch.save({k: v.detach() for k, v in model.named_parameters()}, out / f"params_{agg}_rank{rank}.pt")

    model, tok, batch, slots, s = correction_case()
    report["metrics/correction"] = run_update(model, tok, batch.select(SHARES[rank]), slots, s)

    if model_dir is not None:
        report["train"] = run_train(out, model_dir, rank)
        report["train_kl"] = run_train_adaptive_kl(out, model_dir)
    (out / f"report_rank{rank}.json").write_text(json.dumps(report))
    td.barrier()
    td.destroy_process_group()


def _keep_states(trainer) -> tuple[list, object]:
    """Wrap `trainer.setup` so every RunState it builds is kept; returns (states, the real setup)."""
    states: list = []
    real_setup = trainer.setup

    def keep_setup(*a, **kw):
        states.append(real_setup(*a, **kw))
        return states[-1]

    trainer.setup = keep_setup
    return states, real_setup


def run_train(out: Path, model_dir: Path, rank: int) -> dict:
    """`zoo.run.trainer.train` under data parallelism: 2 GRPO steps with LoRA on the tiny model."""
    from conftest import tiny_run_config

    from zoo.backends.generate import hf_generator as sample  # the `hf` generator's call of generate_rollout
    from zoo.run import trainer

    seen: list[str] = []
    real = sample.generate_rollout

    def spy(model, tok, prompts, **kw):
        seen.extend(str(p) for p in prompts)
        return real(model, tok, prompts, **kw)

    states, real_setup = _keep_states(trainer)
    sample.generate_rollout = spy
    cfg = tiny_run_config(
        model_dir,
        out / "run",
        variant="grpo",
        budget={"prompts_per_step": 2},
        model_opts={"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
        eval={"enabled": False},
        training={"strategy": "ddp"},
    )
    summary = trainer.train(cfg, progress=False)
    sample.generate_rollout, trainer.setup = real, real_setup
    policy = states[-1].models.policy
    torch.save(
        {k: v.detach().clone() for k, v in policy.named_parameters() if v.requires_grad},
        out / f"train_params_rank{rank}.pt",
    )
    return {"summary": {k: summary.get(k) for k in ("status", "steps", "loss/policy", "reward/total")}, "prompts": seen}


def run_train_adaptive_kl(out: Path, model_dir: Path) -> dict:
    """reinforce_pp (batch_std over the global batch, KL in the reward) with an adaptive beta on two
    ranks: the beta each rank ends with and the advantages' global statistics."""
    from conftest import tiny_run_config

    from zoo.run import trainer

    states, real_setup = _keep_states(trainer)
    cfg = tiny_run_config(
        model_dir,
        out / "run_kl",
        variant="reinforce_pp",
        budget={"prompts_per_step": 2},
        set={"kl.beta": 0.1, "kl.adaptive": {"target": 0.5, "horizon": 8}},
        eval={"enabled": False},
        training={"strategy": "ddp"},
    )
    summary = trainer.train(cfg, progress=False)
    trainer.setup = real_setup
    return {"status": summary.get("status"), "beta": states[-1].controllers[0].beta}


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
