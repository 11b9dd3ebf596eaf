"""Coefficients that move with the run: today the adaptive KL coefficient beta."""
from __future__ import annotations

from typing import Any

import torch

from zoo import dist
from zoo.batch import Batch
from zoo.components.kl import adaptive_beta


def next_beta(beta: float, kl: Any, m: dict[str, Any], batch: Batch) -> float:
    """The adaptive controller's next beta (Ziegler et al. arXiv:1909.08593 §2.2) from the step's mean
    KL per completion over every rank's rows (a collective: every rank calls it, with or without
    rows). `kl/ref` is a token mean: this rank's with KL in the reward, already the step's with KL in
    the loss; either way the sum over ranks of mean x local tokens is the step's KL sum.
    kl: the variant's KLSpec (with `adaptive` set); m: the step's metrics so far."""
    tokens = float(batch.loss_mask.sum()) if batch.size else 0.0
    part = float(m.get("kl/ref", float("nan"))) * tokens if tokens else 0.0
    kl_sum, n = dist.all_reduce_sum(torch.tensor([part, float(batch.size)], dtype=torch.float64)).tolist()
    if n == 0 or kl_sum != kl_sum:
        return beta
    return adaptive_beta(beta, kl_sum / n, kl.adaptive.target, kl.adaptive.horizon, n)
