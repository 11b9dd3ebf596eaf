"""Where the named variants live and how their YAML is read: the built-in `registry/` (the checkout's
top-level folder, or its copy in the wheel) after the user directories in `ZOO_REGISTRY_PATH`
(os.pathsep-separated), and the strict YAML reader every zoo file goes through (`read_yaml_file`).
`zoo.config.variant` loads and parses a variant from these files and re-exports these names.
"""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from zoo.config import yaml_strict as strict_yaml
from zoo.config.yaml_strict import MAX_NESTING, too_deep

log = logging.getLogger(__name__)
_WARNED_DIRS: set[str] = set()  # ZOO_REGISTRY_PATH entries already warned about


class VariantError(ValueError):
    """A variant file or override that cannot be resolved; the message names file and key."""


def builtin_dir() -> Path:
    """The built-in registry/: the checkout's top-level folder, or the copy inside the wheel."""
    here = Path(__file__).resolve().parent.parent  # the zoo package (this file is zoo/config/variant_files.py)
    for cand in (here.parent / "registry", here / "_registry"):
        if cand.is_dir() and any(cand.glob("*.yaml")):
            return cand
    raise VariantError(f"built-in registry not found next to {here}")


def search_dirs() -> list[Path]:
    """User directories from ZOO_REGISTRY_PATH first, then the built-in registry. An entry that is
    not a directory is left out with a warning (once per entry) naming it."""
    dirs = [Path(p) for p in os.environ.get("ZOO_REGISTRY_PATH", "").split(os.pathsep) if p]
    for d in dirs:
        if not d.is_dir() and str(d) not in _WARNED_DIRS:
            _WARNED_DIRS.add(str(d))
            log.warning("ZOO_REGISTRY_PATH: %s is not a directory; its variants are not loaded", d)
    return [d for d in dirs if d.is_dir()] + [builtin_dir()]


def variant_files() -> dict[str, Path]:
    """name -> file over all search directories. Raises VariantError on a duplicate name."""
    found: dict[str, Path] = {}
    for d in search_dirs():
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.yaml")):
            name = read_yaml_mapping(f).get("name", f.stem)
            if name in found and found[name].resolve() != f.resolve():
                raise VariantError(f"variant {name!r} is defined twice: {found[name]} and {f}")
            found[name] = f
    return found


class UnknownVariant(VariantError):
    """A variant name that no registry directory holds, or a variant file that does not exist;
    `name` is the name or path asked for (a run's `variant`, or a `base:` on the way)."""

    def __init__(self, msg: str, name: str) -> None:
        super().__init__(msg)
        self.name = name


def locate_variant(name_or_path: str | Path) -> Path:
    """The file of a variant: a YAML path as given, or a registry name's file (`variant_files`).
    Raises UnknownVariant for a missing file or an unknown name (close matches, then the known names)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise UnknownVariant(f"variant file {p} does not exist", str(name_or_path))
        return p
    files = variant_files()
    if str(name_or_path) not in files:
        close = difflib.get_close_matches(str(name_or_path), list(files), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        raise UnknownVariant(
            f"variant {str(name_or_path)!r} not found; {hint}known: {', '.join(sorted(files))}", str(name_or_path)
        )
    return files[str(name_or_path)]


def available_variants() -> list[str]:
    return sorted(variant_files())


def read_yaml_file(path: str | Path) -> Any:
    """The parsed YAML of a file (None when empty). Raises VariantError naming the file when it is
    missing, a directory, not UTF-8, not valid YAML, or nested too deeply for the parser's recursion."""
    p = Path(path)
    if p.is_dir():
        hint = (
            f"; to resume the run in it: zoo run --resume {p}; to check it: zoo validate {p / 'config.yaml'}"
            if (p / "config.yaml").is_file()
            else ""
        )
        raise VariantError(f"{p}: is a directory, not a YAML file{hint}")
    if not p.exists():
        raise VariantError(f"{p}: file not found")
    try:
        with open(p, encoding="utf-8") as fh:  # a file object: the YAML error names the file
            data = strict_yaml.load(fh)  # a key given twice is an error, not a silent replacement
    except UnicodeDecodeError as e:
        raise VariantError(
            f"{p}: not UTF-8 text (byte {e.object[e.start : e.start + 1]!r} at offset {e.start})"
        ) from None
    except yaml.YAMLError as e:
        raise VariantError(f"{p}: not valid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:  # PyYAML builds nested nodes recursively: thousands of levels exhaust the stack
        raise VariantError(
            f"{p}: nested too deeply to read (more levels of mappings or lists than Python's "
            f"recursion limit); a zoo file nests a few levels, at most {MAX_NESTING}"
        ) from None
    deep = too_deep(data)
    if deep is not None:
        raise VariantError(
            f"{p}: key {deep!r}: nested more than {MAX_NESTING} levels deep; a zoo file nests a few "
            "levels (is a bracket or an indentation repeated?)"
        )
    return data


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The parsed YAML of a file that must hold a mapping (read_yaml_file's errors, and one naming the
    file when the top level is not a mapping)."""
    data = read_yaml_file(path)
    if data is None:
        raise VariantError(f"{path}: the file is empty (or holds only comments); expected a mapping of keys")
    if not isinstance(data, dict):
        raise VariantError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
