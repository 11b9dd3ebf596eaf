"""The full-vocabulary side of distillation: the teacher's and the policy's whole next-token
distributions over the completion, for a loss term that reads them (`distill_vocab`,
zoo/components/loss/distill_divergence.py; GKD arXiv 2306.13649).

    teacher   teacher_vocab(model, batch, temperature, rows) -> [N, T, V] log-softmax (no grad), 0 off the mask
    update    vocab_forward(model, mb, s, entropy_grad) -> (logp [n, T], entropy [n, T], logp_vocab [n, T, V])

Only when some component reads `logp_vocab` / `logp_teacher_vocab` (zoo/core/fields.py): these
keep [n, T, V] tensors (V the vocabulary), which the sampled-token path never does. The policy's forward
here is the update's only forward of the micro-batch (no shared-prompt KV cache), so under DDP each
micro-batch still has one forward per backward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.core.batch import Batch
from zoo.models.forward import position_ids_from_mask
from zoo.step.forwards import autocast
from zoo.step.types import StepSettings

FIELD = "logp_teacher_vocab"
POLICY_FIELD = "logp_vocab"


def _completion_logits(model: torch.nn.Module, mb: Batch) -> Tensor:
    """logits [n, T, V] at the positions that predict the completion's tokens (position j predicts j + 1)."""
    ids, att = mb.input_ids(), mb.attention_mask()
    T = mb.completion_ids.shape[1]
    out = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att), use_cache=False)
    return out.logits[:, -T - 1 : -1]


def vocab_forward(
    model: torch.nn.Module, mb: Batch, s: StepSettings, entropy_grad: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """The update's forward when a term reads `logp_vocab`: (logp [n, T] of the sampled tokens, entropy
    [n, T] (its gradient only with `entropy_grad`), the full log-softmax [n, T, V]), all float32 at the
    step's temperature, with gradients (what `forward_logp` gives, plus the vocabulary)."""
    with autocast(s.autocast, mb.prompt_ids.device):
        logits = _completion_logits(model, mb)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        z = logits.float() / s.temperature  # [n, T, V]
        vocab = torch.log_softmax(z, dim=-1)
        logp = vocab.gather(-1, mb.completion_ids.unsqueeze(-1)).squeeze(-1)  # [n, T]
        ent = -(vocab.exp() * vocab).sum(-1)
    return logp, ent if entropy_grad else ent.detach(), vocab


@torch.no_grad()
def teacher_vocab(
    model: torch.nn.Module, batch: Batch, temperature: float, rows: list[Tensor], s: StepSettings
) -> Tensor:
    """The teacher's full log-softmax over the completion, [N, T, V] float32 at `temperature`, in forwards of
    the row groups `rows` (batch: the teacher's rows, its own prompts), 0 off the loss mask."""
    parts = []
    for r in rows:
        mb = batch.select(r)
        with autocast(s.autocast, mb.prompt_ids.device):
            logits = _completion_logits(model, mb)
        parts.append(torch.log_softmax(logits.float() / temperature, dim=-1))
    out = torch.cat(parts)[torch.argsort(torch.cat(rows))]  # back to batch order
    return torch.where(batch.loss_mask.unsqueeze(-1).to(out.device), out, torch.zeros_like(out))
