"""The run's generator from `sampling.backend` (a name or {name, params} of the `generator` kind):
resolved once per run by the trainer, recorded in the run's fingerprint."""

from __future__ import annotations

from typing import Any, Sequence

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


def build_generator(spec: Any, policy: nn.Module, tokenizer, processor: Any = None) -> Any:
    """The `zoo.core.kinds.Generator` of `spec` over the policy module and its tokenizer; with a
    vision-language policy's `processor`, one that samples with images (it has a `processor`
    attribute: the `hf` generator). Raises ComponentError (also for a generator without images)."""
    gen = build("generator", spec)(policy, tokenizer)
    if processor is not None:
        if not hasattr(gen, "processor"):
            raise ComponentError(f"generator {spec!r} cannot sample with images in prompts; use 'hf'")
        gen.processor = processor
    return gen


def row_images(rows: Sequence[dict]) -> list[list[Any]] | None:
    """Each row's `images` (a list, [] for a row without), or None when no row has the key (text)."""
    if not any("images" in r for r in rows):
        return None
    return [list(r.get("images") or []) for r in rows]


def generate_rows(generator: Any, rows: Sequence[dict], group_size: int, sampling: Any) -> Any:
    """`generator.generate` over the rows' prompts, with their images when a row carries `images`
    (zoo.core.media; docs/guides/images.md): the one place a task row's images enter a rollout."""
    prompts = [r["prompt"] for r in rows]
    images = row_images(rows)
    if images is None:
        return generator.generate(prompts, group_size, sampling)
    return generator.generate(prompts, group_size, sampling, images)


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
