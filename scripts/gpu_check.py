"""The Python side of scripts/gpu_check.sh (run it through that script): the models and run files the
checks use, vLLM's sync and sleep/wake on CUDA, and figures out of the bench's JSON.

    python scripts/gpu_check.py models DIR        DIR/tiny (tiny vLLM-shaped Llama), DIR/smol (SmolLM2-135M's
                                                  shape, random weights, built from a config: no Hub),
                                                  DIR/run-tiny-hf.yaml, DIR/run-smol-{hf,vllm}.yaml
    python scripts/gpu_check.py sync LEVEL [cpu]  vLLM on CUDA with sleep_level LEVEL (0, 1, 2): a weight change
                                                  reaches it through sync (also while asleep); prints figures
                                                  (cpu: the policy on the CPU, level 0 only: the script's own test)
    python scripts/gpu_check.py figures JSON      the bench's per-backend figures as key=value lines

Each prints `key=value` figure lines on stdout and exits non-zero (with the reason on stderr) on a failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: SmolLM2-135M's architecture (its config.json): 30 layers, hidden 576, 9 heads, 3 KV heads, tied embeddings
SMOL_SHAPE = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    hidden_act="silu",
)
TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 64,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


def _run_file(model: Path, backend, out: Path) -> dict:
    return {
        "name": out.name,
        "variant": "grpo",
        "model": str(model),
        "task": TASK,
        "rewards": ["correctness", {"name": "format", "weight": 0.5}],
        "budget": {"steps": 3, "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 32, "micro_batch": 16},
        "sampling": {"backend": backend},
        "eval": {"enabled": False},
        "tracking": {"wandb": False},
        "checkpoint": {"every": 3},
        "output_dir": str(out),
    }


def models(root: Path) -> None:
    import torch
    import yaml
    from transformers import LlamaConfig, LlamaForCausalLM

    from zoo.models.tiny import tiny_tokenizer, tiny_vllm_model_and_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    m, tok = tiny_vllm_model_and_tokenizer(seed=0)
    m.save_pretrained(root / "tiny")
    tok.save_pretrained(root / "tiny")
    tok = tiny_tokenizer()  # character-level ids are all < SmolLM2's vocabulary
    cfg = LlamaConfig(
        **SMOL_SHAPE, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    torch.manual_seed(0)
    smol = LlamaForCausalLM(cfg)
    smol.save_pretrained(root / "smol")
    tok.save_pretrained(root / "smol")
    print(f"smol_params={sum(p.numel() for p in smol.parameters())}")
    vllm_backend = {"name": "vllm", "gpu_memory_utilization": 0.3, "max_model_len": 1024}
    for name, model, backend in (
        ("run-tiny-hf", root / "tiny", "hf"),
        ("run-smol-hf", root / "smol", "hf"),
        ("run-smol-vllm", root / "smol", vllm_backend),
    ):
        (root / f"{name}.yaml").write_text(yaml.safe_dump(_run_file(model, backend, root / "out" / name)))


def sync(level: int, device: str = "cuda") -> None:
    import torch

    from zoo.core import registry
    from zoo.core.generator_types import SamplingParams
    from zoo.models.tiny import counting_model_and_tokenizer, set_counting

    model, tok = counting_model_and_tokenizer()  # 'a' -> 'bcde' EOS; shift 2: 'a' -> 'ce' EOS
    model.to(device)
    gen = registry.build(
        "generator",
        {"name": "vllm", "max_model_len": 256, "gpu_memory_utilization": 0.2, "sleep_level": level, "dtype": "float32"},
    )(model, tok)
    a = tok("a", add_special_tokens=False)["input_ids"]
    sp = SamplingParams(max_new_tokens=4)
    got = gen.continue_([a], sp, []).texts
    if got != ["bcde"]:
        sys.exit(f"sleep_level {level}: before the sync vLLM sampled {got}, expected ['bcde']")
    with torch.no_grad():
        set_counting(model, tok, shift=2)  # an optimizer step, in place
    gen.sync(model)  # with sleep_level > 0 the engine sleeps now: loaded when it wakes
    got = gen.continue_([a], sp, []).texts
    if got != ["ce"]:
        sys.exit(f"sleep_level {level}: after the sync vLLM sampled {got}, expected ['ce'] (the new weights)")
    print(f"sleep{level}_startup_s={gen.startup_s:.2f}")
    print(f"sleep{level}_sync_s={gen.last_sync_s:.4f}")
    print(f"sleep{level}_version={gen.version}")
    gen.close()


def figures(path: Path) -> None:
    res = json.loads(path.read_text())
    for r in res.get("backends", [res]):
        b = r["generator"]["name"]
        d, g = r["decode"], r["phases"]["generate"]
        print(f"bench_{b}_startup_s={r['generator']['startup_s']:.2f}")
        print(f"bench_{b}_step_s={r['step']['seconds']:.3f}")
        print(f"bench_{b}_sync_s={r['step']['sync_s']:.4f}")
        print(f"bench_{b}_generate_s={g['seconds']:.3f}")
        print(f"bench_{b}_gen_tokens_per_s={g['tokens_per_s']:.1f}")
        print(f"bench_{b}_decode_distance={d['distance']:.2f}")
        print(f"bench_{b}_peak_gb={r['step']['peak_mb'] / 1024:.2f}")


if __name__ == "__main__":
    cmd, arg, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"models": lambda: models(Path(arg)), "sync": lambda: sync(int(arg), *rest), "figures": lambda: figures(Path(arg))}[
        cmd
    ]()
