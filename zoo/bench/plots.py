"""The plot of a `zoo bench --scan`: per-phase step time (stacked) and peak memory against the
scanned value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def plot_scan(res: dict[str, Any], path: str | os.PathLike) -> Path:
    """Stacked per-phase step time and peak memory against the scanned value (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = res["points"]
    xs = [p["value"] for p in pts]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    bottom = [0.0] * len(xs)
    for ph in ("generate", "forward", "score", "advantage", "train"):
        ys = [p["phases"][ph] for p in pts]
        a1.bar([str(x) for x in xs], ys, bottom=bottom, label=ph)
        bottom = [b + y for b, y in zip(bottom, ys)]
    a1.plot([str(x) for x in xs], [p["step_s"] for p in pts], "k.-", label="step")
    a1.set_xlabel(res["key"])
    a1.set_ylabel("seconds per step (median)")
    a1.legend(fontsize=8)
    a2.plot(xs, [p["peak_mb"] / 1024 for p in pts], "o-", label="peak")
    a2.plot(
        xs,
        [(p["memory"]["peak_mb"] - p["memory"]["activations_mb"]) / 1024 for p in pts],
        "s--",
        label="runtime+weights+grads+optimizer",
    )
    a2.set_ylim(bottom=0)
    a2.set_xscale("log", base=2)
    a2.set_xticks(xs, [str(x) for x in xs])
    a2.set_xlabel(res["key"])
    a2.set_ylabel("GiB")
    a2.legend(fontsize=8)
    s = res["spec"]
    fixed = {
        "prompts": f"prompts {s['prompts']}",
        "group_size": f"G {s['group_size']}",
        "max_new_tokens": f"max new tokens {s['max_new_tokens']}",
        "micro_batch": f"micro-batch {s['micro_batch']}",
    }
    fixed.pop(res["key"], None)
    fig.suptitle(
        f"{s['variant']} ({'LoRA' if s['lora'] else 'full'}, autocast {s['autocast']}): {res['key']} scan, "
        + ", ".join(fixed.values())
        + (", EOS ignored" if s.get("ignore_eos") else "")
        + f"; median of {s['steps']} steps",
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
