"""zoo.backends.train.checkpoint and zoo.core.faults without a model: weights-only loading (a malicious pickle is refused
and does not run), the previous checkpoint kept, damaged files named with the options, a full disk
leaving no temporary file."""

import errno
import logging
import pickle
import random

import numpy as np
import pytest
import torch

from zoo.backends.train import checkpoint as ckpt
from zoo.core.faults import WriteError, os_error_message, write_guard


class Payload:
    """An object whose unpickling runs code: it creates `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _state(step: int) -> dict:
    return {
        "step": step,
        "beta": 0.1,
        "policy": {"w": torch.full((2, 3), float(step))},
        "rng": ckpt.rng_state(),
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0)}},
            "param_groups": [{"betas": (0.9, 0.99), "foreach": None}],
        },
    }


def test_rng_state_round_trips_through_a_weights_only_file(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.normal()  # a cached gaussian is part of numpy's state
    ckpt.save(tmp_path, {"step": 1, "rng": ckpt.rng_state()})
    expected = (random.random(), np.random.normal(), float(torch.rand(())))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    ckpt.set_rng_state(ckpt.load(tmp_path)["rng"])
    assert (random.random(), np.random.normal(), float(torch.rand(()))) == expected


def test_save_keeps_the_previous_checkpoint(tmp_path):
    ckpt.save(tmp_path, _state(1))
    assert not (tmp_path / ckpt.PREV).exists()
    ckpt.save(tmp_path, _state(2))
    assert ckpt.load(tmp_path)["step"] == 2
    assert ckpt.read(tmp_path / ckpt.PREV)["step"] == 1
    assert ckpt.read(tmp_path / ckpt.FILE)["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.99)


def test_a_pickle_that_runs_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(Payload(marker)))  # the payload is real: plain unpickling runs it
    assert marker.read_text() == "ran"
    marker.unlink()
    d = tmp_path / "checkpoint"
    d.mkdir()
    torch.save({"step": 1, "policy": {"w": Payload(marker)}}, d / ckpt.FILE)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.load(d)
    msg = str(e.value)
    assert msg.startswith(f"{d / ckpt.FILE}: refused: it holds objects other than tensors and plain values (exec)")
    assert "--fresh" in msg and "\n" not in msg
    assert not marker.exists()


def test_a_plain_pickle_naming_os_system_is_refused(tmp_path):
    # protocol 2: GLOBAL os.system, then REDUCE with ("ls",): unpickling would run `ls`
    (tmp_path / ckpt.FILE).write_bytes(b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.")
    with pytest.raises(ckpt.CheckpointError, match=r"state\.pt: refused: .*\(os\.system\)"):
        ckpt.load(tmp_path)


def test_random_bytes_are_damaged_not_refused(tmp_path):
    (tmp_path / ckpt.FILE).write_bytes(bytes(range(256)) * 8)
    with pytest.raises(
        ckpt.CheckpointError, match=r"state\.pt: damaged checkpoint, cannot be read \((UnpicklingError|RuntimeError)"
    ):
        ckpt.load(tmp_path)


def test_an_old_checkpoint_with_a_numpy_array_is_refused_naming_the_type(tmp_path):
    torch.save({"step": 1, "rng": {"numpy": np.random.get_state()}}, tmp_path / ckpt.FILE)
    with pytest.raises(ckpt.CheckpointError, match=r"refused: .*\(numpy\."):
        ckpt.load(tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "text", "empty", "not_a_dict"])
def test_a_damaged_checkpoint_names_the_file_and_the_previous_one(damage, tmp_path):
    ckpt.save(tmp_path, _state(1))
    ckpt.save(tmp_path, _state(2))
    path = tmp_path / ckpt.FILE
    data = path.read_bytes()
    if damage == "not_a_dict":
        torch.save([1, 2], path)
    else:
        path.write_bytes({"truncated": data[: len(data) // 2], "text": b"hello\n", "empty": b""}[damage])
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.load(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and ("damaged" in msg or "not a zoo checkpoint" in msg)
    assert f"the previous checkpoint {tmp_path / ckpt.PREV} (step 1) is intact" in msg
    assert f"mv {path} {path}.bad" in msg and "--fresh" in msg and "\n" not in msg


def test_moving_the_damaged_file_away_resumes_from_the_previous_one(tmp_path, caplog):
    ckpt.save(tmp_path, _state(1))
    ckpt.save(tmp_path, _state(2))
    (tmp_path / ckpt.FILE).write_bytes(b"garbage")
    (tmp_path / ckpt.FILE).rename(tmp_path / "state.pt.bad")
    with caplog.at_level(logging.WARNING, logger="zoo.backends.train.checkpoint"):
        state = ckpt.load(tmp_path)
    assert state["step"] == 1 and torch.equal(state["policy"]["w"], torch.ones(2, 3))
    assert "resuming from the previous checkpoint" in caplog.text
    ckpt.save(tmp_path, _state(3))  # nothing to rotate: state.prev.pt stays the intact step 1
    assert ckpt.read(tmp_path / ckpt.PREV)["step"] == 1


def test_damaged_with_no_previous_checkpoint_offers_fresh(tmp_path):
    (tmp_path / ckpt.FILE).write_bytes(b"")
    with pytest.raises(
        ckpt.CheckpointError, match=r"damaged checkpoint, cannot be read \(EOFError\); start over with --fresh$"
    ):
        ckpt.load(tmp_path)


def test_disk_full_while_saving_removes_the_temporary_file_and_keeps_the_last(tmp_path, monkeypatch):
    ckpt.save(tmp_path, _state(1))
    real_save = torch.save

    def half_then_full(obj, f, *a, **kw):
        f.write(b"PK partial")  # a half-written file: what a full disk leaves
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", half_then_full)
    with pytest.raises(WriteError) as e:
        ckpt.save(tmp_path, _state(2))
    monkeypatch.setattr(ckpt.torch, "save", real_save)
    assert str(e.value) == f"no space left on device while writing {tmp_path / ckpt.FILE}"
    assert e.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == [ckpt.FILE]  # no .state.pt.tmp.<pid>, nothing rotated
    assert ckpt.load(tmp_path)["step"] == 1


def test_clear_removes_checkpoints_and_stale_temporary_files(tmp_path):
    ckpt.save(tmp_path, _state(1))
    ckpt.save(tmp_path, _state(2))
    (tmp_path / f".{ckpt.FILE}.tmp.12345").write_bytes(b"left by a killed writer")
    (tmp_path / "keep.txt").write_text("x")
    ckpt.clear(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    assert ckpt.load(tmp_path) is None


def test_write_guard_names_the_file_and_removes_tmp(tmp_path):
    tmp = tmp_path / ".x.tmp"
    with pytest.raises(WriteError, match=rf"^permission denied while writing {tmp_path / 'x'}$"):
        with write_guard(tmp_path / "x", tmp=tmp):
            tmp.write_text("partial")
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp))
    assert not tmp.exists()
    with pytest.raises(KeyError):  # other errors pass unchanged (the temporary file still goes)
        with write_guard(tmp_path / "x", tmp=tmp):
            tmp.write_text("partial")
            raise KeyError("k")
    assert not tmp.exists()


def test_os_error_message_is_one_line_with_the_file():
    assert (
        os_error_message(PermissionError(errno.EACCES, "Permission denied", "/ro/run")) == "permission denied: /ro/run"
    )
    assert os_error_message(OSError(errno.ENOSPC, "No space left on device")) == "no space left on device (OSError)"
    assert os_error_message(WriteError("disk quota exceeded while writing a")) == "disk quota exceeded while writing a"


def test_a_state_that_does_not_fit_is_one_error_naming_the_file(tmp_path):
    model = torch.nn.Linear(3, 2)
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"^x/state\.pt: does not fit this run \(RuntimeError: Error\(s\) in "
        r"loading state_dict for Linear:\); start over with --fresh$",
    ):
        with ckpt.restoring("x/state.pt"):
            ckpt.load_policy_state(model, {"weight": torch.zeros(5, 5), "bias": torch.zeros(2)})
    with pytest.raises(ckpt.CheckpointError, match=r"^x/state\.pt: does not fit this run \(KeyError: 'policy'\)"):
        with ckpt.restoring("x/state.pt"):
            {"step": 1}["policy"]


def test_a_disk_that_fills_inside_torch_save_is_reported_as_enospc(tmp_path, monkeypatch):
    """A real full disk fails a write inside torch's zip writer, which re-raises it as RuntimeError
    ("unexpected pos ..."); the errno must survive (seen on a 3 MB tmpfs)."""
    import builtins

    class FillsUp:
        def __init__(self, f, room):
            self.f, self.room = f, room

        def write(self, data):
            if len(data) > self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(ckpt, "open", lambda p, mode: FillsUp(builtins.open(p, mode), 2000), raising=False)
    with pytest.raises(WriteError) as e:
        ckpt.save(tmp_path, {"step": 1, "w": torch.zeros(10_000)})
    assert e.value.errno == errno.ENOSPC
    assert str(e.value) == f"no space left on device while writing {tmp_path / ckpt.FILE}"
    assert list(tmp_path.iterdir()) == []
