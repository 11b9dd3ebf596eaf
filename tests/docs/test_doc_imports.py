"""Every zoo import the README and docs/**/*.md show in a code block works: each is executed as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
IMPORT = re.compile(r"^\s*(from zoo(\.\w+)* import |import zoo(\.\w+)*(\s+as\s+\w+)?\s*(#.*)?$)")


def doc_imports(text: str) -> list[tuple[int, str]]:
    """(line, statement) for each `import zoo...` / `from zoo... import ...` inside a ``` block; a
    parenthesized import spanning lines is joined."""
    out, in_code, lines = [], False, text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif in_code and IMPORT.match(line):
            start, stmt = i + 1, line.strip()
            while stmt.count("(") > stmt.count(")") and i + 1 < len(lines):
                i += 1
                stmt += " " + lines[i].strip()
            out.append((start, stmt))
        i += 1
    return out


CASES = [(doc, line, stmt) for doc in DOCS for line, stmt in doc_imports(doc.read_text())]


def test_the_docs_show_imports():
    """The scan finds the plugin API the docs teach, from the public surface `zoo` (so an empty scan
    cannot pass silently)."""
    shown = {stmt for _, _, stmt in CASES}
    assert any(re.fullmatch(r"from zoo import .*\bregister\b.*", s) for s in shown)
    assert any(re.fullmatch(r"from zoo import .*\bTermInputs\b.*", s) for s in shown)


def test_register_has_one_public_path():
    """`register` is shown imported from `zoo` only (`zoo.core.registry` is the package's own path)."""
    other = [
        f"{d.name}:{n}: {s}"
        for d, n, s in CASES
        if re.search(r"\bregister\b", s) and not re.fullmatch(r"from zoo import .*", s)
    ]
    assert not other, "import register with `from zoo import register`:\n" + "\n".join(other)


def test_the_scan_joins_a_multiline_import_and_skips_prose():
    text = "from zoo import nothing_here\n```python\nfrom zoo.components import (\n    ClipResult,\n)\nx = 1\n```\n"
    assert doc_imports(text) == [(3, "from zoo.components import ( ClipResult, )")]


@pytest.mark.parametrize("doc,line,stmt", CASES, ids=[f"{d.name}:{n}" for d, n, _ in CASES])
def test_doc_import_runs(doc: Path, line: int, stmt: str):
    try:
        exec(compile(stmt, f"{doc.name}:{line}", "exec"), {})
    except Exception as e:  # noqa: BLE001 - report any failure with where the doc shows it
        pytest.fail(f"{doc.relative_to(ROOT)}:{line}: `{stmt}` fails: {type(e).__name__}: {e}")
