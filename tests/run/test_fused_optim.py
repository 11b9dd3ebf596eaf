"""`optim.fused`: torch's fused AdamW kernel, the same update as the default up to float rounding."""

import torch

from tests.conftest import tiny_run_config
from zoo.run.fingerprint import fingerprint_fields
from zoo.run.setup import _adamw


def _steps(fused: bool, tmp_path) -> list[torch.Tensor]:
    cfg = tiny_run_config(tmp_path, tmp_path / "out", optim={"lr": 1e-2, "fused": fused})
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(64, 48)), torch.nn.Parameter(torch.randn(48))]
    start = [p.detach().clone() for p in ps]
    opt = _adamw(ps, cfg.optim.lr, cfg)
    assert opt.defaults.get("fused") is (True if fused else None)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return start + [p.detach().clone() for p in ps]


def test_fused_adamw_equals_the_default_up_to_rounding(tmp_path):
    a, b = _steps(False, tmp_path), _steps(True, tmp_path)
    for s0, x, y in zip(a[:2], a[2:], b[2:]):
        assert (x - s0).abs().max() > 1e-2  # 4 steps of lr 1e-2 moved the weights by ~4e-2
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)  # the same update, up to rounding


def test_sharded_or_integer_parameters_keep_the_default_kernel(tmp_path):
    cfg = tiny_run_config(tmp_path, tmp_path / "out", optim={"fused": True})
    half = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))  # float64: not a fused dtype here
    assert _adamw([half], 1e-3, cfg).defaults.get("fused") is None
    assert _adamw([torch.nn.Parameter(torch.zeros(3))], 1e-3, cfg).defaults.get("fused") is True


def test_the_key_leaves_older_fingerprints_alone_unless_set(tmp_path, tiny_model_dir):
    off = fingerprint_fields(tiny_run_config(tiny_model_dir, tmp_path / "a"))
    on = fingerprint_fields(tiny_run_config(tiny_model_dir, tmp_path / "b", optim={"fused": True}))
    assert "fused" not in off["optim"] and on["optim"]["fused"] is True
