"""`zoo run --nproc N`: start the same command under `torchrun` on N local processes, for users who
do not want to write the launcher line themselves:

    zoo run run.yaml --nproc 2 --set training.strategy=ddp
    # runs: python -m torch.distributed.run --standalone --nproc_per_node 2 -m zoo.cli run run.yaml --set ...
"""

from __future__ import annotations

import os
import subprocess
import sys


def without_nproc(args: list[str]) -> list[str]:
    """`args` with every `--nproc N` / `--nproc=N` removed (the children must not launch again)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def torchrun_command(nproc: int, args: list[str]) -> list[str]:
    """The torchrun command line that runs `zoo <args>` (args start with the subcommand, e.g.
    ["run", "run.yaml", "--nproc", "2"]) on `nproc` processes of this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "zoo.cli",
        *without_nproc(args),
    ]


def launched() -> bool:
    """Whether this process was started by a launcher (torchrun / accelerate launch set WORLD_SIZE)."""
    return "WORLD_SIZE" in os.environ


def relaunch(nproc: int, args: list[str]) -> int:
    """Replace this process with torchrun running `zoo <args>` on `nproc` processes (same PID, so a
    scheduler's SIGTERM or a Ctrl-C reaches torchrun, which passes it on to every rank). Returns only
    where exec is unavailable: then torchrun's exit status."""
    cmd = torchrun_command(nproc, args)
    from zoo.run import threads

    threads.release()  # torchrun keeps this pid but runs no torch work; its ranks choose their own
    sys.stdout.flush()
    sys.stderr.flush()
    if hasattr(os, "execv"):
        os.execv(cmd[0], cmd)
    return subprocess.call(cmd)
