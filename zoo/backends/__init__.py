"""Backends the engine runs on: `generate/` (how completions are sampled: `hf`, transformers'
`generate` with a shared-prompt KV cache). Training strategies (DDP, FSDP2) come with the
distributed issue; today data parallelism is `zoo/core/dist.py`."""
