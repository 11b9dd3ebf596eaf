"""Training backends: training strategies over processes (`strategy`: DDP, FSDP2), the one-file
checkpoint with rng state (`checkpoint`) and the sharded one of data-parallel runs (`checkpoint_dcp`),
and peak memory measurement (`memory`)."""
