# Feeds docs/results/recipe.md "The grid" (one markdown row per run folder of experiments/recipe_grid.yaml
# or experiments/learning_curve.yaml) and, with --transfer, "The recipe beyond one task" (experiments/recipe_transfer.yaml).
"""One row per run: lr, machine (the MACHINE environment variable, default "-"), seed, held-out accuracy at each evaluation, after - before paired over the
prompts (the report's bootstrap, zoo.study.report.eval_delta), entropy first -> last (max), KL to the
reference mean (max), the fraction of groups whose reward varies, training wall time.

Usage: MACHINE=A python bench/recipe_cells.py runs/recipe_grid/grpo-* runs/learning_curve/grpo-s*
       MACHINE=A python bench/recipe_cells.py --transfer runs/recipe_transfer/g*
(--transfer: group size x prompts per step, lr and temperature first, and the correctness-only signal fraction.)
"""

import json
import os
import statistics as st
import sys
from pathlib import Path

import yaml

from zoo.study.report.eval_delta import paired_delta


def _read(d: Path):
    """(config, every metrics record, the training steps' records, the paired after - before) of a run folder."""
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    recs = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    tr = [r for r in recs if "time/step" in r]  # one record per training step
    ep = json.loads((d / "eval_prompts.json").read_text())
    return cfg, recs, tr, paired_delta(ep["before"], ep["after"])


def _lr(cfg) -> str:
    return format(cfg["optim"]["lr"], ".0e").replace("e-0", "e-")


def _dynamics(tr) -> str:
    """Entropy first -> last (max), KL to the reference mean (max)."""
    ent, kl = [r["entropy"] for r in tr], [r["kl/ref"] for r in tr]
    return f"{ent[0]:.2f} → {ent[-1]:.2f} ({max(ent):.2f}) | {st.mean(kl):.3f} ({max(kl):.3f})"


def row(d: Path) -> str:
    cfg, recs, tr, e = _read(d)
    ev = {int(r["step"]): r["eval/greedy_acc"] for r in recs if "eval/greedy_acc" in r}
    sig = [1 - r["groups/zero_var_frac"] for r in tr]
    accs = " → ".join(f"{ev[s]:.2f}" for s in sorted(ev))
    return (
        f"| {_lr(cfg)} | {os.environ.get('MACHINE', '-')} | {cfg['seed']} | {accs} | {e.delta:+.2f} [{e.low:+.2f}, {e.high:+.2f}] "
        f"| {_dynamics(tr)} | {st.mean(sig):.2f} | {tr[-1]['time/elapsed']:.0f} |"
    )


TRANSFER_HEAD = (
    "| group size x prompts | lr | T | machine | seed | accuracy before → after | after − before [95% CI, prompts] "
    "| signal frac | correct-signal frac | entropy first → last (max) | KL mean (max) | s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def transfer_row(d: Path) -> str:
    cfg, _, tr, e = _read(d)
    sig = st.mean(r["groups/signal_frac"] for r in tr)
    csig = st.mean(r["groups/correct_signal_frac"] for r in tr)
    b = cfg["budget"]
    return (
        f"| {b['group_size']} x {b['prompts_per_step']} | {_lr(cfg)} "
        f"| {cfg['sampling']['temperature']:g} | {os.environ.get('MACHINE', '-')} | {cfg['seed']} "
        f"| {e.before:.2f} → {e.after:.2f} | {e.delta:+.2f} [{e.low:+.2f}, {e.high:+.2f}] | {sig:.2f} | {csig:.2f} "
        f"| {_dynamics(tr)} | {tr[-1]['time/elapsed']:.0f} |"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--transfer":
        print(TRANSFER_HEAD)
        for arg in args[1:]:
            p = Path(arg) / "eval_prompts.json"
            if p.exists() and "after" in json.loads(p.read_text()):  # finished arms only
                print(transfer_row(Path(arg)))
    else:
        for arg in args:
            print(row(Path(arg)))
