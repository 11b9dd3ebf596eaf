"""Images in prompts, checked before any weights load (issue 32 §1, docs/guides/images.md): a task whose
rows carry `images` needs a vision-language policy, and a vision-language policy a task with images;
images are sampled by the `hf` generator only, and not in multi-turn (`task.env`) rollouts.

Whether the policy takes images is read from its config.json alone (a `vision_config`): the
`tiny-vlm:` models are by name, `arms:` and the embedded model are text; a local directory's file is
read; a Hub id's is read from the local HF cache when it is there, else the check says it could not
tell (a note) and `zoo run` checks again once the model loads (`after_load`)."""

from __future__ import annotations

import json
from typing import Any

from zoo.checks import inputs, settings
from zoo.checks.registry import AfterLoad, BeforeLoad, Report, check


def task_has_images(spec: Any) -> bool | None:
    """Whether any row of task `spec` carries `images`: an `hf` / `jsonl` task with an `image_column`
    does (even where its dataset cannot be loaded here), else its rows say; None when they do not load
    (`task` says why)."""
    if isinstance(spec, dict) and spec.get("image_column"):
        return True
    try:
        return any("images" in r for r in inputs.task_rows(spec))
    except Exception:  # noqa: BLE001 - the `task` check reports the load error
        return None


def model_takes_images(name: Any) -> bool | None:
    """Whether model `name` is a vision-language model, from its config.json without loading weights;
    None when its config is not on this machine (a Hub id not in the HF cache)."""
    from zoo.models.sources import ARMS_PREFIX, EMBEDDED_ALIASES
    from zoo.models.tiny_vlm import TINY_VLM_PREFIX

    m = str(name).strip()
    if m.startswith(TINY_VLM_PREFIX):
        return True
    if m in EMBEDDED_ALIASES or m.startswith(ARMS_PREFIX):
        return False
    d = settings.local_path(m)
    path = d / "config.json" if d is not None else _cached_config(m)
    if path is None or not path.is_file():
        return None
    return "vision_config" in json.loads(path.read_text())


def _cached_config(hub_id: str):
    """The config.json of Hub id `hub_id` in the local HF cache, or None (nothing is downloaded)."""
    from pathlib import Path

    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(hub_id, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id: the model_path check says so
        return None
    return Path(found) if isinstance(found, str) else None


def mismatch(has_images: bool | None, takes_images: bool | None, model: Any, task: Any) -> str | None:
    """The error line when the task's rows and the policy disagree about images, else None."""
    name = task.get("name") if isinstance(task, dict) else task
    if has_images and takes_images is False:
        return (
            f"task: {name!r} rows carry `images`, but model {str(model)!r} is a text-only policy (its "
            "config.json has no vision_config): use a vision-language model (e.g. tiny-vlm:qwen2vl)"
        )
    if has_images is False and takes_images:
        return (
            f"model: {str(model)!r} is a vision-language model (its config.json has a vision_config), but "
            f"task {name!r} rows carry no `images`: use an image task (e.g. image_shapes) or a text model"
        )
    return None


@check("images", "before_load")
def images(s: BeforeLoad, rep: Report) -> None:
    """The task's `images` against the policy (`mismatch`), the generators and the environment."""
    cfg = s.cfg
    from zoo.models.tiny_vlm import TINY_VLM_KINDS, TINY_VLM_PREFIX

    m = str(cfg.model).strip()
    if m.startswith(TINY_VLM_PREFIX) and m[len(TINY_VLM_PREFIX) :] not in TINY_VLM_KINDS:
        known = ", ".join(TINY_VLM_PREFIX + k for k in TINY_VLM_KINDS)
        rep.errors.append(f"model: unknown tiny VLM {m!r}; known: {known}")
        return
    has, takes = task_has_images(cfg.task), model_takes_images(cfg.model)
    if (err := mismatch(has, takes, cfg.model, cfg.task)) is not None:
        rep.errors.append(err)
    elif has and takes is None:
        rep.notes.append(
            f"model {cfg.model}: its config.json is not on this machine (not in the HF cache), so whether it "
            "takes the task's images is checked when `zoo run` loads it"
        )
    if not has:
        return
    for key, spec in (("sampling.backend", cfg.sampling.backend), ("eval.backend", cfg.eval.backend)):
        named = spec.get("name") if isinstance(spec, dict) else spec
        if named not in (None, "hf"):
            rep.errors.append(f"{key}: {named!r} cannot sample with images in prompts; use 'hf'")
    if isinstance(cfg.task, dict) and cfg.task.get("env"):
        rep.errors.append("task.env: multi-turn rollouts do not carry images; remove task.env or the images")
    from zoo.config.run import async_opts

    if async_opts(cfg) is not None:  # its rollout workers sample prompts without their images
        rep.errors.append("async: asynchronous rollouts do not carry images yet; remove async or the images")


@check("images_loaded", "after_load")
def images_loaded(s: AfterLoad, rep: Report) -> None:
    """`mismatch` again on the loaded model's config (a Hub model `images` could not read before)."""
    has = any("images" in r for r in s.rows) if s.rows else None
    takes = getattr(s.model_config, "vision_config", None) is not None
    if (err := mismatch(has, takes, s.cfg.model, s.cfg.task)) is not None:
        rep.errors.append(err)
