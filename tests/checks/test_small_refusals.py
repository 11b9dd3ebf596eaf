"""Issue 37 §6: LoRA with no target module refused by `zoo validate` naming the key; an empty dotted key
(`--set set.=1`) named as itself; the user's key first for a slot the user set (`set: {advantage: gae}`);
a dangling symlink where an arm's folder goes named as such. Each through the command, no traceback."""

import subprocess
import sys

import yaml

RUN = {
    "variant": "grpo",
    "model": "./m",
    "budget": {"steps": 2, "prompts_per_step": 2, "group_size": 4},
    "task": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 8},
}


def _zoo(tmp_path, *args):
    out = subprocess.run(
        [sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    text = " ".join((out.stdout + out.stderr).split())  # rich wraps lines
    assert out.returncode != 0 and "Traceback" not in text, text
    return text


def _write(tmp_path, name, data):
    (tmp_path / name).write_text(yaml.safe_dump(data))
    return name


def test_lora_without_target_modules_is_refused_before_load(tmp_path):
    f = _write(tmp_path, "run.yaml", {**RUN, "model_opts": {"lora": {"target_modules": []}}})
    text = _zoo(tmp_path, "validate", f)
    assert "model_opts.lora.target_modules: [] names no module" in text and "e.g. [q_proj, v_proj]" in text


def test_an_empty_dotted_key_is_named_as_itself(tmp_path):
    (tmp_path / "m").mkdir()
    f = _write(tmp_path, "run.yaml", RUN)
    text = _zoo(tmp_path, "run", f, "--set", "set.=1")
    assert "key 'set.' has an empty name between its dots" in text and "budget.group_size" not in text


def test_a_slot_the_user_set_leads_with_the_users_file_and_key(tmp_path):
    f = _write(tmp_path, "run.yaml", {**RUN, "set": {"advantage": "gae"}})
    text = _zoo(tmp_path, "validate", f)
    assert "error: arm run: run.yaml: set.advantage = gae: advantage 'gae' reads 'values'" in text
    assert "(applied to " in text and "registry/grpo.yaml)" in text


def test_a_dangling_symlink_where_an_arm_goes_is_named(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "grpo-s0").symlink_to(tmp_path / "gone")
    study = {**RUN, "variants": ["grpo"], "output_dir": str(out), "model": str(tiny_model_dir)}
    del study["variant"]
    f = _write(tmp_path, "s.yaml", study)
    text = _zoo(tmp_path, "ablate", f)
    assert f"{out}/grpo-s0 is a symlink to {tmp_path}/gone, which does not exist (a dangling link)" in text
    assert "File exists" not in text
