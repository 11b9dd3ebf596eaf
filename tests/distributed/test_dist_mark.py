"""A test that starts torchrun must carry the `dist` mark (pyproject.toml), so that the unit lane
`-m "not dist and not e2e and not slow"` starts no processes: conftest.launch_two_ranks refuses otherwise."""

import pytest
from conftest import launch_two_ranks


def test_an_unmarked_test_cannot_start_torchrun(tmp_path):
    with pytest.raises(
        RuntimeError,
        match=r"::test_an_unmarked_test_cannot_start_torchrun starts torchrun: "
        r"mark it @pytest\.mark\.dist",
    ):
        launch_two_ranks(tmp_path / "not_started.py")
