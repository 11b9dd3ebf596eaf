"""The schema-wide rules of zoo.config.schema.Strict and the error lines of zoo.config.schema, each with
an input that once slipped through or gave an unclear error."""

import pytest

from zoo.config import schema
from zoo.config.run import RunConfig, parse_run_config
from zoo.config.variant import VariantError, load_variant, parse_variant
from zoo.study.experiment import parse_study


def run_error(data):
    with pytest.raises(VariantError) as e:
        parse_run_config(data, "run.yaml")
    return str(e.value)


def test_config_and_variant_models_share_one_base_class():
    from zoo.config import run as config
    from zoo.config import variant
    from zoo.study import experiment

    for m in (config.Budget, config.Optim, config.RunConfig, variant.Variant, variant.KLSpec, experiment.Ablation):
        assert issubclass(m, schema.Strict)
    assert config.Spec is variant.Spec is schema.Spec


@pytest.mark.parametrize(
    "sets,key",
    [
        ({"kl.adaptive": {"target": float("nan")}}, "slots.kl.adaptive.target"),
        ({"kl.beta": float("inf")}, "slots.kl.beta"),
    ],
)
def test_non_finite_variant_floats_are_rejected(sets, key):
    with pytest.raises(VariantError) as e:
        load_variant("grpo", sets)  # every slot stated (no hidden defaults): a shipped variant + overrides
    assert str(e.value).endswith(f"grpo.yaml: key {key!r}: Input should be a finite number")  # and nothing else
    assert "Input should be 'none'" not in str(e.value)  # not the other branch of `kl: none | {...}`


@pytest.mark.parametrize("section,key", [("optim", "lr"), ("sampling", "temperature"), ("optim", "max_grad_norm")])
def test_non_finite_run_floats_are_rejected(section, key):
    for bad in (float("nan"), float("inf")):
        assert f"key '{section}.{key}': Input should be a finite number" in run_error({section: {key: bad}})


def test_a_bool_is_not_a_number_and_a_number_is_not_a_bool():
    assert "key 'budget.steps': expected a number, got the boolean true" in run_error({"budget": {"steps": True}})
    assert "key 'optim.lr': expected a number, got the boolean true" in run_error({"optim": {"lr": True}})
    assert "key 'eval.enabled': expected true or false, got the number 1" in run_error({"eval": {"enabled": 1}})
    assert "item 0: expected a number" in run_error({"optim": {"betas": [True, 0.9]}})
    # a field typed `X | bool` still takes its bool, and an int still fills a float field
    cfg = parse_run_config({"tracking": {"wandb": False}, "optim": {"lr": 1}}, "run.yaml")
    assert cfg.tracking.wandb is False and cfg.optim.lr == 1.0


def test_reward_weight_true_is_rejected():
    from zoo.rewards.compute import resolve_rewards

    with pytest.raises(ValueError, match="weight must be a number, got the boolean true"):
        resolve_rewards([{"name": "correctness", "weight": True}])
    assert resolve_rewards([{"name": "correctness", "weight": "0.5"}])[0][1] == 0.5


def test_numeric_strings_are_floats_where_the_schema_expects_a_float():
    # PyYAML 1.1 reads 1e-3 (no dot) as the string "1e-3"
    import yaml

    assert yaml.safe_load("lr: 1e-3") == {"lr": "1e-3"}
    cfg = parse_run_config({"optim": {"lr": "1e-3", "betas": ["0.5", 0.9]}}, "run.yaml")
    assert cfg.optim.lr == 0.001 and cfg.optim.betas == (0.5, 0.9)


def test_betas_each_in_zero_one():
    msg = run_error({"optim": {"betas": [2, 3]}})
    assert "key 'optim.betas.0': Input should be less than 1" in msg and "optim.betas.1" in msg
    assert "optim.betas.0" in run_error({"optim": {"betas": [-0.1, 0.9]}})
    assert parse_run_config({"optim": {"betas": [0, 0.99]}}, "run.yaml").optim.betas == (0.0, 0.99)


@pytest.mark.parametrize(
    "name,why",
    [
        ("x" * 300, "at most 200 characters, got 300"),
        ("a\nb", "no newlines or other control characters"),
        ("a\tb", "no newlines or other control characters"),
    ],
)
def test_run_names_that_cannot_be_folders(name, why):
    assert why in run_error({"name": name})


def test_a_200_character_name_is_fine():
    assert RunConfig(name="x" * 200).name == "x" * 200


def test_unknown_key_under_an_ablation_lists_the_allowed_keys():
    with pytest.raises(VariantError) as e:
        parse_study({"ablations": {"small": {"variant": "grpo", "sett": {}}}}, "study.yaml")
    assert str(e.value) == (
        "study.yaml: key 'ablations.small.sett' is not allowed (did you mean 'set'?); allowed: variant, set"
    )


def test_unknown_key_under_wandb_lists_the_allowed_keys_without_a_bool_error():
    msg = run_error({"tracking": {"wandb": {"projct": "x"}}})
    assert msg == (
        "run.yaml: key 'tracking.wandb.projct' is not allowed (did you mean 'project'?); "
        "allowed: project, entity, mode, tags, table_every"
    )


def test_unknown_key_through_optional_and_union_slots():
    assert (
        "key 'model_opts.lora.rr' is not allowed (did you mean 'r'?); allowed: r, alpha, target_modules"
        in run_error({"model_opts": {"lora": {"rr": 4}}})
    )
    with pytest.raises(VariantError) as e:
        parse_variant(
            {
                "name": "v",
                "base": "grpo",
                **load_variant("grpo").model_dump(exclude={"slots"}),
                "slots": {**load_variant("grpo").slots.model_dump(), "kl": {"placement": "loss", "betta": 0.1}},
            },
            "v.yaml",
        )
    assert str(e.value) == (
        "v.yaml: key 'slots.kl.betta' is not allowed (did you mean 'beta'?); "
        "allowed: placement, estimator, beta, adaptive, bias_correction"
    )


def test_bool_number_mixup_looks_through_optional_and_tuples():
    assert schema.bool_number_mixup(True, int | None) == "expected a number, got the boolean true"
    assert schema.bool_number_mixup(True, bool | int) is None
    assert schema.bool_number_mixup(0, bool) == "expected true or false, got the number 0"
    assert (
        schema.bool_number_mixup((0.9, False), tuple[float, float])
        == "item 1: expected a number, got the boolean false"
    )
    assert schema.bool_number_mixup("x", int) is None


def test_finite_number():
    assert schema.finite_number("1e-3", "w") == 0.001
    for bad in (True, float("nan"), "inf", "abc", None):
        with pytest.raises(ValueError, match="^w: "):
            schema.finite_number(bad, "w")
