"""A rollout worker for asynchronous training (docs/guides/async.md): a sampler with its own copy of
the policy, which receives the trainer's weights through the weight-transfer contract
(`zoo.core.kinds.WeightReceiver.accept` of a `PolicyVersion`) and generates one group at a time.

    w = RolloutWorker(config, tokenizer)            # the policy's architecture, weights not yet loaded
    w.accept(policy_version(policy, 0))            # version 0: the trainer's weights at the start
    batch = w.generate(prompt, G, sampling, seed)  # G rows, logp_rollout from the version it holds

The worker loads weights only when asked, between groups (its caller never calls `accept` during a
`generate`), so a group is never sampled with two versions. Its draws come from its own
`torch.Generator` seeded per group (`generate_rollout(generator=...)`), never from torch's global
RNG: a worker in a thread of the trainer's process neither reads nor moves the trainer's random
stream, and the same (prompt, seed, version) gives the same group in any process.

The same class is the Ray actor's body (zoo/backends/generate/ray_worker.py): it holds only a
transformers config, a tokenizer and plain tensors, so it is picklable where they are.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.backends.generate.hf import generate_rollout
from zoo.backends.generate.sampling_config import rollout_kwargs
from zoo.core.batch import Batch
from zoo.core.generator_types import SamplingParams
from zoo.core.kinds import PolicyVersion


class RolloutWorker:
    """`zoo.core.kinds.WeightReceiver` and a group sampler over a transformers causal LM built from
    `config` (base-model parameter names, as `PolicyVersion` sends them). version: the policy version
    it samples with (-1 before the first `accept`). threads: torch's intra-op threads in a worker
    process (None: leave them; a thread worker shares the trainer's). generation_config: the policy's
    (its stop ids, e.g. the `arms:` model's arms; default: what `config` implies)."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        dtype: torch.dtype = torch.float32,
        threads: int | None = None,
        generation_config: Any = None,
    ):
        import copy

        from transformers import AutoModelForCausalLM

        if threads is not None:
            torch.set_num_threads(int(threads))
        self.tokenizer = tokenizer
        # from_config draws random initial weights (replaced by the first `accept`): under fork_rng so that
        # the trainer's global RNG (minibatch order, dropout) does not depend on how many workers there are
        with torch.random.fork_rng(devices=[]):
            self.model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
        self.model.requires_grad_(False)
        if generation_config is not None:
            self.model.generation_config = copy.deepcopy(generation_config)
        self.version = -1

    def accept(self, policy: PolicyVersion, /) -> int:
        """Load `policy.tensors` (every weight of the model, base-model names; tied weights once) and
        sample with them from now on. Raises ValueError for an older version, an unknown name or a
        weight the version does not send."""
        if policy.version <= self.version:
            raise ValueError(f"policy version {policy.version} is not newer than the held {self.version}")
        sd = self.model.state_dict()
        covered: set[int] = set()
        with torch.no_grad():
            for name, t in policy.tensors:
                if name not in sd:
                    raise ValueError(f"policy version {policy.version}: unknown weight {name!r} for this model")
                sd[name].copy_(t)
                covered.add(sd[name].data_ptr())
        missing = [n for n, t in sd.items() if t.data_ptr() not in covered]
        if missing:
            raise ValueError(f"policy version {policy.version} does not send {', '.join(missing[:3])} ...")
        self.version = policy.version
        return self.version

    def generate(self, prompt: Any, group_size: int, sampling: SamplingParams, seed: int) -> Batch:
        """G completions of `prompt` sampled with the held version and a generator seeded with `seed`
        -> Batch of G rows (group id 0, logp_rollout [G, T], `rows` empty). Raises RuntimeError
        before the first `accept`."""
        if self.version < 0:
            raise RuntimeError("the rollout worker has no policy version yet (accept one first)")
        g = torch.Generator(device=next(self.model.parameters()).device).manual_seed(int(seed))
        return generate_rollout(
            self.model,
            self.tokenizer,
            [prompt],
            group_size=group_size,
            **rollout_kwargs(sampling),
            generator=g,
        )

    def to_device(self, device: Any) -> "RolloutWorker":
        """Move the worker's model to `device` (a thread worker on the trainer's GPU); returns self."""
        self.model.to(device)
        return self

    def held_version(self) -> int:
        """The version it samples with (a method, so a Ray actor answers it too)."""
        return self.version
