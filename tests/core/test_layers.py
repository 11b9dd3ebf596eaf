"""The source layout's rules (docs/concepts/engine.md, "Source layout"), read from the source with `ast`:
every `zoo` import (top-level, inside a function, under TYPE_CHECKING, or an `importlib.import_module`
of a literal name) points down the layer order or stays in its layer; the module graph has no cycle; no
module is over 400 lines and no function of zoo/ or bench/ over 80; the `zoo/` top level holds only the
package root."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[2] / "zoo"
ROOT = ZOO.parent

# Lowest first; a module imports its own layer and layers below. docs/concepts/engine.md groups tasks .. step
# as one row ("engine") and bench, cli as another; inside a row the packages keep this order too.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("zoo.core",)),
    ("components", ("zoo.components",)),
    ("config", ("zoo.config",)),
    ("tasks", ("zoo.tasks",)),
    ("models", ("zoo.models",)),
    ("testing", ("zoo.testing",)),  # the tiny models' public path for tests (zoo.models.tiny re-exported)
    ("rewards", ("zoo.rewards",)),
    ("backends", ("zoo.backends",)),
    ("envs", ("zoo.envs",)),
    ("step", ("zoo.step",)),
    ("checks", ("zoo.checks",)),
    ("run", ("zoo.run",)),
    ("study", ("zoo.study", "zoo.rm")),  # neither imports the other
    ("bench", ("zoo.bench",)),
    ("cli", ("zoo.cli",)),
    # the package root, the public import surface: nothing inside zoo imports it
    ("api", ("zoo",)),
]
TESTING = "zoo.models.tiny"  # tiny models for the tests: no other module of zoo imports it
TOP_LEVEL = {"__init__.py", "__main__.py"}
MAX_LINES = 400
LONG_MODULES: dict[str, int] = {}  # allow-list of modules over MAX_LINES (path -> lines); none today
MAX_FUNCTION_LINES = 80  # a function or method, `def` line to last line (decorators not counted)
FUNCTION_ROOTS = ("zoo", "bench")
# functions allowed over the cap while being split (path::qualname -> lines); none today
LONG_FUNCTIONS: dict[str, int] = {}


def modules_under(zoo: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package folder `zoo`."""
    out = {}
    for path in sorted(zoo.rglob("*.py")):
        parts = list(path.relative_to(zoo.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = modules_under(ZOO)


def layer_of(mod: str) -> int:
    """Index in LAYERS of the longest listed prefix of `mod`."""
    best, idx = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > best:
                best, idx = len(pre), i
    assert idx >= 0, f"{mod}: in no layer of LAYERS"
    return idx


def _target(name: str, modules: dict[str, Path]) -> str:
    """The module an imported dotted name lands in (its longest prefix that is a module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def imports_of(mod: str, modules: dict[str, Path] = MODULES) -> list[tuple[str, int]]:
    """(imported zoo module, line) for every import in `mod`'s source, wherever it sits."""
    path = modules[mod]
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            out += [(_target(a.name, modules), n.lineno) for a in n.names if a.name.split(".")[0] == "zoo"]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - n.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "zoo":
                continue
            for a in n.names:
                full = f"{base}.{a.name}"
                out.append((full if full in modules else _target(base, modules), n.lineno))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "import_module"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and str(n.args[0].value).startswith("zoo.")
        ):
            out.append((_target(n.args[0].value, modules), n.lineno))
    return [(t, line) for t, line in out if t and t != mod]


def upward_imports(modules: dict[str, Path] = MODULES) -> list[str]:
    """`file:line: what` for each import against the layer order."""
    bad = []
    for mod, path in modules.items():
        rel = "/".join(path.parts[-(len(mod.split(".")) + (path.name == "__init__.py")) :])
        for tgt, line in imports_of(mod, modules):
            if tgt == TESTING and mod != "zoo.testing":
                bad.append(f"{rel}:{line}: imports {tgt} (only the tests may)")
            elif layer_of(tgt) > layer_of(mod):
                bad.append(
                    f"{rel}:{line}: {mod} (layer {LAYERS[layer_of(mod)][0]}) imports {tgt} "
                    f"(layer {LAYERS[layer_of(tgt)][0]}, above it)"
                )
    return bad


def cycles(modules: dict[str, Path] = MODULES) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph = {m: sorted({t for t, _ in imports_of(m, modules)}) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_module_is_in_a_layer():
    for mod in MODULES:
        layer_of(mod)


def test_no_upward_import():
    bad = upward_imports()
    assert not bad, "imports against the layer order (docs/concepts/engine.md, Source layout):\n" + "\n".join(bad)


def test_no_import_cycle():
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def function_lengths(root: Path = ROOT, folders: tuple[str, ...] = FUNCTION_ROOTS) -> dict[str, int]:
    """`path::qualified.name` -> lines (end_lineno - lineno + 1) for every function and method, nested
    ones included, in the .py files under `root/<folder>` for each of `folders`."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, rel: str, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{rel}::{prefix}{n.name}"] = n.end_lineno - n.lineno + 1
                visit(n, rel, f"{prefix}{n.name}.")
            elif isinstance(n, ast.ClassDef):
                visit(n, rel, f"{prefix}{n.name}.")
            else:
                visit(n, rel, prefix)

    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            visit(ast.parse(path.read_text(), str(path)), path.relative_to(root).as_posix(), "")
    return out


def long_function_problems(
    lengths: dict[str, int], allowed: dict[str, int], cap: int = MAX_FUNCTION_LINES
) -> list[str]:
    """What is wrong against the cap: a function over it and not allow-listed (or longer than its
    entry), and an allow-list entry that is stale (the function is now within the cap, or gone)."""
    bad = [
        f"{k}: {n} lines (over {cap}" + (f", allow-listed at {allowed[k]})" if k in allowed else ")")
        for k, n in sorted(lengths.items())
        if n > allowed.get(k, cap)
    ]
    bad += [
        f"{k}: allow-listed but {'gone' if k not in lengths else f'{lengths[k]} lines, within the cap'}"
        " (remove its LONG_FUNCTIONS entry)"
        for k in sorted(allowed)
        if lengths.get(k, 0) <= cap
    ]
    return bad


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(ZOO.parent)): n
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    over = {k: n for k, n in long.items() if n > LONG_MODULES.get(k, MAX_LINES)}
    stale = sorted(k for k in LONG_MODULES if k not in long)
    assert not over, (
        f"modules over {MAX_LINES} lines: {over}; split them (a package of modules, one concern each, "
        "issue 31), or allow-list one in LONG_MODULES while it is being split"
    )
    assert not stale, f"LONG_MODULES entries now within {MAX_LINES} lines or gone (remove them): {stale}"


def test_no_function_over_80_lines():
    """No function or method of zoo/ or bench/ over MAX_FUNCTION_LINES, but those of LONG_FUNCTIONS (being
    split); an entry that is within the cap or gone fails too, so the allow-list cannot go stale."""
    bad = long_function_problems(function_lengths(), LONG_FUNCTIONS)
    assert not bad, (
        f"functions over {MAX_FUNCTION_LINES} lines in {' and '.join(f'{f}/' for f in FUNCTION_ROOTS)} "
        "(split them into helpers of one step each, issue 31; LONG_FUNCTIONS lists the ones being split):\n"
        + "\n".join(bad)
    )


def test_the_function_cap_sees_a_long_method_and_a_stale_entry(tmp_path):
    """The cap can fail: a method one line over it is reported by its qualified name, and allow-list
    entries for a short function and a missing one are reported as stale."""
    (tmp_path / "pkg").mkdir()
    body = "".join(f"        x = {i}\n" for i in range(80))  # def + 80 lines: 81
    (tmp_path / "pkg" / "m.py").write_text(f"class A:\n    def long(self):\n{body}\n\ndef short():\n    pass\n")
    lengths = function_lengths(tmp_path, ("pkg",))
    assert lengths == {"pkg/m.py::A.long": 81, "pkg/m.py::short": 2}
    assert long_function_problems(lengths, {}) == ["pkg/m.py::A.long: 81 lines (over 80)"]
    assert long_function_problems(lengths, {"pkg/m.py::A.long": 81, "pkg/m.py::short": 90, "pkg/m.py::gone": 99}) == [
        "pkg/m.py::gone: allow-listed but gone (remove its LONG_FUNCTIONS entry)",
        "pkg/m.py::short: allow-listed but 2 lines, within the cap (remove its LONG_FUNCTIONS entry)",
    ]


def test_top_level_holds_the_package_root_only():
    top = {p.name for p in ZOO.glob("*.py")}
    assert top <= TOP_LEVEL, (
        f"zoo/ top level: {sorted(top - TOP_LEVEL)} belong in a layer's package (allowed there: {sorted(TOP_LEVEL)})"
    )


def test_the_checker_sees_a_lazy_upward_import_and_the_cycle_it_makes(tmp_path):
    """The rules can fail: a function-level import of zoo.run from the core is reported with its line."""
    fake = tmp_path / "zoo"
    for d in (fake, fake / "core", fake / "run"):
        d.mkdir(exist_ok=True)
        (d / "__init__.py").write_text("")
    (fake / "run" / "trainer.py").write_text("from zoo.core import kinds\n")
    (fake / "core" / "kinds.py").write_text("def f():\n    from zoo.run import trainer\n")
    modules = modules_under(fake)
    assert upward_imports(modules) == [
        "zoo/core/kinds.py:2: zoo.core.kinds (layer core) imports zoo.run.trainer (layer run, above it)"
    ]
    assert cycles(modules) == [["zoo.core.kinds", "zoo.run.trainer"]]


def test_the_wheel_lists_every_package():
    """pyproject's explicit `packages` holds every folder of zoo/ with an __init__.py (a missing one is
    left out of the wheel, and the installed zoo fails to import it)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((ZOO.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ZOO.parent).parts) for p in ZOO.rglob("__init__.py")}
    assert found <= listed, f"pyproject.toml [tool.setuptools] packages misses {sorted(found - listed)}"
    assert "zoo._registry" in listed
