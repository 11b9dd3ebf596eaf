"""The run's generator from `sampling.backend` (a name or {name, params} of the `generator` kind):
resolved once per run by the trainer, recorded in the run's fingerprint."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.core.registry import ComponentError, build


def backend_error(spec: Any, key: str = "sampling.backend") -> str | None:
    """None when `spec` builds as a generator, else one line naming `key` (`sampling.backend` or
    `eval.backend`), what is wrong and the known generators (unknown names list them; unknown
    parameters list the allowed ones)."""
    try:
        build("generator", spec)
    except ComponentError as e:
        return f"{key}: {e}"
    return None


def backend_fingerprint(spec: Any) -> str | dict[str, Any]:
    """What the fingerprint records: the generator's name when it runs with its defaults and has none
    (`hf`, as runs recorded before the kind existed), else its resolved spec (name and every
    hyperparameter, defaults filled in). Raises ComponentError when it does not build."""
    resolved = build("generator", spec).spec()
    return resolved["name"] if len(resolved) == 1 else resolved


def build_generator(spec: Any, policy: nn.Module, tokenizer) -> Any:
    """The `zoo.core.kinds.Generator` of `spec` over the policy module and its tokenizer. Raises ComponentError."""
    return build("generator", spec)(policy, tokenizer)


def eval_generator(generator: Any) -> Any:
    """The generator a run evaluates with when `eval.backend` is unset: the run's own, or, for a wrapper
    that perturbs sampling only to study training (`noisy`), what it wraps: its `for_eval()`, followed
    until a generator has none. So every backend is evaluated with itself, without the perturbation."""
    while hasattr(generator, "for_eval"):
        inner = generator.for_eval()
        if inner is generator:
            break
        generator = inner
    return generator
