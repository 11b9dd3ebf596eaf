"""`zoo show NAME` shows any registered component; a name of a kind a command does not take is said
as that kind (issue 37 §5)."""

import json

from typer.testing import CliRunner

from zoo.cli import app
from zoo.cli import main as _main  # noqa: F401  (registers the commands)

runner = CliRunner()


def _flat(res):
    return " ".join(res.output.split())


def test_zoo_show_a_component_gives_its_kind_parameters_source_and_doc():
    res = runner.invoke(app, ["show", "calculator"])
    text = _flat(res)
    assert res.exit_code == 0 and "calculator a registered env (not a variant)" in text
    assert "parameters: role='user', demo=True" in text and "zoo/envs/calculator.py:" in text
    assert "Arithmetic tool calls" in text
    info = json.loads(runner.invoke(app, ["show", "group_mean", "--json"]).stdout)
    assert info["kind"] == "advantage" and info["name"] == "group_mean" and "source" in info


def test_zoo_show_a_variant_is_unchanged():
    res = runner.invoke(app, ["show", "grpo"])
    assert res.exit_code == 0 and "not a variant" not in res.output


def test_zoo_diff_names_the_kind_of_a_component():
    res = runner.invoke(app, ["diff", "calculator", "retry"])
    text = _flat(res)
    assert res.exit_code != 0 and res.exception is None or isinstance(res.exception, SystemExit)
    assert "'calculator' is a registered env, not a variant: zoo diff takes variants" in text
    assert "Traceback" not in text


def test_an_unknown_name_is_still_not_found():
    res = runner.invoke(app, ["show", "no_such_thing_here"])
    assert res.exit_code != 0 and "not a variant" not in res.output
