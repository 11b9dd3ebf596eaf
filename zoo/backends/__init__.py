"""Backends the engine runs on: `generate/` (how completions are sampled: `hf`, transformers'
`generate` with a shared-prompt KV cache; `vllm`; the `noisy` wrapper) and `train/` (training
strategies DDP and FSDP2, the one-file and the sharded checkpoints, peak memory). The data-parallel
collectives every layer uses are `zoo.core.dist`."""
