"""Peak memory per run and provenance records."""

import sys

import pytest
import torch

from zoo.backends.train.memory import peak_memory_mb, reset_peak_memory
from zoo.run.provenance import git_commit, package_versions

CPU = torch.device("cpu")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM reset is Linux-only")
def test_peak_memory_resets_between_runs():
    reset_peak_memory(CPU)
    base = peak_memory_mb(CPU)
    x = torch.ones(64 * 2**20 // 4 * 4)  # 256 MiB, touched
    x += 1
    high = peak_memory_mb(CPU)
    del x
    reset_peak_memory(CPU)
    after = peak_memory_mb(CPU)
    assert high - base > 200  # the allocation shows in the peak
    assert after < high - 200  # and a reset forgets it once it is freed


def test_versions_and_commit():
    v = package_versions()
    assert v["torch"] == torch.__version__.split("+")[0] or v["torch"].startswith(torch.__version__.split("+")[0])
    c = git_commit()
    assert c is None or len(c.split("-")[0]) == 40
