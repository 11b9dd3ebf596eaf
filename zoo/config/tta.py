"""The `zoo tta` file: test-time adaptation of a `dual_encoder` policy (issue 32 §3, GRPO-TTA).

    tta:                        # the key that marks a file as a `zoo tta` file (`zoo validate` too)
      method: variant           # variant (its group-relative update) | tpt (entropy of the mean prediction)
      variant: grpo_tta         # the update's slots (registry/grpo_tta.yaml); group_size = K candidates
      policy: {source: dual_encoder, seed: 0, pretrain_steps: 150, pretrain_size: 180}
      adapt: norms              # visual | norms
      candidates: topk          # topk | sample
      rewards: [tta_alignment, tta_dispersion]
      steps: 3
      lr: 1.0e-3
      views: 16
      keep: 0.25
      reset: episodic           # episodic | none
      data: {size: 27, seed: 1, shift: noise, severity: 3}

Every key, its default and its source ("paper", "RLCF" or "ours") is in docs/reference/grpo-tta.md.
Errors name the file and the key (`zoo.config.schema.format_validation`).

Upper bounds (ours), so a typo is refused by `zoo validate` instead of exhausting memory when the images
are drawn or the model built: `policy.image_size` 8..224 (one 8-pixel patch of the tiny CLIP, up to
CLIP's own 224 x 224 input, arXiv 2103.00020; attention grows with (side / 8)^4), `views` <= 256 (4 x
the 64 of TPT / RLCF), and at most `MAX_IMAGES` = 10,000 images in `data.size`, `study.size` and
`policy.pretrain_size` (every image is drawn before the adaptation starts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from zoo.config.schema import Spec, Strict, format_validation
from zoo.config.variant_files import VariantError, read_yaml_file

MAX_IMAGES = 10_000  # images drawn at once (module doc)


class PolicySpec(Strict):
    """Which dual encoder: `dual_encoder` is a tiny CLIP built in code (zoo.models.dual_encoder),
    pre-trained contrastively on clean `tta_shapes` images for `pretrain_steps` (0 = random weights)."""

    source: Literal["dual_encoder"] = "dual_encoder"
    seed: int = Field(0, ge=0)
    pretrain_steps: int = Field(150, ge=0)
    pretrain_size: int = Field(180, ge=1, le=MAX_IMAGES)
    pretrain_lr: float = Field(3e-3, gt=0)
    image_size: int = Field(32, ge=8, le=224)  # one patch of 8 .. CLIP's 224 (module doc)
    hidden: int = Field(32, ge=8)
    layers: int = Field(2, ge=1)
    cache: bool = True  # ours: reuse the pre-trained weights from zoo's cache (zoo.run.tta.build_policy)


class DataSpec(Strict):
    """The test images: `tta_shapes` rows (zoo.tasks.shapes), labelled so accuracy can be reported
    (the labels are never read by the update)."""

    name: Literal["tta_shapes"] = "tta_shapes"
    size: int = Field(27, ge=1, le=MAX_IMAGES)
    seed: int = Field(1, ge=0)
    shift: Literal["none", "noise", "blur", "contrast", "colour", "background"] = "none"
    severity: int = Field(0, ge=0, le=5)


class TTASpec(Strict):
    """One adaptation: which update (`method`), variant, policy, parameters, candidates, rewards, optimizer,
    views and data (docs/reference/grpo-tta.md: every key with its default and source)."""

    method: Literal["variant", "tpt"] = "variant"
    variant: str = "grpo_tta"
    policy: PolicySpec = Field(default_factory=PolicySpec)
    adapt: Literal["visual", "norms"] = "norms"
    candidates: Literal["topk", "sample"] = "topk"
    rewards: list[Spec] = Field(default_factory=lambda: ["tta_alignment", "tta_dispersion"], min_length=1)
    steps: int = Field(3, ge=0)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    views: int = Field(16, ge=1, le=256)  # 4 x TPT's / RLCF's 64 (module doc)
    keep: float = Field(0.25, gt=0, le=1)
    reset: Literal["episodic", "none"] = "episodic"
    seed: int = Field(0, ge=0)
    data: DataSpec = Field(default_factory=DataSpec)


Shift = Literal["noise", "blur", "contrast", "colour", "background"]
Severity = Annotated[int, Field(ge=1, le=5)]


class TTAStudy(Strict):
    """A study of `zoo tta` (experiments/grpo_tta.yaml): every arm on every condition and seed.

    Seed s sets `policy.seed`, `data.seed` and `seed` of every arm to s (one pre-trained model, one set
    of test images and views per seed, shared by the arms: the arms pair by seed). The conditions are
    the clean images (`clean`) and each shift of `shifts` at each severity of `severities`, `size` images
    each (`tta.data`'s shift, severity, size and seed are not read). An arm is `name` plus `tta:` keys
    that replace the file's (mappings merge key by key). `compare` lists [arm, baseline] pairs for
    paired differences beside every arm against zero-shot; `zero_shot_severities` the severities of the
    zero-shot table (no adaptation, cheap)."""

    seeds: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    size: int = Field(18, ge=1, le=MAX_IMAGES)
    clean: bool = True
    shifts: list[Shift] = Field(default_factory=lambda: ["noise", "blur", "contrast", "colour", "background"])
    severities: list[Severity] = Field(default_factory=lambda: [2, 4])
    zero_shot_severities: list[Severity] = Field(default_factory=lambda: [1, 2, 3, 4, 5])
    arms: list[dict[str, Any]] = Field(min_length=1)
    compare: list[tuple[str, str]] = Field(default_factory=list)


class TTAFile(Strict):
    tta: TTASpec
    name: str = "grpo_tta"
    out: str | None = None
    study: TTAStudy | None = None


def is_tta_file(data: Any) -> bool:
    """A mapping with a top-level `tta:` key."""
    return isinstance(data, dict) and "tta" in data


#: `tta:` keys that no run file has: two of them at a file's top level make it a misplaced `tta:` mapping
TTA_OWN_KEYS = ("method", "policy", "adapt", "candidates", "views", "keep", "reset")
TTA_DOC = "docs/reference/grpo-tta.md"


def not_a_run_file(data: Any, where: str) -> str | None:
    """One line when `data` is a `zoo tta` file (a top-level `tta:`) or its `tta:` keys written at the top
    level (two or more of `TTA_OWN_KEYS`), which `zoo run` cannot train (a dual encoder has no token
    batch: zoo.cli.tta); else None."""
    if not isinstance(data, dict):
        return None
    if is_tta_file(data):
        return (
            f"{where}: a `zoo tta` file (a top-level `tta:`), not a run file: run it with `zoo tta {where}` ({TTA_DOC})"
        )
    own = [k for k in data if k in TTA_OWN_KEYS]
    if len(own) >= 2:
        return (
            f"{where}: keys {', '.join(own)} are a `zoo tta` file's `tta:` keys, not a run file's: put them under "
            f"`tta:` and run `zoo tta {where}` ({TTA_DOC})"
        )
    return None


def parse_tta(data: Any, where: str) -> TTAFile:
    """Validate a `zoo tta` mapping; raises VariantError naming `where` and the key."""
    if not is_tta_file(data):
        raise VariantError(f"{where}: a `zoo tta` file needs a top-level 'tta' mapping")
    try:
        return TTAFile.model_validate(data)
    except ValidationError as e:
        raise VariantError(format_validation(e, where, TTAFile)) from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def study_arms(f: TTAFile, where: str) -> list[tuple[str, TTASpec]]:
    """(name, spec) of each arm of `f.study`: the file's `tta:` keys with the arm's replacing them.
    Raises VariantError naming `study.arms[i]` and the key (a missing or repeated name, a bad key)."""
    assert f.study is not None
    base, out = f.tta.model_dump(), []
    for i, arm in enumerate(f.study.arms):
        over = dict(arm)
        name = over.pop("name", None)
        _check_arm_name(name, i, [n for n, _ in out], where)
        try:
            out.append((name, TTASpec.model_validate(_merge(base, over))))
        except ValidationError as e:
            raise VariantError(format_validation(e, f"{where}: study.arms[{i}] ({name})", TTASpec)) from None
    names = {n for n, _ in out} | {"zero_shot"}
    for a, b in f.study.compare:
        if a not in names or b not in names:
            raise VariantError(f"{where}: key 'study.compare': [{a}, {b}] names an arm not among {sorted(names)}")
    return out


def _check_arm_name(name: Any, i: int, earlier: list[str], where: str) -> None:
    """One line naming `study.arms[i].name` when it is missing or empty, `zero_shot` (the study's own row)
    or the name of an earlier arm (as `zoo ablate` says `key 'variants': listed twice: grpo`)."""
    key = f"{where}: key 'study.arms[{i}].name'"
    if not isinstance(name, str) or not name:
        raise VariantError(f"{key}: every arm needs a non-empty name, got {name!r}")
    if name == "zero_shot":
        raise VariantError(f"{key}: 'zero_shot' is the study's own row (no adaptation); give the arm another name")
    if name in earlier:
        raise VariantError(
            f"{key}: arm {name!r} is listed twice (study.arms[{earlier.index(name)}] and study.arms[{i}]); "
            "arms need distinct names"
        )


def load_tta_file(path: str | Path) -> TTAFile:
    """Read and validate a `zoo tta` file (schema only; `zoo.run.tta.check_tta` checks the variant
    and rewards against what the adaptation supports)."""
    return parse_tta(read_yaml_file(path), str(path))
