"""What the code and the docs cite exists in the repository: no `DESIGN.md` (a file outside it), every
`docs/*.md` path a file, and every `docs/X.md, "Section"` cited in the code (zoo/, bench/, scripts/) a
heading of that page (the cited text starts the heading)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for d in ("zoo", "bench", "scripts") for p in sorted((ROOT / d).rglob("*")) if p.is_file()]
CODE = [p for p in CODE if p.suffix in {".py", ".sh", ".md", ""} and "__pycache__" not in p.parts]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PATH = re.compile(r"\bdocs/[\w/.-]+?\.md\b")
SECTION = re.compile(r"\b(docs/[\w/.-]+?\.md),? \"([^\"\n]+)\"")


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def headings(doc: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in doc.read_text().splitlines() if re.match(r"#{1,6} ", line)]


def test_nothing_cites_design_md():
    found = [_rel(p) for p in CODE + DOCS if "DESIGN.md" in p.read_text(errors="replace")]
    assert not found, f"DESIGN.md is not in the repository; cite a section of docs/ instead: {found}"


def test_every_cited_doc_exists():
    missing = sorted(
        {
            f"{_rel(p)}: {m}"
            for p in CODE + DOCS
            for m in PATH.findall(p.read_text(errors="replace"))
            if not (ROOT / m).is_file()
        }
    )
    assert not missing, "cited docs that do not exist:\n" + "\n".join(missing)


def test_every_section_the_code_cites_is_a_heading():
    bad = []
    for p in CODE:
        for doc, section in SECTION.findall(p.read_text(errors="replace")):
            if (ROOT / doc).is_file() and not any(h.startswith(section) for h in headings(ROOT / doc)):
                bad.append(f'{_rel(p)}: {doc}, "{section}"')
    assert not bad, "cited sections that are no heading of their page:\n" + "\n".join(bad)


def test_the_scan_reads_a_citation():
    text = 'see docs/concepts/engine.md, "Source layout" and docs/concepts/engine.md "One record"'
    assert SECTION.findall(text) == [
        ("docs/concepts/engine.md", "Source layout"),
        ("docs/concepts/engine.md", "One record"),
    ]
    assert "Source layout" in headings(ROOT / "docs" / "concepts" / "engine.md")
