"""The budget against what holds it: checks that the step's work fits the processes, the model's context and
the device's memory, and warnings for work that looks unbounded or wasted.

Before anything loads (`before_load`): `updates.minibatches` against the completions per step,
`budget.prompts_per_step` against the ranks that split them, and prompts_per_step x group_size under
a ceiling (MAX_COMPLETIONS).

From the model's config.json and tokenizer and the task's prompts (`after_load`):

- the prompts and `max_new_tokens` fit the model's context (`max_position_embeddings`); the prompts
  are tokenised by the policy's tokenizer as the rollout renders them;
- the step's rollout fits in the memory of the run's device (`check_rollout_fits`). The estimate
  counts the three allocations that grow with the budget (orders of magnitude, not exact bytes):
  token rows: every completion of the step as int64 `[N, P + T]` ids, masks and completion ids
  (N = prompts_per_step x group_size; P prompt tokens, T = max_new_tokens); the KV cache of one
  `generate` call: 2 (K and V) x layers x kv_heads x head_dim x (P + T) per row, for the rows of one
  generate call (the trainer's: sampling.batch_size, default max(group_size, GENERATE_BATCH)); logits:
  the sampler's `[rows, V]` float32 scores (x3: logits, processed scores, probabilities), or the
  update's `[micro_batch, P + T, V]` float32 logits and log-softmax, whichever is larger. Model
  weights, optimizer state and activations are not counted (they do not grow with the budget).
  `zoo run --set budget.group_size=1000000` would otherwise try `ids.repeat_interleave` over 8e6 rows
  (9.6 GB) and then a KV cache of terabytes;
- bounds (warnings, the run still starts): `model_opts.lora.r` above the width min(in, out) of a
  layer LoRA adapts (the update B A cannot have rank above that width, so the extra rank adds
  parameters and compute but no expressiveness), and `budget.prompts_per_step` far above the task's
  prompts (one step repeats every prompt many times, all its completions generated before the step's
  first update; the trainer's progress bar shows the completions generated inside such a step:
  zoo.backends.generate.progress); `model_opts.lora.target_modules` entries that name no module of
  the model are errors.
"""

from __future__ import annotations

from typing import Any, Sequence

from zoo.checks.registry import AfterLoad, BeforeLoad, Report, check
from zoo.config.variant import VariantError
from zoo.tasks.stream import PROMPT_REPEAT_WARN


# ---------------------------------------------------------------- the budget against the variant and the processes
@check("minibatches", "before_load")
def minibatches(s: BeforeLoad, rep: Report) -> None:
    """`updates.minibatches` <= prompts_per_step x group_size (each minibatch needs a completion)."""
    if s.variant is None:
        return
    ctx = s.context()
    n = s.cfg.budget.prompts_per_step * ctx["group_size"]
    m = ctx["updates"].minibatches
    if m > n:
        rep.errors.append(
            f"budget: updates.minibatches {m} > {n} completions per step "
            "(budget.prompts_per_step x group_size): lower updates.minibatches"
        )


@check("prompts_per_rank", "before_load")
def prompts_per_rank(s: BeforeLoad, rep: Report) -> None:
    """Each rank samples prompts_per_step / world_size prompts: the division must be exact."""
    ws, p = s.world_size, s.cfg.budget.prompts_per_step
    if ws > 1 and p % ws:
        rep.errors.append(
            f"budget.prompts_per_step {p} is not a multiple of the {ws} processes (each rank samples "
            f"prompts_per_step / {ws} prompts): use a multiple of {ws}"
        )


#: completions one rollout step may hold (prompts_per_step x group_size): far above real runs (DAPO's
#: 512 x 16 = 8,192), far below what exhausts a machine's memory in Python rows before any update
MAX_COMPLETIONS = 1_000_000


@check("completions_ceiling", "before_load")
def completions_ceiling(s: BeforeLoad, rep: Report) -> None:
    """prompts_per_step x group_size <= MAX_COMPLETIONS, refused before any model loads (the after_load
    memory estimate needs the model's config and misses the rows' Python objects)."""
    b = s.cfg.budget
    g = s.context()["group_size"] if s.variant is not None else b.group_size
    if g is None:
        return
    n = b.prompts_per_step * g
    if n > MAX_COMPLETIONS:
        knobs = ("budget.group_size", "budget.prompts_per_step")[:: 1 if g >= b.prompts_per_step else -1]
        rep.errors.append(
            f"budget: {b.prompts_per_step} prompts x group_size {g} = {n} completions per step, more than the "
            f"ceiling of {MAX_COMPLETIONS} (zoo.checks.fit.MAX_COMPLETIONS; all are generated and held before "
            f"the step's first update): lower {knobs[0]} or {knobs[1]}"
        )


# ---------------------------------------------------------------- the context length
LONGEST_SAMPLE = 64  # prompts tokenised to find the longest: the longest by characters


def longest_prompt_tokens(tokenizer: Any, rows: Sequence[dict[str, Any]], sample: int = LONGEST_SAMPLE) -> int:
    """Tokens of the longest prompt among `rows` (each with a `prompt`: chat messages or a string),
    rendered as the rollout renders it (`rollout.encode_prompts`); the `sample` longest rows by
    characters are tokenised. 0 for no rows."""
    from zoo.backends.generate.hf import encode_prompts

    prompts = sorted((r["prompt"] for r in rows), key=lambda p: -len(str(p)))[:sample]
    if not prompts:
        return 0
    ids, _ = encode_prompts(tokenizer, prompts)  # [B, P], left-padded to the longest
    return int(ids.shape[1])


def check_context(config: Any, prompt_tokens: int, max_new_tokens: int) -> None:
    """Raise VariantError when prompt + completion exceed the model's `max_position_embeddings`
    (transformers would only print a reminder and generate garbage positions)."""
    limit = getattr(config, "max_position_embeddings", None)
    if not limit or prompt_tokens + max_new_tokens <= limit:
        return
    if max_new_tokens >= limit:
        raise VariantError(
            f"budget.max_new_tokens {max_new_tokens} >= the model's context (max_position_embeddings "
            f"{limit}): lower budget.max_new_tokens"
        )
    raise VariantError(
        f"the longest prompt ({prompt_tokens} tokens) + budget.max_new_tokens {max_new_tokens} = "
        f"{prompt_tokens + max_new_tokens} tokens exceed the model's context (max_position_embeddings "
        f"{limit}): lower budget.max_new_tokens or shorten the prompts (task fewshot, system, "
        "instruction)"
    )


@check("context_length", "after_load")
def context_length(s: AfterLoad, rep: Report) -> None:
    """The longest of the task's prompts + budget.max_new_tokens within the model's context; the
    prompt length goes to `s.prompt_tokens` (the memory estimate reads it)."""
    s.prompt_tokens = longest_prompt_tokens(s.tokenizer, s.rows)
    try:
        check_context(s.model_config, s.prompt_tokens, s.cfg.budget.max_new_tokens)
    except VariantError as e:
        rep.errors.append(str(e))
        s.stop = True


# ---------------------------------------------------------------- the rollout's memory
HEADROOM = 0.9  # refuse above this fraction of the available memory


def rollout_memory(
    *,
    prompts_per_step: int,
    group_size: int,
    micro_batch: int,
    generate_rows: int,
    prompt_tokens: int,
    max_new_tokens: int,
    layers: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    kv_bytes: int,
) -> dict[str, int]:
    """Estimated bytes of one rollout step: {"token_rows", "kv_cache", "logits", "total"} (module doc).
    `generate_rows` and `micro_batch` count at most the step's prompts_per_step x group_size rows
    (`budget.micro_batch: 10000000` with 8 completions allocates for 8).

    Raises nothing; every argument is a positive count (`kv_bytes`: bytes per cached value, 4 for
    float32, 2 under bf16/fp16)."""
    n = prompts_per_step * group_size
    seq = prompt_tokens + max_new_tokens
    rows = min(generate_rows, n)  # a generate call or micro-batch never holds more rows than the step has
    micro_batch = min(micro_batch, n)
    token_rows = 3 * n * seq * 8
    kv_cache = 2 * layers * kv_heads * head_dim * seq * rows * kv_bytes
    logits = max(3 * rows * vocab * 4, 2 * micro_batch * seq * vocab * 4)
    return {"token_rows": token_rows, "kv_cache": kv_cache, "logits": logits, "total": token_rows + kv_cache + logits}


def available_memory(device: Any) -> int:
    """Bytes free for new tensors on `device`: CUDA's free memory, else the host's available RAM."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def model_shape(config: Any) -> dict[str, int]:
    """layers, kv_heads, head_dim, vocab of a transformers config (Llama/Qwen/GPT-style names)."""
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return {
        "layers": int(getattr(config, "num_hidden_layers", 1) or 1),
        "kv_heads": int(getattr(config, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(config, "head_dim", None) or max(1, hidden // heads)),
        "vocab": int(getattr(config, "vocab_size", 1) or 1),
    }


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n < 1e12 else f"{n / 1e12:.1f} TB"


def check_rollout_fits(
    cfg: Any, group_size: int, generate_rows: int, config: Any, prompt_tokens: int, kv_bytes: int, available: int
) -> dict[str, int]:
    """Raise VariantError when the step's rollout (`rollout_memory`) needs more than HEADROOM x
    `available` bytes; the message gives the estimate and the knobs to lower, the largest first
    (budget.group_size / prompts_per_step / max_new_tokens / micro_batch, sampling.batch_size). Returns the estimate.

    cfg: the RunConfig (its budget); group_size: the G in use (budget or variant); generate_rows:
    rows per generate call; config: the model's transformers config; prompt_tokens: the longest
    prompt in tokens."""
    b = cfg.budget
    est = rollout_memory(
        prompts_per_step=b.prompts_per_step,
        group_size=group_size,
        micro_batch=b.micro_batch,
        generate_rows=generate_rows,
        prompt_tokens=prompt_tokens,
        max_new_tokens=b.max_new_tokens,
        kv_bytes=kv_bytes,
        **model_shape(config),
    )
    if est["total"] <= HEADROOM * available:
        return est
    gen_knob = "budget.group_size" if generate_rows <= group_size else "sampling.batch_size"  # rows per generate call
    sampler_logits = 3 * generate_rows >= 2 * b.micro_batch * (prompt_tokens + b.max_new_tokens)
    names = {"token_rows": "token rows", "kv_cache": "KV cache", "logits": "logits"}
    knobs = {
        "token_rows": "budget.group_size / budget.prompts_per_step",
        "kv_cache": f"{gen_knob} / budget.max_new_tokens",
        "logits": gen_knob if sampler_logits else "budget.micro_batch",
    }
    parts = sorted(("token_rows", "kv_cache", "logits"), key=lambda k: -est[k])
    raise VariantError(
        f"budget: {b.prompts_per_step} prompts x group_size {group_size} = {b.prompts_per_step * group_size} "
        f"completions of up to {prompt_tokens} + {b.max_new_tokens} tokens need about {_gb(est['total'])} for the "
        f"rollout ({', '.join(f'{names[k]} {_gb(est[k])}' for k in parts)}), more than the "
        f"{_gb(available)} available: lower {knobs[parts[0]]}"
    )


def generate_rows(cfg: Any, group_size: int) -> int:
    """Rows of one generate call, as the step batches them: `sampling.batch_size`, default max(G, 32)."""
    from zoo.config.run import generate_batch_size

    return generate_batch_size(cfg, group_size)


def kv_bytes(cfg: Any) -> int:
    """Bytes per cached key/value: 2 under bf16/fp16 autocast, else the weights' dtype's."""
    if cfg.model_opts.autocast in ("bf16", "fp16"):
        return 2
    return {"float32": 4, "bfloat16": 2, "float16": 2}[cfg.model_opts.dtype]


@check("memory_estimate", "after_load")
def memory_estimate(s: AfterLoad, rep: Report) -> None:
    """`check_rollout_fits` against `s.available` bytes (skipped when unknown); the estimate goes to
    `s.estimate`."""
    if s.available is None:
        return
    g = s.variant.group_size
    try:
        s.estimate = check_rollout_fits(
            s.cfg, g, generate_rows(s.cfg, g), s.model_config, s.prompt_tokens, kv_bytes(s.cfg), s.available
        )
    except VariantError as e:
        rep.errors.append(str(e))


# ---------------------------------------------------------------- bounds: work that looks unbounded or wasted


def lora_widths(model: Any, targets: list[str]) -> dict[str, int]:
    """{module name: min(in_features, out_features)} of the modules LoRA adapts (named by the last part
    of their name, as peft's `target_modules` list matches them), in a plain or a peft model."""
    return {
        name: min(int(m.in_features), int(m.out_features))
        for name, m in model.named_modules()
        if name.split(".")[-1] in targets and hasattr(m, "in_features") and hasattr(m, "out_features")
    }


def lora_rank_warnings(cfg: Any, model: Any) -> list[str]:
    """A warning naming the narrowest adapted layer when `model_opts.lora.r` exceeds its width; []
    without LoRA, a model, or an adapted layer."""
    lora = getattr(cfg.model_opts, "lora", None)
    if lora is None or model is None:
        return []
    widths = lora_widths(model, list(lora.target_modules))
    if not widths or lora.r <= min(widths.values()):
        return []
    name = min(widths, key=widths.get)
    return [
        f"model_opts.lora.r = {lora.r} is larger than the width of the layers it adapts ({name.split('.')[-1]!r} "
        f"in {name!r}: min(in, out) = {widths[name]}): a rank above a layer's width adds parameters but no "
        f"expressiveness; use r <= {min(widths.values())}"
    ]


def work_warnings(cfg: Any, group_size: int, task_rows: int) -> list[str]:
    """A warning when `budget.prompts_per_step` is above PROMPT_REPEAT_WARN x the task's `task_rows`
    prompts (train and eval); [] otherwise."""
    b = cfg.budget
    if not task_rows or b.prompts_per_step <= PROMPT_REPEAT_WARN * task_rows:
        return []
    return [
        f"budget.prompts_per_step = {b.prompts_per_step} is {b.prompts_per_step / task_rows:.3g}x the task's "
        f"{task_rows} prompts: each step repeats every prompt about {b.prompts_per_step // task_rows} times "
        f"({b.prompts_per_step * group_size} completions per step, all generated before the step's first "
        "update); lower budget.prompts_per_step"
    ]


_META: dict[str, Any] = {}  # config.json text -> its meta-device model (a study's arms build it once)


def _lora_model(s: AfterLoad) -> Any:
    """The loaded policy, else (zoo validate) a meta-device model built from config.json when the run
    uses LoRA (cached per config); None otherwise."""
    model = s.model
    if model is None and getattr(s.cfg.model_opts, "lora", None) is not None and s.model_config is not None:
        from zoo.checks.inputs import meta_model

        key = s.model_config.to_json_string() if hasattr(s.model_config, "to_json_string") else repr(s.model_config)
        if key not in _META:
            _META[key] = meta_model(s.model_config)
        model = _META[key]
    return model


@check("lora_rank", "after_load")
def lora_rank(s: AfterLoad, rep: Report) -> None:
    """`lora_rank_warnings` on the loaded policy or the meta-device model (`_lora_model`)."""
    rep.warnings += lora_rank_warnings(s.cfg, _lora_model(s))


@check("lora_targets", "after_load")
def lora_targets(s: AfterLoad, rep: Report) -> None:
    """`zoo.models.lora_targets.unmatched_targets` on the loaded policy or the meta-device model
    (`_lora_model`): `model_opts.lora.target_modules` entries that name no module."""
    from zoo.models.lora_targets import unmatched_targets

    lora = getattr(s.cfg.model_opts, "lora", None)
    model = _lora_model(s)
    if lora is not None and model is not None:
        rep.errors += unmatched_targets(model, list(lora.target_modules))


@check("prompts_per_step_vs_task", "after_load")
def prompts_per_step_vs_task(s: AfterLoad, rep: Report) -> None:
    g = s.cfg.budget.group_size or s.variant.group_size
    rep.warnings += work_warnings(s.cfg, g, len(s.rows))
