"""Two `zoo ablate` of one study at once: the arms the other process held count as finished once it
finished them, so the last process to end reports every arm and exits 0."""

import io
import json
from types import SimpleNamespace

from rich.console import Console
from test_arm_claim import _held_elsewhere

from zoo.run import lock
from zoo.study.runner import _summarise


def _arm(label, d):
    return SimpleNamespace(label=label, config=SimpleNamespace(out_dir=lambda: d))


def test_an_arm_held_by_another_process_counts_once_it_finished(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    (a / "summary.json").write_text(json.dumps({"status": "finished"}))
    arms = [_arm("a-s0", a), _arm("b-s0", b)]
    st = SimpleNamespace(name="s")
    out = io.StringIO()
    # b is still being trained by the other process (a thread holds its lease): not finished, said so, exit 1
    with _held_elsewhere(b / lock.LOCK_NAME):
        assert _summarise(st, arms, {"a-s0": "finished", "b-s0": "locked"}, Console(file=out, width=300)) == 1
    assert "1/2 arm(s) finished" in out.getvalue() and "b-s0 (in use by another process" in out.getvalue()
    # the other process ended (killed) without finishing b: its lease is free, and the line says to re-run
    out = io.StringIO()
    assert _summarise(st, arms, {"a-s0": "finished", "b-s0": "locked"}, Console(file=out, width=300)) == 1
    assert "b-s0 (the process that held it ended without finishing it: run zoo ablate again" in out.getvalue()
    # the other process finished b meanwhile: 2/2, exit 0
    (b / "summary.json").write_text(json.dumps({"status": "finished"}))
    out = io.StringIO()
    assert _summarise(st, arms, {"a-s0": "finished", "b-s0": "locked"}, Console(file=out, width=300)) == 0
    assert "2/2 arm(s) finished" in out.getvalue()
    # a failed arm stays failed whatever is on disk
    out = io.StringIO()
    assert _summarise(st, arms, {"a-s0": "failed", "b-s0": "finished"}, Console(file=out, width=300)) == 1
