"""A plugin module that cannot be imported (a SyntaxError, an exception, a sys.exit() at import) is one
line naming the module, its file and line, under `zoo run` and `zoo validate`, never a traceback or a
silent exit 0."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from zoo.core.registry import ComponentError, load_plugins

PLUGINS = {  # module text, what the one line must say, the line it names
    "plug_syntax": ("x = 1\ndef f(:\n    pass\n", "SyntaxError in", 2),
    "plug_indent": ("def f():\nreturn 1\n", "IndentationError in", 2),
    "plug_exit0": ("import sys\n\nsys.exit(0)\n", "it called sys.exit(0) while being imported", 3),
    "plug_exit_msg": ("raise SystemExit('bye')\n", "it called sys.exit('bye') while being imported", 1),
    "plug_raises": ("x = 1\nraise RuntimeError('no GPU here')\n", "RuntimeError raised while importing it", 2),
    "plug_dep": ("import no_such_dependency_zz\n", "ModuleNotFoundError raised while importing it", 1),
}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    for name, (text, _, _) in PLUGINS.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in PLUGINS:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name", list(PLUGINS))
def test_a_plugin_that_fails_at_import_is_one_error_naming_module_file_and_line(plugin_dir, name):
    _, what, line = PLUGINS[name]
    with pytest.raises(ComponentError) as e:
        load_plugins([name])
    msg = str(e.value)
    assert msg.startswith(f"plugin module {name!r} could not be imported: {what}")
    assert f"{plugin_dir / (name + '.py')}, line {line}" in msg and "\n" not in msg


def test_a_missing_plugin_module_keeps_pythons_message(plugin_dir):
    with pytest.raises(
        ComponentError,
        match=r"^plugin module 'no_such_plugin_zz' could not be imported: "
        r"No module named 'no_such_plugin_zz'$",
    ):
        load_plugins(["no_such_plugin_zz"])


def _run_file(tmp_path, plugin: str, **extra) -> str:
    f = tmp_path / f"run_{plugin}.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "name": "p",
                "variant": "grpo",
                "model": "smollm2-135m-instruct-q4",
                "task": {"name": "bandit"},
                "plugins": [plugin],
                "output_dir": str(tmp_path / "out"),
                "tracking": {"wandb": False},
                **extra,
            }
        )
    )
    return str(f)


@pytest.mark.parametrize("name", ["plug_exit0", "plug_syntax", "plug_raises"])
def test_zoo_run_and_validate_report_a_broken_plugin_and_exit_1(plugin_dir, tmp_path, monkeypatch, capsys, name):
    from zoo.cli import main

    f = _run_file(tmp_path, name)
    for cmd in (["run", f], ["validate", f, "--json"]):
        sys.modules.pop(name, None)
        monkeypatch.setattr(sys, "argv", ["zoo", *cmd])
        with pytest.raises(SystemExit) as e:
            main()
        out = capsys.readouterr()
        assert e.value.code == 1, (cmd, out)  # sys.exit(0) in the plugin used to end zoo silently with 0
        text = out.err if cmd[0] == "run" else " ".join(json.loads(out.out)[0]["errors"])
        assert f"plugin module {name!r} could not be imported: {PLUGINS[name][1]}" in " ".join(text.split())
        assert "Traceback" not in out.err + out.out


def test_a_reward_from_a_module_that_exits_at_import_is_reported(plugin_dir):
    from zoo.rewards.compute import resolve_reward

    with pytest.raises(
        ComponentError,
        match=r"reward 'plug_exit0:score': module 'plug_exit0' could not be imported: "
        r"it called sys.exit\(0\)",
    ):
        resolve_reward("plug_exit0:score", plugins=["plug_exit0"])
