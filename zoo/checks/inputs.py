"""What the run loads besides the policy's weights, checked before they load: the task loads (its name,
dataset and config; did-you-mean from the task loaders; the prompts are kept for `after_load`'s context
check), and a multi-turn task's environment is registered, its keys allowed and it is built once (its
factory, its `stop`, its reset of the task's first row: zoo.envs.contract.probe); a `distill:`
variant's teacher fits the run's `teacher:` block and a separate teacher's tokenizer gives the
policy's ids (the teacher scores the student's sampled tokens: one vocabulary); `critic.init:
reward_model` has a reward model whose tokenizer (once the policy's is loaded, `after_load`) gives the
same ids (the critic reads the policy's tokens; InstructGPT arXiv 2203.02155 §3.5 initialises the value
function from the RM). Only tokenizers load here, no weights; the policy's parameter count comes from a
meta-device model built from its config.json (a note, so `zoo validate` says how large the model it
checked is)."""

from __future__ import annotations

import json
import re
from typing import Any

from zoo.checks.registry import AfterLoad, BeforeLoad, Report, check
from zoo.core import registry
from zoo.rewards.critic_init import critic_init, reward_model_spec, tokenizer_mismatch

# ---------------------------------------------------------------- the task
_LOADED: dict[str, tuple[list[dict[str, Any]], int]] = {}  # task spec (JSON) -> (train + eval rows, eval count)


def _load(spec: Any) -> tuple[list[dict[str, Any]], int]:
    """Task `spec`'s train + eval rows and how many of them are held out, loaded once per spec in this
    process (`zoo.tasks.load_task`). Raises what load_task raises."""
    from zoo.tasks import load_task

    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _LOADED:
        task = load_task(spec)
        _LOADED[key] = (list(task.train) + list(task.eval), len(task.eval))
    return _LOADED[key]


def task_rows(spec: Any) -> list[dict[str, Any]]:
    """The train and eval rows of task `spec` (the run loads its own). Raises what load_task raises."""
    return _load(spec)[0]


def eval_rows(spec: Any) -> int:
    """How many held-out rows task `spec` has (loads it like `task_rows`)."""
    return _load(spec)[1]


@check("task", "before_load")
def task(s: BeforeLoad, rep: Report) -> None:
    try:
        rows, held_out = len(task_rows(s.cfg.task)), eval_rows(s.cfg.task)
    except (ValueError, KeyError, OSError, ImportError) as e:  # TaskError is a ValueError
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = hub_dataset(s.cfg.task)
        if where and _unreachable(msg):  # the Hub, not the file, is missing: zoo run loads it where it is reachable
            rep.notes.append(
                f"task: dataset {where!r} is on the Hugging Face Hub and not in the local cache, and the "
                "Hub is not reachable from here: not loaded, so its rows and the context length are "
                "checked when `zoo run` loads it"
            )
            return
        rep.errors.append(task_error(msg, s.cfg))
        return
    from zoo.tasks.stream import PROMPT_REPEAT_WARN, repeats_within_step

    p = s.cfg.budget.prompts_per_step
    if p <= PROMPT_REPEAT_WARN * rows and (why := repeats_within_step(rows - held_out, p)):
        rep.warnings.append(why)  # far above the task: fit.work_warnings says it after load
    ev = s.cfg.eval
    if ev.enabled and ev.size > held_out:
        rep.warnings.append(
            f"eval.size {ev.size} is more than the task's {held_out} held-out prompts (task.eval_size): "
            f"the evaluation uses {held_out}"
        )


_TASK_KEY = re.compile(r"^(?:[\w ]+ )?task key '(?P<key>[^']+)' (?P<why>.*)$")


def task_error(msg: str, cfg: Any) -> str:
    """A task loader's error as the run reports it: `task: <msg>`; for a run read from a file
    (`zoo.config.user_keys.source_of`), led by that file, and a loader's `task key 'image_size' ...`
    told as the run file's key: `run.yaml: key 'task.image_size': must be ...`."""
    from zoo.config.user_keys import source_of

    source = source_of(cfg)
    if not source:
        return f"task: {msg}"
    m = _TASK_KEY.match(msg)
    return f"{source}: key 'task.{m['key']}': {m['why']}" if m else f"{source}: task: {msg}"


def hub_dataset(spec: Any) -> str | None:
    """The Hub id of an `hf` task's dataset (`path` shaped like `owner/name`, not a local file or folder
    and not a data file name such as `data/train.jsonl`), else None."""
    import os
    import re

    if not isinstance(spec, dict) or spec.get("name", "reasoning_gym") != "hf":
        return None
    path = spec.get("path")
    if (
        not isinstance(path, str)
        or path.startswith((".", "/", "~"))
        or os.path.exists(path)
        or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path)
    ):
        return None
    return None if os.path.splitext(path)[1].lower() in (".json", ".jsonl", ".parquet", ".csv") else path


def _unreachable(msg: str) -> bool:
    """Whether a load error says the Hub could not be reached (offline mode, no connection)."""
    return any(
        k in msg
        for k in (
            "HF_HUB_OFFLINE",
            "OfflineModeIsEnabled",
            "ConnectionError",
            "Couldn't reach",
            "couldn't connect",
            "Max retries exceeded",
            "Temporary failure in name resolution",
        )
    )


# ---------------------------------------------------------------- the task's environment
@check("env", "before_load")
def env(s: BeforeLoad, rep: Report) -> None:
    """zoo.envs.base.env_errors (the environment's name and keys), then zoo.envs.contract.probe."""
    from zoo.envs.base import env_errors, env_spec
    from zoo.envs.contract import probe

    errors = env_errors(s.cfg.task)
    rep.errors += errors
    if errors or env_spec(s.cfg.task) is None:
        return
    try:
        rows = task_rows(s.cfg.task)[:1]
    except Exception:  # noqa: BLE001 - the `task` check said why
        rows = []
    rep.errors += probe(env_spec(s.cfg.task), rows)


# ---------------------------------------------------------------- the teacher
def teacher_errors(cfg: Any, v: Any, *, check_tokenizers: bool = True) -> list[str]:
    """What is wrong with the teacher of run `cfg` (its effective variant `v`), one line each."""
    spec, t = v.distill, cfg.teacher
    if spec is None:
        vocab = [c for c in (v.slots.loss or []) if _name(c) == "distill_vocab"]
        if vocab:
            return [
                "loss distill_vocab reads the teacher's full log-probs: the variant needs a distill: block "
                "(e.g. distill: {beta: 0.0, teacher: model}) and the run a teacher: block"
            ]
        return []  # a teacher: block with a variant that reads none: a warning (`teacher`), e.g. a study's grpo arm
    if t is None:
        return [f"distill: the variant {v.name!r} needs a teacher: block in the run file (teacher: {{model: DIR}})"]
    try:
        registry.build("teacher", spec.teacher)
    except registry.ComponentError as e:
        return [f"distill.teacher: {e}"]
    which = spec.teacher_name()
    if which != "model":
        if t.model:
            return [f"teacher.model: distill.teacher is {which!r} (the policy itself); drop teacher.model"]
        return []
    if not t.model:
        return ["teacher.model: distill.teacher is 'model', so the run file's teacher: needs model: DIR"]
    return tokenizer_errors(cfg.model, t.model) if check_tokenizers and t.model != cfg.model else []


def _name(spec: Any) -> str:
    return str(spec if isinstance(spec, str) else spec.get("name", "")) if spec else ""


def tokenizer_errors(policy: str, teacher: str) -> list[str]:
    """One line when the teacher's tokenizer differs from the policy's (or cannot be read)."""
    from transformers import AutoTokenizer

    from zoo.checks.settings import model_dir_error
    from zoo.models.hub import hub_error, load_kwargs
    from zoo.models.sources import resolve_model

    why = model_dir_error(teacher, "teacher.model") or hub_error(teacher, "teacher.model") or hub_error(policy, "model")
    if why:  # one line at once, not transformers' ~30 s of retries against an unreachable Hub
        return [why]
    try:
        pt = AutoTokenizer.from_pretrained(resolve_model(policy).path, **load_kwargs(policy))
        tt = AutoTokenizer.from_pretrained(resolve_model(teacher).path, **load_kwargs(teacher))
    except (OSError, ValueError) as e:
        return [f"teacher.model: could not load the tokenizers to compare them: {str(e).splitlines()[0]}"]
    why = tokenizer_mismatch(pt, tt)
    if why:
        return [
            f"teacher.model: the teacher {teacher!r} and the policy {policy!r} do not share a tokenizer ({why}); "
            "the teacher scores the student's token ids"
        ]
    return []


@check("teacher", "before_load")
def teacher(s: BeforeLoad, rep: Report) -> None:
    """A `distill:` variant has a fitting `teacher:` block, and a separate teacher the policy's tokenizer."""
    if s.variant is not None:
        rep.errors += teacher_errors(s.cfg, s.variant)
        if s.variant.distill is None and s.cfg.teacher is not None:
            rep.warnings.append(
                f"teacher: the variant {s.variant.name!r} has no distill: block; the teacher is not loaded"
            )


# ---------------------------------------------------------------- the critic's init
def critic_init_errors(cfg: Any, v: Any, *, check_tokenizers: bool = True, policy_tokenizer: Any = None) -> list[str]:
    """What is wrong with `critic.init` for this run (cfg: RunConfig, v: its effective variant): an
    unknown init (the registry check reports it), `reward_model` without a `reward_model` reward in
    `rewards:`, or (check_tokenizers: loads the reward model's tokenizer, and the policy's unless
    `policy_tokenizer` is given; no model) tokenizers that differ. A reward model directory that does not
    exist yet is not compared (`run_warnings` warns about it)."""
    from zoo.rewards.reward_model import missing_models

    if critic_init(v) != "reward_model":
        return []
    spec = reward_model_spec(list(cfg.rewards))
    if spec is None:
        return [
            "critic.init: reward_model needs a reward model in rewards: (add {name: reward_model, model: DIR}); "
            f"rewards are {list(cfg.rewards)}"
        ]
    if not check_tokenizers or "model" not in spec or missing_models([spec]):  # not built yet: a warning says so
        return []
    from transformers import AutoTokenizer

    from zoo.models.sources import resolve_model

    try:
        pt = (
            policy_tokenizer
            if policy_tokenizer is not None
            else AutoTokenizer.from_pretrained(resolve_model(cfg.model).path)
        )
        rt = AutoTokenizer.from_pretrained(resolve_model(spec["model"]).path)
    except (OSError, ValueError) as e:
        return [f"critic.init: reward_model: could not load the tokenizers to compare them: {str(e).splitlines()[0]}"]
    why = tokenizer_mismatch(pt, rt)
    return (
        [
            f"critic.init: reward_model: the reward model {spec['model']!r} and the policy {cfg.model!r} do not share a "
            f"tokenizer ({why}); the critic reads the policy's tokens (use init: policy)"
        ]
        if why
        else []
    )


@check("critic_init", "before_load")
def critic_init_reward_model(s: BeforeLoad, rep: Report) -> None:
    """`critic.init: reward_model` needs a `reward_model` reward (the tokenizers are compared after load)."""
    if s.variant is not None:
        rep.errors += critic_init_errors(s.cfg, s.variant, check_tokenizers=False)


@check("critic_tokenizer", "after_load")
def critic_tokenizer(s: AfterLoad, rep: Report) -> None:
    """With `critic.init: reward_model`, the reward model's tokenizer equals the policy's."""
    if critic_init(s.variant) == "reward_model":
        rep.errors += critic_init_errors(s.cfg, s.variant, policy_tokenizer=s.tokenizer)


# ---------------------------------------------------------------- the policy's parameter count
def meta_model(config: Any) -> Any:
    """`AutoModelForCausalLM.from_config(config)` on the meta device (shapes only), or None when
    transformers cannot build it from the config."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, OSError, ImportError):
        return None


_COUNTS: dict[str, tuple[int, str] | None] = {}  # config.json text -> (parameters, class): one build per model


def meta_count(config: Any) -> tuple[int, str] | None:
    """(parameter count, model class) of the model `config` describes, from a meta-device build
    (cached per config); None when transformers cannot build it."""
    key = config.to_json_string()
    if key not in _COUNTS:
        model = meta_model(config)
        _COUNTS[key] = None if model is None else (sum(p.numel() for p in model.parameters()), type(model).__name__)
    return _COUNTS[key]


@check("parameter_count", "after_load")
def parameter_count(s: AfterLoad, rep: Report) -> None:
    """A note: the parameters of the loaded model, else of a meta-device model built from the config
    (cached per config: a study's arms on one model build it once)."""
    if s.model is not None:
        counted: tuple[int, str] | None = (sum(p.numel() for p in s.model.parameters()), type(s.model).__name__)
    else:
        counted = meta_count(s.model_config)
    if counted is None:
        return
    n, name = counted
    rep.notes.append(
        f"model: {n / 1e6:.1f}M parameters ({name}, {s.cfg.model_opts.dtype} weights "
        f"{n * {'float32': 4}.get(s.cfg.model_opts.dtype, 2) / 1e9:.2f} GB)"
    )
