"""zoo.run.precision: `model_opts.autocast: auto` picks bf16 only where the hardware runs it natively.

The CPU flags, oneDNN's answer, the timed probe and torch.cuda are faked, so every branch runs on
any machine."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.run import precision as P

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"
AVX512_NO_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    """Write a fake /proc/cpuinfo; the probe must not run where the flags decide."""
    path = tmp_path / "cpuinfo"
    monkeypatch.setattr(P, "CPUINFO", path)
    monkeypatch.setattr(P, "probe_bf16_speedup", lambda: pytest.fail("probe ran although the flags decide"))
    monkeypatch.setattr(P, "cpu_capability", lambda: "AVX512")  # what torch says, bf16 or not

    def write(text: str):
        path.write_text(text)

    return write


def test_avx2_only_cpu_gets_fp32_with_the_reason(cpuinfo):
    cpuinfo(AVX2_ONLY)
    choice, reason = P.resolve_autocast("auto", torch.device("cpu"))
    assert choice == "none"
    assert "lacks avx512_bf16 and amx_bf16" in reason and "emulated" in reason


def test_avx512_without_bf16_gets_fp32_although_torch_says_avx512(cpuinfo):
    cpuinfo(AVX512_NO_BF16)
    choice, reason = P.resolve_autocast("auto", "cpu")
    assert choice == "none" and "torch capability AVX512" in reason


@pytest.mark.parametrize("text, flag", [(AVX512_BF16, "avx512_bf16"), (AMX, "amx_bf16")])
def test_native_bf16_flag_gets_bf16(cpuinfo, text, flag):
    cpuinfo(text)
    choice, reason = P.resolve_autocast("auto", torch.device("cpu"))
    assert choice == "bf16" and f"({flag} in /proc/cpuinfo" in reason


@pytest.mark.parametrize("setting", ["none", "bf16", "fp16"])
def test_explicit_settings_pass_through_whatever_the_cpu(cpuinfo, setting):
    cpuinfo(AVX2_ONLY)
    assert P.resolve_autocast(setting, "cpu") == (setting, f"model_opts.autocast: {setting} (as configured)")


def test_unknown_setting_is_an_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="'bf32': use one of auto, none, bf16, fp16"):
        P.resolve_autocast("bf32", "cpu")


def test_cpuinfo_reader_takes_x86_flags_only(cpuinfo):
    cpuinfo(AVX2_ONLY)
    assert P.cpu_flags() == {"fpu", "sse", "sse2", "avx", "avx2", "fma", "f16c"}  # the first flags line
    cpuinfo(ARM)
    assert P.cpu_flags() is None  # aarch64's `Features` line: the oneDNN + probe path decides


@pytest.mark.parametrize("bf16_ok, name", [(True, "H100"), (False, "Tesla T4")])
def test_cuda_uses_torch_cuda_bf16_support(monkeypatch, bf16_ok, name):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **kw: bf16_ok)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **kw: name)
    monkeypatch.setattr(P, "cpu_flags", lambda: pytest.fail("a CUDA run must not decide from the CPU"))
    choice, reason = P.resolve_autocast("auto", torch.device("cuda", 0))
    assert choice == ("bf16" if bf16_ok else "none")
    assert reason == f"CUDA device {name} {'supports' if bf16_ok else 'does not support'} bf16"


@pytest.fixture
def no_flags(tmp_path, monkeypatch):
    """A machine without x86 cpuinfo flags (macOS, Windows, aarch64), with its cache in tmp_path."""
    monkeypatch.setattr(P, "cpu_flags", lambda: None)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "precision.json"


def test_without_flags_onednn_no_means_fp32_without_probing(no_flags, monkeypatch):
    monkeypatch.setattr(P, "mkldnn_bf16_supported", lambda: False)
    monkeypatch.setattr(P, "probe_bf16_speedup", lambda: pytest.fail("probed although oneDNN says no"))
    choice, reason = P.resolve_autocast("auto", "cpu")
    assert choice == "none" and "oneDNN reports no bf16" in reason


@pytest.mark.parametrize("speedup, choice", [(1.8, "bf16"), (1.05, "none"), (0.2, "none")])
def test_without_flags_the_timed_probe_decides_and_is_cached(no_flags, monkeypatch, speedup, choice):
    calls = []
    monkeypatch.setattr(P, "mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(P, "probe_bf16_speedup", lambda: calls.append(1) or speedup)
    first = P.resolve_autocast("auto", "cpu")
    assert first[0] == choice and "timed probe" in first[1]
    assert P.resolve_autocast("auto", "cpu") == first and calls == [1]  # measured once per machine
    (entry,) = json.loads(no_flags.read_text()).values()
    assert entry["bf16_speedup"] == speedup


def test_a_corrupt_cache_is_measured_again(no_flags, monkeypatch):
    no_flags.parent.mkdir(parents=True)
    no_flags.write_text("{not json")
    monkeypatch.setattr(P, "mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(P, "probe_bf16_speedup", lambda: 2.0)
    assert P.resolve_autocast("auto", "cpu")[0] == "bf16"
    assert list(json.loads(no_flags.read_text()).values())[0]["bf16_speedup"] == 2.0


def test_probe_measures_a_positive_ratio():
    assert P.probe_bf16_speedup(n=64, reps=2) > 0


def test_other_devices_get_fp32():
    assert P.resolve_autocast("auto", torch.device("meta"))[0] == "none"


def test_engine_autocast_refuses_an_unresolved_setting():
    from zoo.step import forwards as engine

    with pytest.raises(ValueError, match="resolve it first"):
        engine.autocast("auto", torch.device("cpu"))
    with pytest.raises(ValueError, match="expected none, bf16 or fp16"):
        engine.autocast("bf32", torch.device("cpu"))


def test_zoo_bench_resolves_auto_prints_and_records_the_choice(cpuinfo, tiny_model_dir):
    from typer.testing import CliRunner

    import zoo.cli.bench  # noqa: F401  (registers `bench`)
    from zoo.cli import app

    cpuinfo(AVX2_ONLY)
    task = {
        "name": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 8,
        "eval_size": 2,
        "fewshot": 0,
        "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    }
    r = CliRunner().invoke(
        app,
        [
            "bench",
            "grpo",
            "--model",
            str(tiny_model_dir),
            "--task",
            json.dumps(task),
            "--prompts",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "4",
            "--steps",
            "1",
            "--micro-batch",
            "4",
            "--threads",
            "1",
            "--json",
        ],
    )  # --autocast auto: the default
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["spec"]["autocast"] == "none"  # the bench ran (and records) the resolved choice
    assert out["precision"]["autocast"] == "none" and "lacks avx512_bf16" in out["precision"]["reason"]
    assert "autocast none (auto: CPU lacks avx512_bf16" in " ".join((r.stderr or "").split())


def test_zoo_bench_rejects_an_unknown_autocast():
    from typer.testing import CliRunner

    import zoo.cli.bench  # noqa: F401
    from zoo.cli import app

    r = CliRunner().invoke(app, ["bench", "grpo", "--autocast", "bf32"])
    assert r.exit_code == 1 and "use auto, bf16 or none" in r.output  # fp16 is rejected (no gradient scaler)
