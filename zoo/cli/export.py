"""`zoo export RUN_DIR OUT_DIR`: the trained policy as a plain Hugging Face checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

from zoo.backends.train import checkpoint as ckpt


def export_run(run_dir: Path, out_dir: Path) -> Path:
    """Rebuild the run's policy from its model source, load the last checkpoint, merge LoRA, save.

    Raises FileNotFoundError when run_dir does not exist, has no config.yaml or no checkpoint, ValueError when out_dir
    is an existing file, a non-empty directory, or inside the run directory (checked before any model
    loads: nothing is overwritten). Logs a warning when the checkpoint is before the run's last step."""
    from zoo import models as zm
    from zoo.cli.common import run_dir_problem
    from zoo.study.run_file import load_run_config

    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ValueError(f"{out_dir}: exists and is a file; give a directory to write the checkpoint into")
    out, run = Path(out_dir).resolve(), Path(run_dir).resolve()
    if out == run or run in out.parents:
        raise ValueError(f"{out_dir}: inside the run directory {run_dir}; export to a folder of its own")
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(
            f"{out_dir}: exists and is not empty; export into a new or empty folder (nothing is overwritten)"
        )

    problem = run_dir_problem(Path(run_dir), "zoo export")
    if problem:
        raise FileNotFoundError(problem)
    cfg_file = Path(run_dir) / "config.yaml"
    state = ckpt.load(Path(run_dir) / "checkpoint")
    if state is None:
        raise FileNotFoundError(f"{run_dir}: no checkpoint/{ckpt.FILE} yet")
    cfg = load_run_config(cfg_file)
    if state["step"] < cfg.budget.steps:
        logging.getLogger("zoo.cli.export").warning(
            "%s is unfinished: exporting its checkpoint at step %d of %d (finish it first with zoo run --resume %s)",
            run_dir,
            state["step"],
            cfg.budget.steps,
            run_dir,
        )
    lora = cfg.model_opts.lora.model_dump() if cfg.model_opts.lora else None
    policy, tok = zm.load_policy(cfg.model, dtype=cfg.model_opts.dtype, lora=lora)
    if "shards" in state:  # a data-parallel run's: the weights are in its shards folder
        from zoo.backends.train.checkpoint_dcp import read_full

        ckpt.load_trainable_state(policy, read_full(Path(run_dir) / "checkpoint" / state["shards"], "policy"))
    else:
        ckpt.load_policy_state(policy, state["policy"])
    return zm.save_hf_checkpoint(policy, tok, out_dir)
