"""`zoo rm train RM.yaml` and `zoo rm pairs PAIRS.yaml` (registered on `zoo.cli.common.app` as the `rm`
group): reward-model training and preference pairs from a task (zoo.rm)."""

from __future__ import annotations

from typing import List, Optional

import typer

from zoo.cli.common import app, console, parse_sets, print_json, quiet_logs

rm_app = typer.Typer(
    help="Reward models: train one on preference pairs, or make pairs from a task with gold answers.",
    no_args_is_help=True,
)
app.add_typer(rm_app, name="rm")


@rm_app.command("train")
def rm_train(
    path: str = typer.Argument(..., help="an RM file (see experiments/reward_hacking/rm.yaml)"),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="override a key, e.g. --set lr=1e-4"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Train a scalar reward model with the Bradley-Terry loss; writes <output_dir>/model (an HF checkpoint
    the `reward_model` reward loads) and reports held-out pairwise accuracy before and after."""
    from zoo.rm.config import RMTrainConfig, load_config
    from zoo.rm.train import train_reward_model

    quiet_logs()
    cfg = load_config(path, RMTrainConfig, parse_sets(set_ or []))
    s = train_reward_model(cfg, progress=not json_out)
    if json_out:
        print_json(s)
        return
    console.print(
        f"held-out pairwise accuracy {s['eval/accuracy/before']:.3f} -> [bold]{s['eval/accuracy/after']:.3f}[/] "
        f"on {s['pairs/eval']} pairs ({s['pairs/train']} trained, {s['steps']} steps, "
        f"{s['time/total_s']:.0f} s); reward model: {s['model']}",
        highlight=False,
        soft_wrap=True,
    )


@rm_app.command("pairs")
def rm_pairs(
    path: str = typer.Argument(..., help="a pairs file (see experiments/reward_hacking/pairs.yaml)"),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="override a key, e.g. --set length_bias=0.8"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Sample the policy on a task with gold answers and write chosen (correct) / rejected (incorrect)
    pairs as JSONL, with an optional length confound (length_bias) and length-following label noise."""
    from zoo.rm.config import PairsConfig, load_config
    from zoo.rm.pairs import make_pairs_file

    quiet_logs()
    cfg = load_config(path, PairsConfig, parse_sets(set_ or []))
    s = make_pairs_file(cfg, progress=not json_out)
    if json_out:
        print_json(s)
        return
    console.print(
        f"{s['pairs']} pairs from {s['prompts']} prompts -> {s['output']} (chosen longer in "
        f"{s['chosen_longer_frac']:.2f}, chosen correct in {s['chosen_correct_frac']:.2f}; "
        f"{s['prompts_without_pair']} prompts gave no pair)",
        highlight=False,
        soft_wrap=True,
    )
