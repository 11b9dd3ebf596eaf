"""A component's (or environment's) parameter must fit its default's type: `demo: "nope"` for a bool,
`coef: "x"` for a float are errors naming the component and the parameter, not silently used."""

import pytest

from zoo.core.registry import ComponentError, build


@pytest.mark.parametrize(
    "kind, spec, msg",
    [
        ("env", {"name": "calculator", "demo": "nope"}, "'demo' must be true or false, got 'nope'"),
        ("env", {"name": "calculator", "demo": "false"}, "'demo' must be true or false"),
        ("env", {"name": "calculator", "role": 3}, "'role' must be a string, got 3"),
        ("loss", {"name": "entropy_bonus", "coef": "x"}, "'coef' must be a number, got 'x'"),
        ("clip", {"name": "ppo", "eps": True}, "'eps' must be a number, got True"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(kind, spec, msg):
    with pytest.raises(ComponentError, match=msg.replace("(", r"\(")):
        build(kind, spec)


def test_values_of_the_right_type_still_build():
    assert (
        build("clip", {"name": "clip_higher", "eps_high": 1}).params["eps_high"] == 1
    )  # an int where a float is expected is a number
    assert build("loss", {"name": "entropy_bonus", "coef": "1e-3"}).params["coef"] == pytest.approx(
        1e-3
    )  # YAML 1.1 exponent
    assert build("env", {"name": "calculator", "demo": False}).params["demo"] is False


def test_zoo_validate_refuses_an_env_parameter_of_the_wrong_type(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from zoo.cli import app

    f = tmp_path / "run.yaml"
    f.write_text(
        f"variant: grpo\nmodel: {tiny_model_dir}\ntask: {{name: reasoning_gym, dataset: basic_arithmetic, "
        "env: {name: calculator, demo: nope}}\n"
    )
    r = CliRunner().invoke(app, ["validate", str(f)])
    assert r.exit_code == 1 and "'demo' must be true or false" in r.output, r.output
