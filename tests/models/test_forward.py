"""zoo.models.forward: the output head takes a contiguous input (logits_to_keep's sliced hidden states)."""

import torch

from zoo.models.forward import contiguous_head_input
from zoo.models.tiny import tiny_model_and_tokenizer


def test_contiguous_head_input_same_logits_and_a_contiguous_input():
    model, _ = tiny_model_and_tokenizer(seed=1)
    ids = torch.randint(0, 100, (3, 9))
    with torch.no_grad():
        before = model(input_ids=ids, logits_to_keep=4).logits  # [3, 4, V] from a strided view
    seen = []
    contiguous_head_input(model)
    contiguous_head_input(model)  # idempotent: one hook
    model.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous()))
    with torch.no_grad():
        after = model(input_ids=ids, logits_to_keep=4).logits
    assert seen == [True]
    assert len(model.get_output_embeddings()._forward_pre_hooks) == 2  # ours once, the probe
    torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-5)
