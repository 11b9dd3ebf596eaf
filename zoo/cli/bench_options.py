"""`zoo bench`'s option checks that are more than a typer range: --strategy/--nproc against the mode,
and --backend values to generator specs (each raises ValueError naming the option)."""

from __future__ import annotations

from typing import Any, List


def check_launch(strategy: str, nproc: int | None, launched: bool, modes: int) -> None:
    """Raise ValueError where `--strategy` / `--nproc` cannot run: an unknown strategy, ddp/fsdp
    without --nproc or a launcher, --nproc N > 1 with single, or --nproc with --vs/--memory/--scan
    (their workers are single processes)."""
    from zoo.backends.train.strategy import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if strategy != "single" and nproc is None and not launched:
        raise ValueError(
            f"--strategy {strategy} needs processes: add --nproc N (zoo bench grpo --strategy "
            f"{strategy} --nproc 2) or start it under torchrun"
        )
    if strategy == "single" and (nproc or 1) > 1:
        raise ValueError(
            f"--nproc {nproc} with --strategy single: nothing would combine the ranks' gradients; "
            "add --strategy ddp or fsdp"
        )
    if (nproc is not None or strategy != "single") and modes:
        raise ValueError("--strategy/--nproc bench one configuration: not with --vs, --memory or --scan")


def parse_backends(values: List[str]) -> list[Any]:
    """--backend values -> generator specs: each value a comma list of names, or one YAML mapping
    ('{name: noisy, sigma: 0.1}'); default ["hf"]. Raises ValueError naming --backend for an empty name,
    a bad mapping or a spec that does not build (unknown names list the known generators)."""
    import yaml

    from zoo.backends.generate.backend import backend_error

    specs: list[Any] = []
    for v in values:
        if v.strip().startswith("{"):
            try:
                m = yaml.safe_load(v)
            except yaml.YAMLError as e:
                raise ValueError(f"--backend {v!r}: not a YAML mapping ({e})") from None
            if not isinstance(m, dict):
                raise ValueError(f"--backend {v!r}: expected a mapping such as '{{name: noisy, sigma: 0.1}}'")
            specs.append(m)
            continue
        names = [x.strip() for x in v.split(",")]
        if not all(names):
            raise ValueError(f"--backend {v!r}: empty name; use e.g. --backend hf,noisy")
        specs += names
    for sp in specs:
        e = backend_error(sp)
        if e:
            raise ValueError(f"--backend: {e.removeprefix('sampling.backend: ')}")
    return specs or ["hf"]
