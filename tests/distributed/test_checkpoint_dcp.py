"""Sharded checkpoints of data-parallel runs (zoo.backends.train.checkpoint_dcp, zoo.run.checkpoint): save -> resume on
2 gloo ranks equals the uninterrupted 2-rank run, with plain modules (today's data-parallel path)
and with the model wrapped by FSDP2's `fully_shard` (DTensor shards); the files are data only; a
resume under another world size is refused. One torchrun launch (tests/distributed/dcp_worker.py) for all."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_two_ranks
from dcp_worker import CASES
from test_trainer import assert_same_metrics

HERE = Path(__file__).resolve().parent


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "reward/total" in line]


def _shard_tensors(folder: Path) -> dict[str, list[tuple[list[int], torch.Tensor]]]:
    """Every tensor of a shards folder: key -> [(offsets, tensor)] over the ranks' safetensors files."""
    from safetensors import safe_open

    out: dict[str, list] = {}
    for f in sorted(folder.iterdir()):
        with safe_open(f, framework="pt") as s:
            info = json.loads((s.metadata() or {}).get("DCP_SHARDING_INFO", "{}"))
            for k in s.keys():
                out.setdefault(k, []).append((info.get(k, {}).get("saved_offsets"), s.get_tensor(k)))
    return out


@pytest.fixture(scope="module")
def dcp_runs(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("dcp")
    run_two_ranks(HERE / "dcp_worker.py", str(out), str(tiny_model_dir), timeout=400)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.dist
def test_ddp_sharded_resume_equals_the_uninterrupted_run(dcp_runs, case):
    """Crash after step 1, resume from the shards: steps 2-3 log what the uninterrupted run logged
    (sampling depends on every rank's restored RNG and prompt position, the update on the restored
    weights and AdamW moments), and the final shards hold the same tensors."""
    full, cut = dcp_runs / f"{case}-full", dcp_runs / f"{case}-cut"
    assert [r["step"] for r in _records(cut)] == [1, 2, 3]
    assert_same_metrics(_records(full), _records(cut))
    a, b = _shard_tensors(full / "checkpoint" / "shards.step3"), _shard_tensors(cut / "checkpoint" / "shards.step3")
    assert a.keys() == b.keys() and any(k.startswith("policy/optimizer.state.") for k in a)
    for k in a:
        for (_, x), (_, y) in zip(a[k], b[k]):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5, msg=k)


@pytest.mark.dist
def test_ddp_shards_hold_the_trainable_parameters_only(dcp_runs):
    """LoRA: the policy's shards are its adapters (the frozen base is rebuilt from the model), the
    critic's its adapters and value head; full fine-tuning: every weight of the model (and of the moved
    reference)."""
    from zoo.models.tiny import tiny_model_and_tokenizer

    lora = [k for k in _shard_tensors(dcp_runs / "ppo-lora-cut" / "checkpoint" / "shards.step3") if "/" not in k]
    policy = [k for k in lora if k.startswith("policy.")]
    critic = [k for k in lora if k.startswith("critic.")]
    assert policy and all(".lora_A." in k or ".lora_B." in k for k in policy), policy
    # 2 layers x (q_proj, v_proj) x (A, B) = 8 adapter matrices
    assert len(policy) == 8 and len([k for k in critic if ".lora_" in k]) == 8
    assert [k for k in critic if ".lora_" not in k], "the value head is missing"

    full = {k for k in _shard_tensors(dcp_runs / "grpo-full-cut" / "checkpoint" / "shards.step3") if "/" not in k}
    model, _ = tiny_model_and_tokenizer(seed=0)
    # and the moved reference (ref_reset_every), frozen but kept whole
    assert full == {f"{part}.{k}" for k in model.state_dict() for part in ("policy", "reference")}


@pytest.mark.dist
def test_ddp_checkpoint_is_data_only_and_rotates(dcp_runs):
    """state.pt names its shards folder and loads weights-only; a shards folder is safetensors files
    only (no pickled .metadata); the folder the rotated-out state.prev.pt named is gone."""
    d = dcp_runs / "grpo-full-cut" / "checkpoint"
    state = torch.load(d / "state.pt", weights_only=True)
    prev = torch.load(d / "state.prev.pt", weights_only=True)
    assert (state["step"], state["shards"], state["world_size"]) == (3, "shards.step3", 2)
    assert (prev["step"], prev["shards"]) == (2, "shards.step2")
    assert "policy" not in state and "optimizer" not in state  # the weights are in the shards
    assert sorted(p.name for p in d.iterdir()) == ["shards.step2", "shards.step3", "state.prev.pt", "state.pt"]
    for folder in (d / "shards.step2", d / "shards.step3"):
        names = sorted(p.name for p in folder.iterdir())
        assert len(names) == 2 and all(n.endswith(".safetensors") for n in names), names  # one file per rank
    assert len(state["rng_ranks"]) == 2 and not torch.equal(
        state["rng_ranks"][0]["torch"], state["rng_ranks"][1]["torch"]
    )


@pytest.mark.dist
def test_fsdp_sharded_resume_equals_the_uninterrupted_run(dcp_runs):
    """fully_shard'ed tiny model: 2 steps, save, restore into a model of other initial weights under
    another RNG seed, 2 steps == 4 uninterrupted steps (losses and final weights)."""
    reps = [json.loads((dcp_runs / "fsdp" / f"report_rank{r}.json").read_text()) for r in range(2)]
    for r in reps:
        assert r["dtensor"] and r["fresh_differs"] and r["restored_step"] == 2
        assert r["cut"] == pytest.approx(r["full"], rel=1e-6, abs=1e-7)
        assert r["max_param_diff"] <= 1e-6
    assert len(set(reps[0]["full"])) == 4  # the loss moved every step: the comparison can fail
    # each rank wrote its own half of a sharded weight: the embedding's 105 rows split at row 53
    emb = _shard_tensors(dcp_runs / "fsdp" / "checkpoint" / "shards.step2")["policy.model.embed_tokens.weight"]
    assert sorted((off[0], t.shape[0]) for off, t in emb) == [(0, 53), (53, 52)]


@pytest.mark.dist
def test_fsdp_shards_read_back_whole_in_one_process(dcp_runs):
    """read_full puts each weight back together from the two ranks' chunks, without a process group:
    equal to what the ranks gathered (full_tensor) when they saved."""
    from zoo.backends.train.checkpoint_dcp import read_full

    saved = torch.load(dcp_runs / "fsdp" / "saved_params.pt")
    got = read_full(dcp_runs / "fsdp" / "checkpoint" / "shards.step2", "policy")
    assert got.keys() == saved.keys()
    for k in saved:
        torch.testing.assert_close(got[k], saved[k], atol=0, rtol=0, msg=k)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.dist
def test_export_of_a_ddp_run_reads_its_shards(dcp_runs, tiny_model_dir, tmp_path, case):
    """`zoo export` of a data-parallel run: the trained weights from the shards (full fine-tuning:
    exactly the policy's shards; LoRA: merged, so the adapted projections differ from the base)."""
    from safetensors.torch import load_file

    from zoo.backends.train.checkpoint_dcp import read_full
    from zoo.cli.export import export_run

    export_run(dcp_runs / f"{case}-cut", tmp_path / "hf")
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    base = load_file(tiny_model_dir / "model.safetensors")
    if case == "grpo-full":
        shards = read_full(dcp_runs / f"{case}-cut" / "checkpoint" / "shards.step3", "policy")
        for k, v in exported.items():
            torch.testing.assert_close(v, shards[k], atol=0, rtol=0, msg=k)
    else:
        k = "model.layers.0.self_attn.q_proj.weight"
        assert not torch.equal(exported[k], base[k]), "the trained adapter was not merged"
        k = "model.layers.0.mlp.up_proj.weight"  # no adapter there
        torch.testing.assert_close(exported[k], base[k], atol=0, rtol=0)


@pytest.mark.dist
def test_resume_on_another_world_size_is_refused(dcp_runs, tiny_model_dir, tmp_path):
    """The 2-rank checkpoint resumed in one process stops before any step, naming both sizes."""
    from conftest import tiny_run_config

    from zoo.backends.train.checkpoint import CheckpointError
    from zoo.run import trainer

    run = tmp_path / "run"
    shutil.copytree(dcp_runs / "grpo-full-cut", run)
    (run / "summary.json").unlink()  # not finished: the resume reaches the checkpoint
    cfg = tiny_run_config(
        tiny_model_dir, run, **{**CASES["grpo-full"], "budget": {"steps": 3}, "eval": {"enabled": False}}
    )
    with pytest.raises(
        CheckpointError,
        match=r"state.pt: written by a run on 2 processes, this run has 1; resume "
        r"it on 2 processes \(torchrun --nproc_per_node 2",
    ):
        trainer.train(cfg, progress=False)
    assert sorted(p.name for p in (run / "checkpoint").iterdir())[:2] == ["shards.step2", "shards.step3"]  # kept


# ---------------------------------------------------------------- one process, no launch
def test_world_size_check_both_ways():
    from zoo.backends.train.checkpoint import CheckpointError, check_world_size, world_size_of

    check_world_size({"world_size": 2}, Path("c/state.pt"), 2)  # same size: nothing to say
    with pytest.raises(
        CheckpointError,
        match=r"c/state.pt: written by a run on 1 process, this run has 2; "
        r"resume it in one process \(without torchrun\)",
    ):
        check_world_size({"world_size": 1}, Path("c/state.pt"), 2)
    # checkpoints from before `world_size` was stored: one RNG state per rank
    assert world_size_of({"rng_ranks": [{}, {}, {}]}) == 3 and world_size_of({}) == 1


def test_split_and_merge_are_inverse():
    from zoo.backends.train.checkpoint_dcp import merge, split

    sd = {
        "policy": {"w": torch.ones(2)},
        "policy/optimizer": {
            "state.w.step": torch.tensor(3.0),
            "param_groups.w.lr": 0.1,
            "param_groups.w.betas": (0.9, 0.99),
        },
    }
    tensors, plain = split(sd)
    assert plain == {"policy": {}, "policy/optimizer": {"param_groups.w.lr": 0.1, "param_groups.w.betas": (0.9, 0.99)}}
    assert set(tensors["policy/optimizer"]) == {"state.w.step"}
    assert merge(tensors, plain) == sd


def test_a_taken_folder_name_is_never_reused_and_clear_removes_shards(tmp_path):
    from zoo.backends.train import checkpoint as ckpt
    from zoo.backends.train.checkpoint_dcp import folder_name

    (tmp_path / "shards.step4").mkdir()
    (tmp_path / "shards.step4.1").mkdir()
    (tmp_path / ".shards.step5.tmp").mkdir()  # a killed writer's
    assert folder_name(tmp_path, 4) == "shards.step4.2" and folder_name(tmp_path, 6) == "shards.step6"
    (tmp_path / "other").mkdir()
    ckpt.clear(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["other"]


def test_the_folder_a_save_drops_is_the_one_state_prev_named(tmp_path):
    """A save rotates state.pt into state.prev.pt, so the old state.prev.pt's folder is no longer named;
    with no state.pt (moved away as damaged, resumed from state.prev.pt) the save keeps state.prev.pt
    and its folder."""
    from zoo.backends.train import checkpoint as ckpt

    assert ckpt.shards_dropped_by_save(tmp_path) is None  # nothing saved yet
    ckpt.save(tmp_path, {"step": 1, "shards": "shards.step1"})
    assert ckpt.shards_dropped_by_save(tmp_path) is None  # no state.prev.pt
    ckpt.save(tmp_path, {"step": 2, "shards": "shards.step2"})
    assert ckpt.shards_dropped_by_save(tmp_path) == "shards.step1"
    (tmp_path / ckpt.FILE).rename(tmp_path / "state.pt.bad")
    assert ckpt.shards_dropped_by_save(tmp_path) is None


def test_missing_shards_folder_is_one_error_naming_it(tmp_path):
    from zoo.backends.train.checkpoint import CheckpointError
    from zoo.run.checkpoint import restore_checkpoint

    model = torch.nn.Linear(2, 2)
    st = SimpleNamespace(
        step=0,
        totals={},
        controllers=[],
        reference=None,
        optimizer=None,
        models=SimpleNamespace(policy=model, critic=None),
    )
    state = {"step": 3, "totals": {}, "world_size": 1, "shards": "shards.step3", "shards_plain": {}}
    with pytest.raises(
        CheckpointError,
        match=r"shards.step3: cannot be loaded into this run \(FileNotFoundError: "
        r"the shards folder .* that state.pt names is missing\); start over",
    ):
        restore_checkpoint(st, state, tmp_path)


class _Opens:
    """Unpickling this creates the file `path` (stands for code a pickle could run)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def one_rank_group():
    """A 1-process gloo group (DCP's collectives need one), torn down after the test."""
    import torch.distributed as td

    td.init_process_group("gloo", store=td.HashStore(), rank=0, world_size=1)
    yield
    td.destroy_process_group()


def test_a_failed_shard_write_is_one_write_error_and_leaves_nothing(one_rank_group, tmp_path, monkeypatch):
    """Disk full while a rank writes its shard: one WriteError naming the folder and the reason (DCP's
    CheckpointException unwrapped), the temporary folder removed, no shards folder."""
    import errno

    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    from zoo.backends.train.checkpoint_dcp import save_sharded
    from zoo.core.faults import WriteError

    def full_disk(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(HuggingFaceStorageWriter, "write_data", full_disk)
    lin = torch.nn.Linear(2, 2)
    with pytest.raises(WriteError, match=r"no space left on device while writing .*shards.step1$"):
        save_sharded(tmp_path, 1, {"m": (lin, torch.optim.AdamW(lin.parameters()), False)})
    assert list(tmp_path.iterdir()) == []


def test_shards_are_read_without_unpickling_anything(one_rank_group, tmp_path):
    """A pickled `.metadata` planted in a shards folder (what DCP's default reader unpickles) is not
    read on load: the weights come back from the safetensors files and the pickle never runs. DCP's
    FileSystemReader on the same folder does run it (the planted file is live)."""
    import pickle

    from torch.distributed.checkpoint import FileSystemReader

    from zoo.backends.train.checkpoint_dcp import load_sharded, save_sharded

    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    opt_a, opt_b = torch.optim.AdamW(a.parameters(), lr=0.1), torch.optim.AdamW(b.parameters(), lr=0.5)
    a(torch.ones(1, 3)).sum().backward()
    opt_a.step()
    name, plain = save_sharded(tmp_path, 1, {"m": (a, opt_a, False)})
    marker = tmp_path / "pickle-ran"
    (tmp_path / name / ".metadata").write_bytes(pickle.dumps(_Opens(str(marker))))
    load_sharded(tmp_path / name, plain, {"m": (b, opt_b, False)})
    assert not marker.exists()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=0, rtol=0)
        torch.testing.assert_close(opt_a.state[pa]["exp_avg"], opt_b.state[pb]["exp_avg"], atol=0, rtol=0)
    assert opt_b.param_groups[0]["lr"] == 0.1  # from state.pt's plain values
    try:
        FileSystemReader(str(tmp_path / name)).read_metadata()
    except Exception:  # noqa: BLE001 - what it does with the unpickled object does not matter
        pass
    assert marker.exists()
