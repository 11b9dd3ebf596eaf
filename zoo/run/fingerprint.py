"""Fingerprints of a run's resolved config, and the rule for reusing a run folder.

A run folder's results belong to the config that produced them. `fingerprint(cfg)` hashes everything
that changes training: the variant as resolved (slots with overrides and defaults, group_size, updates),
model, model_opts, task, rewards, budget, optim, sampling, seed, ref_reset_every, teacher (when set), the
resolved precision and the generator (`sampling.backend` resolved: its name and every parameter,
defaults filled in; plain `hf` is recorded as "hf"). Not in it: name, output_dir, eval, checkpoint,
tracking, plugins (where a component comes from, not what it does: its resolved spec is in),
`sampling.batch_size` (how generation is split: in the provenance, and a resume that changes it warns),
`model_opts.cache_casts` (the same values either way).

`check_reuse(run_dir, cfg)` decides what a re-run may do with a folder that already holds results:

- same fingerprint: a finished run is skipped, an unfinished one resumes from its checkpoint;
- only `budget.steps` grew and `optim.schedule` is `constant`: continued from its checkpoint to the
  new total. A constant schedule's factor at step i does not depend on the total (warm-up included:
  it ramps over the first `warmup_steps` whatever the total), so the continued run is the run the new
  total would have trained. Linear and cosine decay over the total, so they cannot be continued;
- anything else (also a shrunk `budget.steps`): StaleRunError naming the changed keys, old -> new.

The record is `<run dir>/fingerprint.json` ({"digest", "fields"}), written when a run starts (and
rewritten when it is continued to a new total); the digest and fields also go into config.yaml and
summary.json.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from zoo.config.run import RunConfig, effective_variant
from zoo.config.variant import VariantError
from zoo.core.faults import write_guard

RECORD = "fingerprint.json"
_MISSING = object()


class StaleRunError(VariantError):
    """A run folder holds results of a different config; the message names the changed keys."""


def resolved_precision(cfg: RunConfig) -> str:
    """The mixed precision the forward passes use on this machine: `cfg.model_opts.autocast` with
    `auto` resolved (zoo.run.precision.resolve_autocast), so an arm trained in bf16 is not silently
    continued in fp32 on another machine."""
    import torch

    from zoo.run.precision import resolve_autocast

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return resolve_autocast(cfg.model_opts.autocast, device)[0]


def fingerprint_fields(cfg: RunConfig) -> dict[str, Any]:
    """The JSON-able fields a fingerprint hashes (see the module doc). Loads `cfg.plugins` so plugin
    components resolve. Raises VariantError when the variant does not resolve."""
    from zoo.core.registry import load_plugins

    load_plugins(cfg.plugins)
    v = effective_variant(cfg)
    ctx = {"max_new_tokens": cfg.budget.max_new_tokens}
    dump = cfg.model_dump(mode="json")
    if dump["budget"].get("critic_warmup") is None:  # unset: the fingerprints of runs from before the key stay
        dump["budget"].pop("critic_warmup", None)
    warmup = {"critic_warmup": v.critic_warmup} if v.critic_warmup else {}  # value pretraining changes training
    try:
        slots = v.resolved(ctx)
    except VariantError as e:  # a component the run's `set:` made invalid: the user's key first
        from zoo.config.user_keys import user_key_first

        raise VariantError(user_key_first(str(e), cfg)) from None
    if (slots.get("critic") or {}).get("init") == "policy":  # the default: older runs' digests stay
        slots["critic"].pop("init")
    _drop_issue34_defaults(slots)
    fields = {
        "variant": {
            "name": cfg.variant,
            "slots": slots,
            "group_size": v.group_size,
            "updates": v.updates.model_dump(mode="json"),
            **warmup,
        },
        **{
            k: dump[k]
            for k in (
                "model",
                "model_opts",
                "task",
                "rewards",
                "budget",
                "optim",
                "sampling",
                "seed",
                "ref_reset_every",
            )
        },
        **({"gold": dump["gold"]} if cfg.gold else {}),  # only when set: older runs' digests stay valid
        **({"teacher": dump["teacher"]} if cfg.teacher is not None else {}),  # a distill: run's teacher
        **({"async": dump["async"]} if dump.get("async") is not None else {}),  # an async: run's staleness bound
        "precision": resolved_precision(cfg),
        "generator": _generator(cfg),
    }
    fields["sampling"].pop("backend", None)  # recorded resolved, under "generator"
    if not fields["optim"].get("fused"):  # the default: the digests of runs from before the key stay
        fields["optim"].pop("fused", None)
    fields["sampling"].pop("batch_size", None)  # not what is trained: in provenance, a resume that changes it warns
    fields["model_opts"].pop("cache_casts", None)  # bit-identical values either way (zoo.models.cast_cache)
    return json.loads(json.dumps(fields, default=str))  # tuples -> lists, as they read back from JSON


def _drop_issue34_defaults(slots: dict[str, Any]) -> None:
    """Parameters added later at their default values (issue 34: kl.bias_correction false, gspo's
    advantage row_mean, tis's C_low null) leave the resolved slots, so the digests of older runs stay."""
    if isinstance(slots.get("kl"), dict) and slots["kl"].get("bias_correction") is False:
        slots["kl"].pop("bias_correction")
    clip = slots.get("clip")
    if isinstance(clip, dict) and clip.get("name") == "gspo" and clip.get("advantage") == "row_mean":
        clip.pop("advantage")
    for c in slots.get("correction") or []:
        if isinstance(c, dict) and c.get("name") == "tis" and c.get("C_low", 0) is None:
            c.pop("C_low")


def _generator(cfg: RunConfig) -> str | dict[str, Any]:
    """`sampling.backend` resolved (zoo.backends.generate.backend.backend_fingerprint): `hf`, or the
    generator's name and every parameter. Raises VariantError when it does not build."""
    from zoo.backends.generate.backend import backend_fingerprint
    from zoo.core.registry import ComponentError

    try:
        return backend_fingerprint(cfg.sampling.backend)
    except ComponentError as e:
        raise VariantError(f"sampling.backend: {e}") from None


def digest_of(fields: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of `fields` (sorted keys, no spaces)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint(cfg: RunConfig) -> tuple[str, dict[str, Any]]:
    """(digest, fields) of a run config: equal digests mean the same training. Raises VariantError."""
    fields = fingerprint_fields(cfg)
    return digest_of(fields), fields


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 1e-5}} -> {"optim.lr": 1e-5}; lists are leaves."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def compare(old_fields: Mapping[str, Any], new_fields: Mapping[str, Any]) -> list[str]:
    """The dotted keys whose values differ (or exist on one side only), sorted."""
    a, b = flatten(old_fields), flatten(new_fields)
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))


def describe(old_fields: Mapping[str, Any], new_fields: Mapping[str, Any], keys: list[str]) -> str:
    """ "optim.lr: 1e-05 -> 0.5, budget.steps: 4 -> 8" for the given changed keys."""
    a, b = flatten(old_fields), flatten(new_fields)

    def show(v: Any) -> str:
        return "(unset)" if v is _MISSING else json.dumps(v, default=str)

    return ", ".join(f"{k}: {show(a.get(k, _MISSING))} -> {show(b.get(k, _MISSING))}" for k in keys)


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """The recorded fields of a run folder (fingerprint.json, else summary.json's), or None."""
    from zoo.run.tracking import read_json

    rec = read_json(Path(run_dir) / RECORD)
    if isinstance(rec.get("fields"), dict):
        return rec["fields"]
    fields = read_json(Path(run_dir) / "summary.json").get("fingerprint_fields")
    return fields if isinstance(fields, dict) else None


def write_record(run_dir: Path, cfg: RunConfig) -> dict[str, Any]:
    """Write `<run_dir>/fingerprint.json` for `cfg` (atomically); returns {"digest", "fields"}."""
    digest, fields = fingerprint(cfg)
    rec = {"digest": digest, "fields": fields}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{RECORD}.tmp"
    with write_guard(run_dir / RECORD, tmp=tmp):  # one clear WriteError on a full disk / read-only folder
        tmp.write_text(json.dumps(rec, indent=2, sort_keys=True))
        tmp.replace(run_dir / RECORD)
    return rec


def has_results(run_dir: Path) -> bool:
    """True when the folder holds anything a run produced: metrics, a checkpoint, or a summary other than
    that of a run that failed or was stopped before it recorded anything else (e.g. killed while it
    loaded the model; nothing there to protect, so a re-run starts it)."""
    d = Path(run_dir)
    if (d / "metrics.jsonl").exists() or (d / "checkpoint").exists():
        return True
    if not (d / "summary.json").exists():
        return False
    try:
        status = json.loads((d / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return True  # unreadable: not ours to judge
    return status not in ("failed", "interrupted")


def check_reuse(run_dir: Path, cfg: RunConfig, fresh_hint: str) -> str:
    """What a re-run of `cfg` may do with `run_dir` (see the module doc):

    "new" (no results yet), "same" (skip if finished, else resume), "grown" (continue to the new
    `budget.steps`). `fresh_hint` ends the error message (how to retrain this one run, e.g.
    "`zoo ablate study.yaml --fresh ARM`"). Raises StaleRunError naming the folder, the changed keys
    (old -> new) and the way out; VariantError when the variant does not resolve."""
    run_dir = Path(run_dir)
    _, new = fingerprint(cfg)
    old = read_record(run_dir)
    if old is None:
        if not has_results(run_dir):
            return "new"
        raise StaleRunError(
            f"{run_dir}: holds results but no {RECORD} (trained before fingerprints were "
            f"recorded), so it cannot tell whether they match this config; {fresh_hint}"
        )
    keys = compare(old, new)
    if not keys:
        return "same"
    if keys == ["budget.steps"] and int(new["budget"]["steps"]) > int(old["budget"]["steps"]):
        if cfg.optim.schedule == "constant":
            return "grown"
        raise StaleRunError(
            f"{run_dir}: budget.steps grew ({old['budget']['steps']} -> {new['budget']['steps']}) but "
            f"optim.schedule is {cfg.optim.schedule!r}, which decays over the total, so the run cannot be "
            f"continued to the new total; {fresh_hint}"
        )
    raise StaleRunError(f"{run_dir}: was trained with a different config: {describe(old, new, keys)}; {fresh_hint}")


def clear_results(run_dir: Path) -> None:
    """`--fresh`: delete a folder's checkpoint, summary.json and fingerprint record (metrics and samples
    are truncated by the tracker), so nothing of the old run can be resumed or reported as finished."""
    import shutil

    d = Path(run_dir)
    shutil.rmtree(d / "checkpoint", ignore_errors=True)
    for name in ("summary.json", RECORD):
        (d / name).unlink(missing_ok=True)


def ablate_hint(study_file: str | None, label: str) -> str:
    """How to get past a StaleRunError for one study arm."""
    return (
        f"retrain just this arm with `zoo ablate {study_file or 'STUDY'} --fresh {label}` (its results are "
        "deleted; repeat the same --set options), or give the study a new name (--set name=NEW)"
    )


def mixed_keys(
    fields_by_run: Mapping[str, Mapping[str, Any] | None], compared: tuple[str, ...] = ("seed",)
) -> list[str]:
    """The dotted keys (outside `compared`) in which runs meant to be averaged differ, sorted; runs
    without a record (None) are left out. Used by the report before averaging an arm's seeds."""
    known = [dict(f) for f in fields_by_run.values() if f is not None]
    base = {k: v for k, v in known[0].items() if k not in compared} if known else {}
    keys: set[str] = set()
    for f in known[1:]:
        keys |= set(compare(base, {k: v for k, v in f.items() if k not in compared}))
    return sorted(keys)
