# Feeds docs/results/recipe.md "The grid": one markdown row per run folder of experiments/recipe_grid.yaml
# or experiments/learning_curve.yaml.
"""One row per run: lr, machine (the MACHINE environment variable, default "-"), seed, held-out accuracy at each evaluation, after - before paired over the
prompts (the report's bootstrap, zoo.study.report.eval_delta), entropy first -> last (max), KL to the
reference mean (max), the fraction of groups whose reward varies, training wall time.

Usage: MACHINE=A python bench/recipe_cells.py runs/recipe_grid/grpo-* runs/learning_curve/grpo-s*
"""

import json
import os
import statistics as st
import sys
from pathlib import Path

import yaml

from zoo.study.report.eval_delta import paired_delta


def row(d: Path) -> str:
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    recs = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    tr = [r for r in recs if "time/step" in r]  # one record per training step
    ev = {int(r["step"]): r["eval/greedy_acc"] for r in recs if "eval/greedy_acc" in r}
    ep = json.loads((d / "eval_prompts.json").read_text())
    e = paired_delta(ep["before"], ep["after"])
    ent, kl = [r["entropy"] for r in tr], [r["kl/ref"] for r in tr]
    sig = [1 - r["groups/zero_var_frac"] for r in tr]
    accs = " → ".join(f"{ev[s]:.2f}" for s in sorted(ev))
    return (
        f"| {format(cfg['optim']['lr'], '.0e').replace('e-0', 'e-')} | {os.environ.get('MACHINE', '-')} | {cfg['seed']} | {accs} | {e.delta:+.2f} [{e.low:+.2f}, {e.high:+.2f}] "
        f"| {ent[0]:.2f} → {ent[-1]:.2f} ({max(ent):.2f}) | {st.mean(kl):.3f} ({max(kl):.3f}) | {st.mean(sig):.2f} "
        f"| {tr[-1]['time/elapsed']:.0f} |"
    )


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(row(Path(arg)))
