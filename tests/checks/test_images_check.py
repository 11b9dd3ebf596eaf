"""checks/images: a task's images against the policy, refused before any weights load (issue 32 §1)."""

import json

from conftest import tiny_run_config

from zoo import checks
from zoo.checks.images import model_takes_images
from zoo.config.run import RunConfig

IMAGES = {"name": "image_shapes", "size": 8, "eval_size": 2}


def _cfg(model, task=None, **over):
    d = tiny_run_config(model, "/tmp/unused", **over).model_dump()
    if task is not None:
        d["task"] = task
    return RunConfig.model_validate(d)


def test_an_image_task_on_a_text_policy_is_refused_naming_the_key(tiny_model_dir):
    rep, _ = checks.before_load(_cfg(str(tiny_model_dir), IMAGES))
    assert any(e.startswith("task: 'image_shapes' rows carry `images`") and "text-only" in e for e in rep.errors)


def test_a_vision_language_policy_on_a_text_task_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    rep, _ = checks.before_load(_cfg(str(tmp_path)))
    assert any(e.startswith("model: ") and "rows carry no `images`" in e for e in rep.errors)
    assert model_takes_images("tiny-vlm:llava") and model_takes_images("arms:a,b") is False


def test_images_need_the_hf_generator_and_no_env():
    rep, _ = checks.before_load(_cfg("tiny-vlm:qwen2vl", {**IMAGES, "env": "calculator"}, sampling={"backend": "vllm"}))
    assert any(e.startswith("sampling.backend: 'vllm' cannot sample with images") for e in rep.errors)
    assert any(e.startswith("task.env: ") for e in rep.errors)
    rep, _ = checks.before_load(_cfg("tiny-vlm:qwen2vl", IMAGES, **{"async": {"max_staleness": 1}}))
    assert any(e.startswith("async: asynchronous rollouts do not carry images") for e in rep.errors)
    ok, _ = checks.before_load(_cfg("tiny-vlm:qwen2vl", IMAGES))
    assert not [e for e in ok.errors if "images" in e]


def test_an_unknown_tiny_vlm_is_named():
    rep, _ = checks.before_load(_cfg("tiny-vlm:gpt", IMAGES))
    assert "model: unknown tiny VLM 'tiny-vlm:gpt'; known: tiny-vlm:qwen2vl, tiny-vlm:llava" in rep.errors
    assert checks.check_loadable(_cfg("tiny-vlm:gpt", IMAGES), None).notes  # no crash: a note, nothing loaded


def test_a_hub_model_not_in_the_cache_is_a_note_not_a_guess():
    rep, _ = checks.before_load(_cfg("someone/not-cached-vl-model", IMAGES))
    assert not [e for e in rep.errors if "images" in e]
    assert any("whether it takes the task's images is checked when `zoo run` loads it" in n for n in rep.notes)


def test_a_huge_image_size_is_refused_naming_the_run_file_the_key_and_the_range(tmp_path):
    """A run file's `task: {name: image_shapes, image_size: 5000}` is refused before any picture is
    drawn (a huge side ran into a MemoryError drawing them), naming the file, `task.image_size` and 16..1024."""
    from zoo.cli.validate_file import check_file

    f = tmp_path / "run.yaml"
    f.write_text(
        "variant: grpo\nmodel: tiny-vlm:qwen2vl\n"
        "task: {name: image_shapes, size: 2, eval_size: 1, image_size: 5000}\n"
        "budget: {steps: 1, prompts_per_step: 2, group_size: 2, max_new_tokens: 4}\n"
    )
    rep = check_file(f, {}, None)
    assert [e for e in rep.errors if "image_size" in e] == [
        f"arm run: {f}: key 'task.image_size': must be an integer in 16..1024, got 5000"
    ]
