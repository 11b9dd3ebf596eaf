"""`training.strategy` without launching processes: the config section, the checks that reject what
cannot work, the decoder layers FSDP2 shards, the `zoo run --nproc` command line, and the one-process
paths of zoo/backends/train/strategy.py (2-rank runs: tests/distributed/test_parallel.py)."""

import pytest
import torch

from zoo.backends.train import strategy
from zoo.checks.settings import check_strategy
from zoo.cli.launch import torchrun_command, without_nproc
from zoo.config.run import RunConfig


def test_training_strategy_defaults_to_single_and_is_strict():
    assert RunConfig().training.strategy == "single"
    assert RunConfig.model_validate({"training": {"strategy": "fsdp"}}).training.strategy == "fsdp"
    with pytest.raises(ValueError, match="strategy"):
        RunConfig.model_validate({"training": {"strategy": "zero3"}})
    with pytest.raises(ValueError, match="shard"):
        RunConfig.model_validate({"training": {"shard": True}})


def test_check_strategy_rejects_what_cannot_work():
    check_strategy("ddp", 1, "none")  # one process under ddp: allowed (nothing to reduce)
    check_strategy("fsdp", 1, "bf16", launched=True)  # FSDP2 on one rank under torchrun
    with pytest.raises(ValueError, match="single runs one process, but the launcher started 2"):
        check_strategy("single", 2, "none")
    with pytest.raises(ValueError, match="fsdp needs a launcher"):
        check_strategy("fsdp", 1, "none", launched=False)
    with pytest.raises(ValueError, match="fp16 is not supported: .* gradient scaler"):
        check_strategy("ddp", 2, "fp16")
    with pytest.raises(ValueError, match="expected one of single, ddp, fsdp"):
        check_strategy("zero", 1, "none")


def test_fp16_run_is_rejected_before_any_model_loads(tmp_path):
    from conftest import tiny_run_config

    from zoo.config.variant import VariantError
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tmp_path / "no-model-here", tmp_path / "out", model_opts={"autocast": "fp16"})
    with pytest.raises(VariantError, match="autocast fp16"):
        validate_run(cfg)


def test_decoder_layers_are_the_blocks_of_the_model():
    from zoo.models import apply_lora, make_critic
    from zoo.models.tiny import tiny_model_and_tokenizer

    model, _ = tiny_model_and_tokenizer(layers=3)
    assert [type(m).__name__ for m in strategy.decoder_layers(model)] == ["LlamaDecoderLayer"] * 3
    lora = apply_lora(model, {"r": 2, "alpha": 4, "target_modules": ["q_proj"]})
    assert len(strategy.decoder_layers(lora)) == 3  # under peft's wrappers too
    assert len(strategy.decoder_layers(make_critic(model))) == 3
    with pytest.raises(ValueError, match="found no decoder layers in Linear"):
        strategy.decoder_layers(torch.nn.Linear(2, 2))


def test_zoo_run_nproc_builds_the_torchrun_line():
    args = ["run", "r.yaml", "--nproc", "2", "--set", "training.strategy=ddp", "--nproc=3"]
    assert without_nproc(args) == ["run", "r.yaml", "--set", "training.strategy=ddp"]
    cmd = torchrun_command(2, args)
    assert cmd[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "zoo.cli",
        "run",
        "r.yaml",
        "--set",
        "training.strategy=ddp",
    ]


def test_one_process_strategy_is_the_plain_module_and_unscaled():
    """Without a process group ddp wraps nothing and the loss is not scaled; micro_batches passes the
    rows through (dropping empty ones) and clip follows torch's rule min(1, max / (norm + 1e-6))."""
    model = torch.nn.Linear(3, 2)
    par = strategy.wrap(model, None, None, "ddp", torch.device("cpu"))
    assert strategy.trained(par, "policy", model) is model and par.grad_scale == 1.0
    rows = [torch.tensor([0, 1]), torch.tensor([], dtype=torch.long), torch.tensor([2])]
    assert [r.tolist() for r in strategy.micro_batches(par, rows, None)] == [[0, 1], [2]]
    model.weight.grad = torch.full_like(model.weight, 2.0)  # 6 entries of 2: norm sqrt(24)
    model.bias.grad = torch.zeros_like(model.bias)
    norm = strategy.grad_norm(model)
    assert norm == pytest.approx(24**0.5)
    strategy.clip(model, 1.0, norm)
    assert float(model.weight.grad[0, 0]) == pytest.approx(2.0 / (24**0.5 + 1e-6))
