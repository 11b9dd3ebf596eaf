"""The `vllm` generator (registry kind `generator`, `sampling.backend: {name: vllm, ...}`): one
`vllm.LLM` colocated in the training process (TRL's colocate mode, verl's hybrid engine), started once
per run at the first rollout from the policy's config with random weights, then loaded with the
policy's weights through the weight-transfer contract (`zoo.backends.generate.weights`), and again
after every `sync`, which also resets vLLM's prefix cache (cached blocks of old weights would be reused).

`logp_rollout` is vLLM's processed log-prob of the drawn token (`logprobs_mode="processed_logprobs"`):
the log-softmax after temperature, top-k and top-p (the same order and top-p rule as transformers), so
it means what the `hf` generator's means. Each request is seeded from the torch RNG (one draw per call,
then seed(row) = f(draw, row)): a run resumed from a checkpoint (which restores the RNG) samples what
the uninterrupted run sampled, up to vLLM's batch-dependent float rounding.

Shapes: B prompts, G completions each, N = B x G rows, P prompt tokens (left-padded), T completion
tokens (right-padded); continue_: n rows.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch import nn

from zoo.backends.generate.hf import completion_mask, decode_completions, encode_prompts, stop_token_ids
from zoo.backends.generate.vllm_engine import (
    EngineOptions,
    check_options,
    engine_environment,
    engine_kwargs,
    import_vllm,
    model_folder,
    remove_folder,
    resolve_dtype,
)
from zoo.backends.generate.weights import PolicyVersion, named_weights
from zoo.backends.train.checkpoint import rng_state, set_rng_state
from zoo.core.batch import Batch
from zoo.core.generator_types import Continuation, SamplingParams
from zoo.core.registry import register
from zoo.models.forward import inner_lm

log = logging.getLogger(__name__)


def row_seed(base: int, row: int) -> int:
    """The seed of request `row` of a call whose torch-RNG draw is `base` (a 64-bit mix, < 2**63)."""
    x = (int(base) * 0x9E3779B97F4A7C15 + int(row) * 0xBF58476D1CE4E5B9 + 1) % 2**64
    x ^= x >> 31
    return x % (2**63 - 1)


@contextmanager
def no_autocast() -> Iterator[None]:
    """The trainer samples under its autocast; vLLM runs in its own dtype, so autocast is off inside."""
    with ExitStack() as stack:
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", enabled=False))
        yield


def _pad(rows: list[list], width: int, value) -> list[list]:
    return [r + [value] * (width - len(r)) for r in rows]


class VLLMGenerator:
    """`zoo.core.kinds.Generator` and `zoo.core.kinds.WeightReceiver` over one in-process
    `vllm.LLM`. `startup_s`, `last_sync_s` and `version` (the policy version served) are public."""

    def __init__(self, policy: nn.Module, tokenizer, opts: EngineOptions) -> None:
        self.policy, self.tokenizer, self.opts = policy, tokenizer, opts
        self.llm: Any = None
        self.version = -1  # nothing served yet
        self.startup_s = self.last_sync_s = 0.0
        self._asleep = self._stale = False
        self._folder: str | None = None
        self._dtype = torch.float32

    # ------------------------------------------------------------------ engine
    def engine(self):
        """The `vllm.LLM`, started on first use with the current policy's weights (version 0)."""
        if self.llm is None:
            self._start()
        return self.llm

    def _start(self) -> None:
        vllm = import_vllm()
        threads = torch.get_num_threads()
        t0 = time.perf_counter()
        self._folder = model_folder(inner_lm(self.policy).config, self.tokenizer)
        weakref.finalize(self, remove_folder, self._folder)
        dtype = resolve_dtype(self.opts.dtype, self.policy)
        self._dtype = getattr(torch, dtype)
        rng, set_threads = rng_state(), torch.set_num_threads
        try:
            with engine_environment(threads), no_autocast():
                self.llm = vllm.LLM(**engine_kwargs(self.opts, self._folder, dtype, seed=0))
        finally:
            # vLLM's worker reseeds the global RNGs (the run's sampling stream would depend on when the
            # engine started) and, on CPU, replaces torch.set_num_threads by a no-op: undo both
            set_rng_state(rng)
            torch.set_num_threads = set_threads
        if torch.get_num_threads() != threads:
            log.info("vllm changed torch's thread count %d -> %d; restored", threads, torch.get_num_threads())
            torch.set_num_threads(threads)
        if torch.get_num_threads() != threads:
            raise RuntimeError(
                f"the trainer's torch thread count changed from {threads} to "
                f"{torch.get_num_threads()} when vLLM started and could not be restored"
            )
        self._push(0)
        self.startup_s = time.perf_counter() - t0
        log.info("vllm engine (%s) started in %.1f s", dtype, self.startup_s)

    def _rpc(self, method: str, *args):
        return self.llm.collective_rpc(method, args=args)

    def _push(self, version: int, pairs=None) -> None:
        """Send (name, tensor) pairs (default: the policy's, streamed one tensor at a time) to the
        workers in one reload, mark `version` served, reset the prefix cache."""
        pairs = named_weights(self.policy) if pairs is None else pairs
        dt = self._dtype
        pairs = ((n, t.to(dt) if t.is_floating_point() else t) for n, t in pairs)  # the engine's dtype
        with no_autocast():
            served = self._rpc("zoo_load_weights", version, pairs)
        if any(int(v) != version for v in served):
            raise RuntimeError(f"vllm workers report policy versions {served}, expected {version}")
        self.llm.reset_prefix_cache()
        self.version = version

    def accept(self, policy: PolicyVersion, /) -> int:
        """The weight-transfer contract: load `policy.tensors` (base-model names) as `policy.version`,
        reset the prefix cache; returns the version served. Raises ValueError for an older version."""
        if policy.version <= self.version:
            raise ValueError(f"policy version {policy.version} is not newer than the served {self.version}")
        self.engine()
        self._wake()
        self._push(policy.version, policy.tensors)
        return self.version

    def sync(self, policy: nn.Module, /) -> None:
        """After optimizer steps: the policy's weights become the next version (`last_sync_s` seconds).
        Before the engine has started this only records the module (the start loads its weights)."""
        self.policy = policy
        if self.llm is None:
            return
        if self._asleep:  # loaded when the engine wakes for the next rollout
            self._stale = True
            return
        t0 = time.perf_counter()
        self._push(self.version + 1)
        self.last_sync_s = time.perf_counter() - t0

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
            if self._stale or self.opts.sleep_level == 2:  # level 2 dropped the weights
                t0 = time.perf_counter()
                self._push(self.version + 1)
                self.last_sync_s = time.perf_counter() - t0
                self._stale = False

    def _sleep(self) -> None:
        if self.opts.sleep_level:
            self.llm.sleep(level=self.opts.sleep_level)
            self._asleep = True

    def close(self) -> None:
        """Shut the engine down and remove its config folder (also done when the generator is collected)."""
        self.llm = None
        remove_folder(self._folder)
        self._folder = None

    # ------------------------------------------------------------------ sampling
    def _params(self, sampling: SamplingParams, n: int, seed: int, stops: Sequence[int], stop: Sequence[str]):
        from vllm import SamplingParams as VSP

        if sampling.logits_processors:
            raise ValueError(
                "the vllm generator cannot apply transformers logits processors (e.g. the noisy "
                "generator's noise): use them with sampling.backend: hf"
            )
        if sampling.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
        if sampling.do_sample and not sampling.temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {sampling.temperature}")
        return VSP(
            n=n,
            temperature=float(sampling.temperature) if sampling.do_sample else 0.0,
            top_p=float(sampling.top_p) if sampling.do_sample else 1.0,
            top_k=int(sampling.top_k or 0) if sampling.do_sample else 0,
            max_tokens=int(sampling.max_new_tokens),
            min_tokens=min(int(sampling.min_new_tokens), int(sampling.max_new_tokens)),
            logprobs=0,
            seed=seed,
            stop=list(stop) or None,
            stop_token_ids=list(stops),
            include_stop_str_in_output=True,
            skip_special_tokens=True,
        )

    def _run(self, token_lists: list[list[int]], params: list) -> list:
        from vllm.inputs import TokensPrompt

        llm = self.engine()
        self._wake()
        try:
            with no_autocast():
                return llm.generate([TokensPrompt(prompt_token_ids=t) for t in token_lists], params, use_tqdm=False)
        finally:
            self._sleep()

    @staticmethod
    def _tokens_and_logps(c) -> tuple[list[int], list[float]]:
        toks = [int(t) for t in c.token_ids]
        lps = [float(step[t].logprob) for step, t in zip(c.logprobs, toks)]
        return toks, lps

    def generate(self, prompts: Sequence, group_size: int, sampling: SamplingParams, /) -> Batch:
        """G completions per prompt (one request with n = G each) -> Batch, prompt-major, on the
        policy's device, with logp_rollout [N, T] (vLLM's processed log-probs, 0 off the loss mask).
        `sampling.micro_batch` is ignored (vLLM schedules its own batches). Raises ValueError for
        logits processors, a budget < 1 or temperature <= 0 when sampling."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        tok = self.tokenizer
        if tok.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token (use zoo.models.prepare_tokenizer)")
        stops = stop_token_ids(self.policy, tok)
        ids, mask = encode_prompts(tok, prompts)  # [B, P]
        base = int(torch.randint(0, 2**62, (1,)).item())
        params = [self._params(sampling, group_size, row_seed(base, p), stops, ()) for p in range(len(prompts))]
        outs = self._run([r[m.bool()].tolist() for r, m in zip(ids, mask)], params)
        toks, lps = [], []
        for out in outs:
            for c in sorted(out.outputs, key=lambda c: c.index):
                t, lp = self._tokens_and_logps(c)
                toks.append(t)
                lps.append(lp)
        T = max(1, max(len(t) for t in toks))
        pad = int(tok.pad_token_id)
        dev = next(self.policy.parameters()).device
        completion_ids = torch.tensor(_pad(toks, T, pad), dtype=torch.long, device=dev)  # [N, T]
        cmask, truncated, lengths = completion_mask(completion_ids, stops)
        logp = torch.tensor(_pad(lps, T, 0.0), dtype=torch.float32, device=dev) * cmask  # [N, T]
        G = group_size
        return Batch(
            prompt_ids=ids.repeat_interleave(G, 0).to(dev),
            prompt_mask=mask.bool().repeat_interleave(G, 0).to(dev),
            completion_ids=completion_ids,
            loss_mask=cmask,
            group_ids=torch.arange(len(prompts), device=dev).repeat_interleave(G),
            truncated=truncated,
            lengths=lengths,
            texts=decode_completions(tok, completion_ids, cmask, truncated),
            logp_rollout=logp,
        )

    def continue_(
        self, prefix_ids: Sequence[Sequence[int]], sampling: SamplingParams, stop: Sequence[str] = (), /
    ) -> Continuation:
        """Extend each row from its own prefix until a stop string (vLLM's, searched in the new text
        only), EOS or the budget -> Continuation (see zoo.core.generator_types). Raises ValueError
        for no rows, an empty row or stop string, or what `generate` raises."""
        rows = [[int(t) for t in r] for r in prefix_ids]
        if not rows or any(not r for r in rows):
            raise ValueError("continue_ needs at least one row and no empty prefix")
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop strings must be non-empty strings, got {list(stop)!r}")
        tok = self.tokenizer
        if tok.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token (use zoo.models.prepare_tokenizer)")
        stops = stop_token_ids(self.policy, tok)
        base = int(torch.randint(0, 2**62, (1,)).item())
        outs = self._run(rows, [self._params(sampling, 1, row_seed(base, i), stops, stop) for i in range(len(rows))])
        toks, lps, which, drop = [], [], [], []
        for out in outs:
            t, lp = self._tokens_and_logps(out.outputs[0])
            reason = out.outputs[0].stop_reason
            hit = reason if isinstance(reason, str) else None
            if hit is None:  # EOS: cut after the first one (as the hf generator), the EOS is not text
                first = next((k for k, x in enumerate(t) if x in stops), None)
                if first is not None:
                    t, lp = t[: first + 1], lp[: first + 1]
            toks.append(t)
            lps.append(lp)
            which.append(hit)
            drop.append(int(hit is None and bool(t) and t[-1] in stops))
        T = max(1, max(len(t) for t in toks))
        pad = int(tok.pad_token_id)
        dev = next(self.policy.parameters()).device
        lengths = torch.tensor([len(t) for t in toks], dtype=torch.long, device=dev)  # [n]
        cmask = torch.arange(T, device=dev)[None, :] < lengths[:, None]  # [n, T]
        truncated = torch.tensor([w is None and not d for w, d in zip(which, drop)], dtype=torch.bool, device=dev)
        texts = [tok.decode(t[: len(t) - d], skip_special_tokens=True) for t, d in zip(toks, drop)]
        return Continuation(
            ids=torch.tensor(_pad(toks, T, pad), dtype=torch.long, device=dev),
            mask=cmask,
            logp_rollout=torch.tensor(_pad(lps, T, 0.0), dtype=torch.float32, device=dev) * cmask,
            truncated=truncated,
            lengths=lengths,
            stopped_by=which,
            texts=texts,
        )


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    check_options(params, int(os.environ.get("WORLD_SIZE", "1") or 1), torch.cuda.is_available())


@register("generator", "vllm", check=_check)
def vllm(
    policy: nn.Module,
    tokenizer,
    /,
    *,
    gpu_memory_utilization: float = 0.3,
    max_model_len: int | None = None,
    enforce_eager: bool = True,
    enable_prefix_caching: bool = True,
    dtype: str | None = None,
    sleep_level: int = 0,
) -> VLLMGenerator:
    """vLLM in the training process, weights synced after each update (prefix cache reset);
    logp_rollout = vLLM's processed log-probs (after temperature / top-k / top-p). One process only.

    gpu_memory_utilization: the fraction of GPU memory vLLM may take (weights + KV cache; the trainer
        shares the GPU). max_model_len: prompt + completion tokens (null: the model's). enforce_eager:
        no CUDA graphs / torch.compile (fast start; false: faster decoding). enable_prefix_caching:
        reuse prompt blocks (reset at every sync). dtype: null = the run's resolved precision.
    sleep_level: CUDA only: 1 offloads the weights and drops the KV cache between rollouts, 2 drops both."""
    return VLLMGenerator(
        policy,
        tokenizer,
        EngineOptions(
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            dtype=dtype,
            sleep_level=sleep_level,
        ),
    )
