"""The standard variants run on images unchanged (issue 32 §2): 2-step runs of grpo, dapo and dr_grpo
(and ppo, whose critic reads the images too) on the image_shapes task with the tiny Qwen2-VL built in
code, and grpo with the tiny LLaVA."""

import json

import pytest
from conftest import tiny_run_config

from zoo.config.run import RunConfig

IMAGES = {"name": "image_shapes", "size": 16, "eval_size": 2, "image_size": 32}


def _cfg(variant, out, model="qwen2vl"):
    d = tiny_run_config(f"tiny-vlm:{model}", out, variant=variant).model_dump()  # correctness + length rewards
    d["task"] = IMAGES
    if variant == "dapo":  # as tests/run/test_trainer.py runs it on the tiny text model:
        d["budget"]["updates"] = {"epochs": 1, "minibatches": 2}  # 16 minibatches need more rows than 2 x 4
        # a random model's accuracy is 0 everywhere and it rarely stops in 8 tokens, so dynamic sampling
        # and overlong filtering would drop every row; the rest of DAPO must train
        d["set"] = {"filter": [], "length": [{"name": "overlong_soft", "cache_frac": 0.2}]}
    return RunConfig.model_validate(d)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "variant, model",
    [("grpo", "qwen2vl"), ("dapo", "qwen2vl"), ("dr_grpo", "qwen2vl"), ("ppo", "qwen2vl"), ("grpo", "llava")],
)
def test_a_variant_trains_two_steps_on_images(variant, model, tmp_path, monkeypatch):
    from zoo.run.trainer import train

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    summary = train(_cfg(variant, tmp_path / "run", model), resume=False, progress=False)
    assert summary["status"] == "finished"
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if "loss/total" in m or "loss/policy" in m]
    assert [m["step"] for m in trained] == [1, 2] and all(m["completion/len_mean"] > 0 for m in trained)
    assert summary["eval/after"]["eval/n"] == 2.0
