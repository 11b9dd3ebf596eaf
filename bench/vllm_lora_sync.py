# Feeds docs/results/performance-decode.md, "LoRA sync: merged on the fly vs vLLM adapters".
"""Measure the two ways to sync a LoRA policy into the `vllm` generator (run in the vLLM scratch venv of
docs/guides/vllm.md, "vLLM on CPU (a scratch venv)"):

(a) merged on the fly, what zoo does (`VLLMGenerator.sync`: every adapted Linear sent as W + s * B @ A
    under the base names, one in-place reload of the full weights), timed over `--versions` versions;
(b) vLLM's own adapters: an engine with `enable_lora=True`; per version the PEFT adapter is saved to a
    temporary folder and a generate runs with a `LoRARequest` carrying a NEW adapter id (vLLM loads it
    on first use); its overhead is save + first generate minus a generate without the new adapter.

Each version draws new random lora_B (lora_A stays), so the adapter changes the outputs. The check: the
adapter path's greedy log-probs differ from the base model's and match the merged path's for the same
version (same weights, two ways). Model: the embedded SmolLM2-135M (`--model`, default) or
`tiny` (zoo.models.tiny.tiny_vllm_model_and_tokenizer). LoRA r16, alpha 32 on q, k, v, o.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 10 \
        /path/to/vllm-venv/bin/python bench/vllm_lora_sync.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, a small robot",
    "Water boils at a temperature of",
]


def load(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name == "tiny":
        from zoo.models.tiny import tiny_vllm_model_and_tokenizer

        return tiny_vllm_model_and_tokenizer(seed=0)
    from zoo.models.sources import resolve_model

    path = resolve_model(name).path
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def lora(model, rank: int):
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    return get_peft_model(model, cfg)


def new_version(peft, v: int, std: float) -> None:
    """Version v's adapter: lora_B ~ N(0, std^2) from seed v (B starts at 0 in PEFT: no effect)."""
    g = torch.Generator().manual_seed(1000 + v)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def greedy(llm, token_lists, max_tokens: int, lora_request=None):
    """Greedy completions -> (seconds, [[token]], [[logp]])."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, logprobs=0)
    t0 = time.perf_counter()
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=t) for t in token_lists], sp, use_tqdm=False, lora_request=lora_request
    )
    dt = time.perf_counter() - t0
    toks = [list(o.outputs[0].token_ids) for o in outs]
    lps = [[float(s[t].logprob) for s, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in outs]
    return dt, toks, lps


def max_diff(a, b) -> float:
    """Max |logp_a - logp_b| over the tokens both paths chose alike (first divergence ends a row)."""
    d = 0.0
    for (ra, rb), (la, lb) in zip(zip(a[1], b[1]), zip(a[2], b[2])):
        for x, y, p, q in zip(ra, rb, la, lb):
            if x != y:
                break
            d = max(d, abs(p - q))
    return d


def same_tokens(a, b) -> float:
    """Fraction of rows whose greedy completion is identical."""
    return sum(x == y for x, y in zip(a[1], b[1])) / len(a[1])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct-q4", help="embedded name, folder, or 'tiny'")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--std", type=float, default=0.02, help="std of the random lora_B")
    return ap.parse_args()


def time_merged(peft, tok, ids, args, rows: dict) -> tuple[tuple, dict]:
    """(a) merged on the fly (zoo's sync): seconds into `rows`; returns (the base model's greedy output,
    {version: greedy output})."""
    from zoo.core import registry

    merged_out = {}
    gen = registry.build("generator", {"name": "vllm", "max_model_len": 256, "dtype": args.dtype})(peft, tok)
    t0 = time.perf_counter()
    gen.engine()
    rows["a: engine start + first load"] = time.perf_counter() - t0
    with peft.disable_adapter():
        gen.sync(peft)  # the base weights (adapters disabled are not merged)
    base_a = greedy(gen.llm, ids, args.tokens)
    base_a = greedy(gen.llm, ids, args.tokens)  # warm
    rows["a: generate (base, warm)"] = base_a[0]
    for v in range(1, args.versions + 1):
        new_version(peft, v, args.std)
        gen.sync(peft)
        rows[f"a: v{v} sync (merge + reload)"] = gen.last_sync_s
        merged_out[v] = greedy(gen.llm, ids, args.tokens)
        rows[f"a: v{v} generate"] = merged_out[v][0]
    gen.close()
    del gen
    return base_a, merged_out


def save_base(peft, tok) -> str:
    """The base model's weights in a folder vLLM loads (adapters off: named_weights sends plain W)."""
    from safetensors.torch import save_file

    from zoo.backends.generate.weights import named_weights

    base_folder = tempfile.mkdtemp(prefix="zoo-lora-base-")
    with peft.disable_adapter():
        state = {n: t.contiguous() for n, t in named_weights(peft)}
    save_file(state, os.path.join(base_folder, "model.safetensors"), metadata={"format": "pt"})
    peft.get_base_model().config.save_pretrained(base_folder)
    tok.save_pretrained(base_folder)
    return base_folder


def start_lora_engine(base_folder: str, args, rows: dict):
    """A vLLM engine with `enable_lora=True` on the base folder -> (llm, None), or (None, error) when
    vLLM refuses LoRA (the answer on its CPU backend, maybe)."""
    import vllm

    from zoo.backends.generate.vllm_engine import EngineOptions, engine_environment, engine_kwargs

    kw = engine_kwargs(EngineOptions(max_model_len=256), base_folder, args.dtype, seed=0)
    kw.update(load_format="auto", enable_lora=True, max_lora_rank=args.rank, max_loras=1)
    try:
        t0 = time.perf_counter()
        with engine_environment(torch.get_num_threads()):
            llm = vllm.LLM(**kw)
        rows["b: engine start (enable_lora)"] = time.perf_counter() - t0
    except Exception as e:  # the answer if vLLM's CPU backend refuses LoRA
        error = f"{type(e).__name__}: {e}"
        print("vLLM refused enable_lora:", error)
        return None, error
    return llm, None


def time_adapters(llm, peft, ids, args, rows: dict, base_a, merged_out: dict) -> None:
    """(b) vLLM adapters, a new id per version: seconds into `rows`, the checks against (a) printed."""
    from vllm.lora.request import LoRARequest

    greedy(llm, ids, args.tokens)
    base_b = greedy(llm, ids, args.tokens)
    rows["b: generate (base, warm)"] = base_b[0]
    print(
        f"check: base greedy tokens equal in (a) and (b): {same_tokens(base_a, base_b):.2f}, "
        f"max |dlogp| {max_diff(base_a, base_b):.2e}"
    )
    tmp = tempfile.mkdtemp(prefix="zoo-lora-adapters-")
    for v in range(1, args.versions + 1):
        new_version(peft, v, args.std)
        t0 = time.perf_counter()
        path = os.path.join(tmp, f"v{v}")
        peft.save_pretrained(path)
        save = time.perf_counter() - t0
        req = LoRARequest(f"policy-v{v}", v, path)  # a NEW adapter id per version
        first = greedy(llm, ids, args.tokens, req)
        again = greedy(llm, ids, args.tokens, req)
        nolora = greedy(llm, ids, args.tokens)
        rows[f"b: v{v} save adapter"] = save
        rows[f"b: v{v} first generate (loads id {v})"] = first[0]
        rows[f"b: v{v} generate again (cached)"] = again[0]
        rows[f"b: v{v} generate without adapter"] = nolora[0]
        rows[f"b: v{v} overhead = save + first - without"] = save + first[0] - nolora[0]
        print(
            f"check v{v}: adapter vs base: same tokens {same_tokens(first, base_b):.2f}, "
            f"max |dlogp| {max_diff(first, base_b):.3f} | adapter vs merged (a): same tokens "
            f"{same_tokens(first, merged_out[v]):.2f}, max |dlogp| {max_diff(first, merged_out[v]):.3f}"
        )
    shutil.rmtree(tmp, ignore_errors=True)


def print_table(args, n_prompts: int, rows: dict, error: str | None) -> None:
    """The measured seconds as a markdown table (the page's)."""
    print(
        f"\nmodel {args.model}, {args.dtype}, LoRA r{args.rank} on q,k,v,o, {n_prompts} prompts x "
        f"{args.tokens} greedy tokens, torch threads {torch.get_num_threads()}"
    )
    print("| step | seconds |\n|---|---|")
    for k, s in rows.items():
        print(f"| {k} | {s:.3f} |")
    if error:
        print(f"(b) refused: {error}")


def main() -> None:
    args = parse_args()
    import vllm  # noqa: F401  (without vLLM: fail here, before the model loads)

    print("uptime:", os.popen("uptime").read().strip())
    torch.manual_seed(0)
    model, tok = load(args.model)
    model.eval()
    peft = lora(model, args.rank)
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    rows = {}  # name -> seconds
    base_a, merged_out = time_merged(peft, tok, ids, args, rows)  # (a) merged on the fly (zoo's sync)
    base_folder = save_base(peft, tok)  # (b) vLLM adapters, new id per version
    llm, error = start_lora_engine(base_folder, args, rows)
    if llm is not None:
        time_adapters(llm, peft, ids, args, rows, base_a, merged_out)
    shutil.rmtree(base_folder, ignore_errors=True)
    print_table(args, len(ids), rows, error)
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
