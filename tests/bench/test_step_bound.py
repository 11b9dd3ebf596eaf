"""The step's bound (zoo/bench/bound.py `matmul_dims`, `forward_flops`, `backward_flops`, `adamw_bytes`;
zoo/bench/probe.py `forward_work`; zoo/bench/phase_bound.py): FLOP counts worked out by hand on a tiny
Llama, full fine-tuning and LoRA, and a phase table from hand-made work."""

from __future__ import annotations

import pytest
import torch

from zoo.bench.bound import adamw_bytes, backward_flops, forward_flops, matmul_dims
from zoo.bench.phase_bound import phase_bounds, step_flops
from zoo.bench.probe import forward_work


def _tiny_llama():
    """hidden 8, 2 heads of 4 (q_dim 8), 1 KV head (kv_dim 4), MLP 16, 2 layers, vocab 10, tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=8,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=16,
        num_hidden_layers=2,
        vocab_size=10,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


# per layer: q 8x8 = 64, k 8x4 = 32, v 32, o 64, gate 8x16 = 128, up 128, down 128 -> 576; 2 layers 1152.
# head: the tied embedding, 10 x 8 = 80.
FULL = {"body": 1152.0, "body_trainable": 1152.0, "head": 80.0, "head_trainable": 1.0, "layers": 2.0, "q_dim": 8.0}
# LoRA r 2 on q_proj, v_proj: q A 2x8 + B 8x2 = 32, v A 2x8 + B 4x2 = 24 -> 56 per layer, 112 in all;
# everything else frozen (the tied head too).
LORA = {"body": 1264.0, "body_trainable": 112.0, "head": 80.0, "head_trainable": 0.0, "layers": 2.0, "q_dim": 8.0}


def test_matmul_dims_by_hand():
    from peft import LoraConfig, get_peft_model

    assert matmul_dims(_tiny_llama()) == FULL
    lora = get_peft_model(_tiny_llama(), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    assert matmul_dims(lora) == LORA


def test_forward_and_backward_flops_by_hand():
    # one row of 3 positions, no cache, every position to the head: attended = 1 + 2 + 3 = 6
    # forward = 2 * 1152 * 3 + 2 * 80 * 3 + 4 * 2 layers * 8 q_dim * 6 = 6912 + 480 + 384 = 7776
    assert forward_flops(FULL, 3, 3, 6) == 7776.0
    # full fine-tuning: every weight trainable, backward = 2 x forward
    # = 2 * (2 * 1152) * 3 + 2 * 2 * 80 * 3 + 8 * 2 * 8 * 6 = 13824 + 960 + 768 = 15552
    assert backward_flops(FULL, 3, 3, 6) == 15552.0 == 2 * forward_flops(FULL, 3, 3, 6)
    # LoRA: forward = 2 * 1264 * 3 + 480 + 384 = 8448; backward: frozen 1152 once, adapters 112 twice,
    # frozen head once: 2 * (1152 + 2 * 112) * 3 + 2 * 80 * 3 + 768 = 8256 + 480 + 768 = 9504 (1.125x, not 2x)
    assert forward_flops(LORA, 3, 3, 6) == 8448.0
    assert backward_flops(LORA, 3, 3, 6) == 9504.0
    # only the last position reaches the head (logits_to_keep 1): 2 * 1152 * 3 + 2 * 80 * 1 + 384 = 7456
    assert forward_flops(FULL, 3, 1, 6) == 7456.0
    # AdamW over 112 fp32 parameters: read p, g, m, v, write p, m, v = 7 * 4 * 112 = 3136 bytes
    assert adamw_bytes(112) == 3136.0


class _Cache:
    def get_seq_length(self):
        return 4


def test_forward_work_from_the_call():
    ids = torch.zeros(2, 3, dtype=torch.long)
    # no cache, all logits: 6 positions, 6 to the head, attended 2 * (1 + 2 + 3) = 12
    assert forward_work(ids, {}) == {"positions": 6.0, "head_positions": 6.0, "attended": 12.0}
    # 4 cached positions, logits_to_keep 1: attended 2 * (4 * 3 + 6) = 36, 2 rows x 1 to the head
    w = forward_work(ids, {"past_key_values": _Cache(), "logits_to_keep": 1})
    assert w == {"positions": 6.0, "head_positions": 2.0, "attended": 36.0}


def test_phase_bounds_by_hand():
    one = {"positions": 3.0, "head_positions": 3.0, "attended": 6.0}  # 7776 forward FLOPs with FULL
    work = {
        "generate": {"policy/fwd": one},  # a prefill: 7776
        "forward": {"policy/fwd": one, "reference/fwd": one},  # old + reference: 15552
        "train": {"policy/fwdbwd": one},  # forward + backward: 7776 + 15552 = 23328
    }
    dims = {"policy": FULL, "reference": FULL}
    assert step_flops(work, dims) == {"generate": 7776.0, "forward": 15552.0, "train": 23328.0, "critic": 0.0}
    # activation checkpointing runs the training forward twice: 23328 + 7776 = 31104
    assert step_flops(work, dims, recompute=True)["train"] == 31104.0
    decode = {"matmul_flops_per_s": 7776.0, "copy_bytes_per_s": 3136.0, "flops": 100.0, "bytes": 50.0, "bound_s": 2.0}
    secs = {"generate": 6.0, "forward": 4.0, "train": 12.0, "step": 30.0}
    b = phase_bounds(secs, [work, work], dims, decode, optimizer_steps=2, trainable=112)
    # generate: prefill 1 s + the decode bound 2 s = 3 s; measured 6 s -> 2x
    assert b["generate"]["bound_s"] == 3.0 and b["generate"]["distance"] == 2.0
    assert b["generate"]["flops"] == 7876.0 and b["generate"]["bytes"] == 50.0
    assert b["forward"]["bound_s"] == 2.0 and b["forward"]["distance"] == 2.0
    # train: 23328 / 7776 = 3 s of matmuls + 2 AdamW steps x 3136 bytes / 3136 B/s = 2 s -> 5 s, 12 s measured
    assert b["train"]["bound_s"] == 5.0 and b["train"]["distance"] == pytest.approx(2.4)
    assert "critic" not in b
    assert b["step"]["bound_s"] == 10.0 and b["step"]["distance"] == 3.0


def test_the_bound_table_prints_phase_and_bound():
    from zoo.cli.bench_tables import print_bound
    from zoo.cli.common import console

    row = {"seconds": 2.0, "flops": 3e9, "bytes": 0.0, "bound_s": 1.0, "distance": 2.0}
    res = {"bound": {"matmul_flops_per_s": 5e10, "copy_bytes_per_s": 1e10, "dtype": "float32"}}
    res["bound"] |= {p: dict(row) for p in ("generate", "forward", "train", "step")}
    with console.capture() as cap:
        print_bound(res)
    out = cap.get()
    assert "phase" in out and "bound s" in out and "2.0x" in out and "50.00 GFLOP/s" in out
    assert "critic" not in out  # no critic row without a critic
    with console.capture() as cap:
        print_bound({})  # a result without a bound (e.g. an older JSON) prints nothing
    assert cap.get() == ""


def test_weight_bytes_by_hand():
    # the tiny Llama's 1272 parameters: the tied embedding 80, per layer 576 linear + 2 norms of 8, the final
    # norm 8 (80 + 2 * 592 + 8); fp32 4 bytes each, read as bf16 copies under autocast 2 bytes each
    from zoo.bench.bound import weight_bytes

    assert weight_bytes(_tiny_llama()) == 5088.0
    assert weight_bytes(_tiny_llama(), torch.bfloat16) == 2544.0


def test_forward_and_train_move_the_weights_they_read():
    """Each forward call reads its model's weights once: the forward phase's "GB moved" is no longer 0,
    and its bound is the memory side where reading the weights takes longer than the matmuls."""
    from zoo.bench.phase_bound import work_bytes

    one = {"positions": 3.0, "head_positions": 3.0, "attended": 6.0}  # 7776 forward FLOPs with FULL
    work = {
        "forward": {"policy/fwd": {**one, "calls": 2.0}, "reference/fwd": {**one, "calls": 1.0}},
        "train": {"policy/fwdbwd": {**one, "calls": 1.0}},
    }
    dims = {"policy": {**FULL, "weight_bytes": 3136.0}, "reference": {**FULL, "weight_bytes": 3136.0}}
    # forward: 3 calls x 3136 bytes = 9408; train: 1 call, 2 with activation checkpointing (the forward again)
    assert work_bytes(work["forward"], dims) == 9408.0
    assert work_bytes(work["train"], dims) == 3136.0 and work_bytes(work["train"], dims, recompute=True) == 6272.0
    decode = {"matmul_flops_per_s": 7776.0, "copy_bytes_per_s": 3136.0, "flops": 100.0, "bytes": 50.0, "bound_s": 2.0}
    secs = {"generate": 6.0, "forward": 6.0, "train": 12.0, "step": 30.0}
    b = phase_bounds(secs, [work], dims, decode, optimizer_steps=2, trainable=112)
    # forward: matmuls 15552 / 7776 = 2 s, weights 9408 / 3136 = 3 s: the memory side, 3 s, 6 s measured -> 2x
    assert b["forward"]["bytes"] == 9408.0 and b["forward"]["bound_s"] == 3.0 and b["forward"]["distance"] == 2.0
    # train: matmuls 23328 / 7776 = 3 s > weights 3136 / 3136 = 1 s, + AdamW 2 x 3136 bytes / 3136 B/s = 2 s
    assert b["train"]["bytes"] == 3136.0 + 6272.0 and b["train"]["bound_s"] == 5.0
    assert b["step"]["bytes"] == 50.0 + 9408.0 + 9408.0  # generate's: the decode row's 50
    b = phase_bounds(secs, [work], dims, decode, optimizer_steps=2, trainable=112, recompute=True)
    # checkpointing: matmuls (23328 + 7776) / 7776 = 4 s > weights 6272 / 3136 = 2 s; + AdamW 2 s
    assert b["train"]["bytes"] == 6272.0 + 6272.0 and b["train"]["bound_s"] == 6.0


def test_train_flops_count_no_weight_gradient_for_frozen_weights():
    """Kaplan et al. 2020 section 2.1: 6N per token with every weight trainable; a frozen weight needs its
    activation gradient (2N) but no weight gradient, so LoRA's step is 4N + 2T."""
    from zoo.bench.run import train_flops
    from zoo.cli.bench_tables import flops_per_token

    full = train_flops(1272, 10, 2.0)  # the tiny Llama, 10 positions in 2 s: 6 * 1272 * 10 = 76320 FLOPs
    assert full["flops"] == 76320.0 and full["flops_per_s"] == 38160.0 and full["trainable"] == 1272.0
    # LoRA r 2 on q, v (112 adapter weights) over the frozen 1272: (4 * 1384 + 2 * 112) * 10 = 57600, not 6 * 1384 * 10
    lora = train_flops(1384, 10, 2.0, trainable=112)
    assert lora["flops"] == 57600.0 and lora["flops_per_s"] == 28800.0
    # a critic trains whole: + 6 * 50 * 4 = 1200
    assert train_flops(1384, 10, 2.0, 50, 4, trainable=112, critic_trainable=50)["flops"] == 58800.0
    assert flops_per_token(full) == "6 x 0.0M params"
    assert flops_per_token({"params": 135e6, "trainable": 1.8e6}) == "(4 x 135.0M params + 2 x 1.8M trainable)"
    assert flops_per_token({"params": 135e6}) == "6 x 135.0M params"  # a result written before `trainable`
