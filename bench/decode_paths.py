# Feeds docs/results/performance-decode.md, "Faster HF paths, measured" (and "The cheap step: before and after", its
# bucketed static-cache paragraph).
"""Measure candidate faster HF decode paths against zoo's `hf` generator, on this machine.

    python bench/decode_paths.py --model tiny --rows 32 --new 64 --repeats 3
    python bench/decode_paths.py --model smollm2-135m-instruct-q4 --rows 16 --new 32 --paths hf,static

Paths (every one generates exactly `--new` tokens per row: EOS is suppressed until then):
    hf              zoo's `hf` generator: `generate_rollout` (one prefill per distinct prompt, DynamicCache,
                    the warping + logp_rollout recorder as logits processors)
    static          HF `generate` with `cache_implementation="static"` (no prompt sharing; same processors)
    static_compile  as `static`, and the decode step compiled (`CompileConfig`, forced on CPU with
                    `_compile_all_devices`; inductor, mode "default": CUDA graphs do not exist on CPU)
    bucketed        as `static_compile` with shapes bucketed so it compiles once per bucket: prompts
                    left-padded to a multiple of `--bucket` tokens, rows to a power of two (copies of
                    the last row, dropped after), and a StaticCache of length bucket(P) + bucket(new)
    paged           transformers continuous batching, `model.generate_batch` (paged attention, `paged|sdpa`)

Each path runs once unmeasured (warm-up / compilation, its seconds printed), then `--repeats` times
round-robin with the others (the machine is shared: interleaving spreads the load over all paths);
reports the median seconds, generated tokens/s and decode steps/s, and whether its greedy tokens equal
`hf`'s. Prints one JSON line per path at the end (for docs/results/performance.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def load(name: str):
    """(model in eval mode, tokenizer, prompts) for 'tiny' (zoo.models.tiny's random Llama) or a zoo model name."""
    if name == "tiny":
        from zoo.models.tiny import tiny_model_and_tokenizer

        model, tok = tiny_model_and_tokenizer(seed=0)
        prompts = ["12+7=", "abc", "9-4=?", "hello there"]
    else:
        from zoo.models import load_policy

        model, tok = load_policy(name)
        prompts = [
            [{"role": "user", "content": q}]
            for q in ("What is 12 + 7?", "Name a colour.", "What is 9 - 4?", "Say hello.")
        ]
    return model.eval(), tok, prompts


def run_hf(model, tok, prompts, group, new, do_sample):
    from zoo.backends.generate.hf import generate_rollout

    b = generate_rollout(
        model, tok, prompts, group_size=group, max_new_tokens=new, min_new_tokens=new, do_sample=do_sample
    )
    return b.completion_ids, b.logp_rollout


def run_static(model, tok, prompts, group, new, do_sample, compile_=False):

    from zoo.backends.generate.hf import encode_prompts, sampling_config, stop_token_ids

    ids, mask = encode_prompts(tok, prompts, device=model.device)
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    cfg = sampling_config(new, new, do_sample, tok.pad_token_id, stop_token_ids(model, tok), tok.bos_token_id)
    cfg.cache_implementation = "static"
    if compile_:
        cfg.compile_config = _cpu_compile_config()
    else:
        cfg.disable_compile = True
    out, _ = _generate(model, ids, mask, cfg, do_sample)
    return out[:, ids.shape[1] :]


def _cpu_compile_config():
    """The decode step compiled for fixed shapes, also on CPU (transformers compiles on CUDA only unless told)."""
    from transformers import CompileConfig

    cc = CompileConfig(mode="default", fullgraph=False, dynamic=False)
    cc._compile_all_devices = True
    return cc


def _generate(model, ids, mask, cfg, do_sample, **cache):
    """`model.generate` with zoo's processors and the logp_rollout recorder -> (sequences, recorder)."""
    from zoo.backends.generate.hf import neutral_generation_config
    from zoo.backends.generate.warping import RolloutLogprobs, processor_list

    rec = RolloutLogprobs()
    with torch.no_grad(), neutral_generation_config(model):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=cfg,
            logits_processor=processor_list((), 1.0, 0, 1.0, do_sample, rec),
            **cache,
        )
    return out, rec


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


def run_bucketed(model, tok, prompts, group, new, do_sample, bucket=32):
    from transformers import StaticCache

    from zoo.backends.generate.hf import encode_prompts, sampling_config, stop_token_ids

    ids, mask = encode_prompts(tok, prompts, device=model.device)
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)  # [N, P]
    N, P = ids.shape
    Pb, Nb = _up(P, bucket), max(1, 1 << (N - 1).bit_length())
    ids = torch.nn.functional.pad(ids, (Pb - P, 0), value=tok.pad_token_id)  # [N, Pb] more left padding
    mask = torch.nn.functional.pad(mask, (Pb - P, 0), value=0)
    ids, mask = torch.cat([ids, ids[-1:].expand(Nb - N, -1)]), torch.cat([mask, mask[-1:].expand(Nb - N, -1)])
    cfg = sampling_config(new, new, do_sample, tok.pad_token_id, stop_token_ids(model, tok), tok.bos_token_id)
    cfg.compile_config = _cpu_compile_config()
    cache = StaticCache(config=model.config, max_cache_len=Pb + _up(new, bucket))
    out, rec = _generate(model, ids, mask, cfg, do_sample, past_key_values=cache)
    rec.finish(out[:, -1])
    return out[:N, Pb:], rec.values()[:N]


def run_paged(model, tok, prompts, group, new, do_sample):
    from transformers import GenerationConfig

    from zoo.backends.generate.hf import encode_prompts

    ids, mask = encode_prompts(tok, prompts)
    rows = [r[m.bool()].tolist() for r, m in zip(ids, mask) for _ in range(group)]
    cfg = GenerationConfig(
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=do_sample,
        top_k=0 if do_sample else None,
        top_p=1.0,
        temperature=1.0,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    out = model.generate_batch(inputs=rows, generation_config=cfg, progress_bar=False)
    seqs = [out[k].generated_tokens for k in sorted(out, key=lambda k: int(str(k).split("_")[-1]))]
    T = max(len(s) for s in seqs)
    return torch.tensor([s + [tok.pad_token_id] * (T - len(s)) for s in seqs])


def lengthen(prompt, k: int):
    """`prompt` with k '!' appended (to the last message's content for a chat prompt)."""
    if isinstance(prompt, str):
        return prompt + "!" * k
    return [*prompt[:-1], {**prompt[-1], "content": prompt[-1]["content"] + "!" * k}]


PATHS = {
    "hf": run_hf,
    "static": run_static,
    "static_compile": lambda *a: run_static(*a, compile_=True),
    "paged": run_paged,
    "bucketed": run_bucketed,
}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--rows", type=int, default=32, help="completions (4 prompts x rows/4)")
    ap.add_argument("--new", type=int, default=64, help="new tokens per row")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paths", default="hf,static,static_compile,paged")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="e.g. cuda")
    ap.add_argument(
        "--vary",
        action="store_true",
        help="each repeat lengthens every prompt by one more '!' "
        "(new shapes each time, as in training: a compiled static-cache decode recompiles)",
    )
    ap.add_argument("--sample", action="store_true", help="sample (default greedy, tokens compared to hf)")
    ap.add_argument("--lora", action="store_true", help="LoRA r16 on q,k,v,o (the main job's), B random")
    ap.add_argument("--autocast", default="none", choices=["none", "bf16"], help="bf16: as the main job")
    ap.add_argument("--bucket", type=int, default=32, help="bucketed: prompt and new-token length step")
    return ap.parse_args()


def prepare(a: argparse.Namespace):
    """(model on `--device`, tokenizer, prompts): `--lora` adapters with random B, `--autocast bf16`'s cached casts."""
    model, tok, prompts = load(a.model)
    if a.lora:
        from zoo.models import apply_lora

        model = apply_lora(model, {"r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.01)
        model.eval()
    if a.autocast == "bf16":
        from zoo.models import cache_frozen_casts

        cache_frozen_casts(model)
    return model.to(a.device), tok, prompts


def warm_up(names, model, tok, prompts, group, a, amp) -> tuple[dict, dict, dict]:
    """Each path once, unmeasured (compilation), its tokens compared with `hf`'s (the first path).
    Returns (times {path: []} of the paths that ran, warm-up seconds, greedy equal to hf)."""
    ref, ref_logp, times, warm, equal = None, None, {n: [] for n in names}, {}, {}
    for n in names:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        try:
            with amp():
                out = PATHS[n](model, tok, prompts, group, a.new, a.sample)
        except Exception as e:  # noqa: BLE001  (a path that fails on this machine is reported, not fatal)
            print(f"{n}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            times.pop(n)
            continue
        warm[n] = time.perf_counter() - t0
        out, logp = out if isinstance(out, tuple) else (out, None)  # [N, T] tokens, [N, T] logp_rollout
        if n == "hf":
            ref, ref_logp = out, logp
        if logp is not None and ref_logp is not None and n != "hf" and out.shape == ref.shape:
            same_rows = (out == ref).all(1)  # [N]
            if bool(same_rows.any()):
                d = (logp[same_rows] - ref_logp[same_rows]).abs().max().item()
                print(f"{n}: logp_rollout max |diff| vs hf on rows with equal tokens: {d:.3g}", flush=True)
        equal[n] = None if ref is None else bool(out.shape == ref.shape and torch.equal(out, ref))
        same = (
            ""
            if ref is None or out.shape != ref.shape
            else f", rows equal {int((out == ref).all(1).sum())}/{out.shape[0]}, first differing position "
            f"{int((out != ref).any(0).float().argmax()) if not equal[n] else '-'}"
        )
        print(
            f"{n}: warm-up {warm[n]:.2f} s, shape {tuple(out.shape)}, greedy equal to hf: {equal[n]}{same}", flush=True
        )
    return times, warm, equal


def timed_repeats(times, model, tok, prompts, group, a, amp) -> None:
    """`--repeats` rounds, each path once per round (interleaved), seconds appended to `times`."""
    for r in range(a.repeats):
        ps = [lengthen(p, r + 1) for p in prompts] if a.vary else prompts
        for n in times:
            torch.manual_seed(0)
            t0 = time.perf_counter()
            with amp():
                PATHS[n](model, tok, ps, group, a.new, a.sample)
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            times[n].append(time.perf_counter() - t0)


def print_results(times, warm, equal, rows: int, a: argparse.Namespace) -> None:
    """One JSON line per path: median seconds, tokens/s, decode steps/s."""
    for n, ts in times.items():
        s = statistics.median(ts)
        print(
            json.dumps(
                {
                    "path": n,
                    "model": a.model,
                    "rows": rows,
                    "new_tokens": a.new,
                    "threads": torch.get_num_threads(),
                    "median_s": round(s, 4),
                    "tokens_per_s": round(rows * a.new / s, 1),
                    "decode_steps_per_s": round(a.new / s, 2),
                    "warmup_s": round(warm[n], 2),
                    "greedy_equal_hf": equal[n],
                    "vary": a.vary,
                    "lora": a.lora,
                    "autocast": a.autocast,
                    "bucket": a.bucket if n == "bucketed" else None,
                    "times": [round(t, 3) for t in ts],
                }
            ),
            flush=True,
        )


def main() -> None:
    a = parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model, tok, prompts = prepare(a)
    PATHS["bucketed"] = lambda *x: run_bucketed(*x, bucket=a.bucket)
    amp = lambda: torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.autocast == "bf16")  # noqa: E731
    group = max(1, a.rows // len(prompts))
    names = [p for p in a.paths.split(",") if p]
    times, warm, equal = warm_up(names, model, tok, prompts, group, a, amp)
    timed_repeats(times, model, tok, prompts, group, a, amp)
    print_results(times, warm, equal, group * len(prompts), a)


if __name__ == "__main__":
    main()
