"""zoo.study.arm_claim: what `zoo ablate` says of an arm whose lease another process (here: thread)
holds. A finished arm is said finished; "in use" only for an arm that is not (yet) finished."""

from __future__ import annotations

import io
import json
import threading
from contextlib import contextmanager

import yaml
from rich.console import Console

from zoo.run import fingerprint, lock
from zoo.study import experiment as E
from zoo.study.arm_claim import claim

STUDY = {
    "name": "demo",
    "budget": {"steps": 3, "prompts_per_step": 2, "max_new_tokens": 32, "group_size": 4},
    "tracking": {"wandb": False},
    "seeds": [0],
    "variants": ["grpo"],
}


def _arm_config(tmp_path):
    p = tmp_path / "demo.yaml"
    p.write_text(yaml.safe_dump({**STUDY, "output_dir": str(tmp_path / "runs" / "demo")}))
    (arm,) = E.expand_arms(E.load_study(p))
    return arm.label, arm.config


@contextmanager
def _held_elsewhere(path):
    """The lease at `path` held by another thread for the block (leases are exclusive between threads)."""
    taken, done = threading.Event(), threading.Event()

    def hold():
        lease = lock.acquire(path)
        taken.set()
        done.wait(30)
        lease.release()

    t = threading.Thread(target=hold)
    t.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        done.set()
        t.join()


def _claim(label, cfg, fresh=False):
    out = io.StringIO()
    lease, action = claim(label, cfg, Console(file=out, width=300, color_system=None), fresh)
    if lease is not None:
        lease.release()
    return action, " ".join(out.getvalue().split())


def _finish(cfg, steps):
    d = cfg.out_dir()
    d.mkdir(parents=True, exist_ok=True)
    fingerprint.write_record(d, cfg)
    (d / "summary.json").write_text(json.dumps({"status": "finished", "steps": steps}))


def test_a_finished_arm_is_said_finished_even_while_another_process_holds_its_lease(tmp_path):
    label, cfg = _arm_config(tmp_path)
    _finish(cfg, steps=cfg.budget.steps)
    with _held_elsewhere(cfg.out_dir() / lock.LOCK_NAME):
        action, text = _claim(label, cfg)
    assert action == "finished"
    assert text == f"skip {label}: finished" and "in use" not in text
    assert _claim(label, cfg) == ("finished", f"skip {label}: finished")  # not held: as before
    with _held_elsewhere(cfg.out_dir() / lock.LOCK_NAME):  # --fresh: it is not retrained, because it is in use
        action, text = _claim(label, cfg, fresh=True)
    assert action == "locked" and f"skip {label}: in use by pid" in text


def test_an_unfinished_arm_held_by_another_process_is_said_in_use(tmp_path):
    label, cfg = _arm_config(tmp_path)
    with _held_elsewhere(cfg.out_dir() / lock.LOCK_NAME):  # nothing trained yet: the holder trains it
        action, text = _claim(label, cfg)
    assert action == "locked" and f"skip {label}: in use by pid" in text
    # finished at fewer steps than the budget: the holder is continuing it to the grown budget
    _finish(cfg, steps=cfg.budget.steps - 1)
    with _held_elsewhere(cfg.out_dir() / lock.LOCK_NAME):
        action, text = _claim(label, cfg)
    assert action == "locked" and f"skip {label}: in use by pid" in text
