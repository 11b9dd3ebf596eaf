"""`zoo`'s public import surface (`zoo/__init__.py`, `__all__`): every name resolves to its one
definition, `from zoo import *` gives exactly them, and an unknown name is an ImportError."""

from __future__ import annotations

import pytest

import zoo
from zoo.core import batch, registry, types


def test_every_public_name_is_its_definition():
    assert (zoo.register, zoo.build, zoo.available) == (registry.register, registry.build, registry.available)
    assert zoo.Batch is batch.Batch
    for name in zoo.__all__[4:]:
        assert getattr(zoo, name) is getattr(types, name), name


def test_star_import_gives_all_and_dir_lists_it():
    ns: dict = {}
    exec("from zoo import *", ns)
    assert sorted(k for k in ns if not k.startswith("__")) == sorted(zoo.__all__)
    assert set(zoo.__all__) <= set(dir(zoo))


def test_an_unknown_name_fails_and_subpackages_still_import():
    with pytest.raises(ImportError, match="nothing_here"):
        exec("from zoo import nothing_here", {})
    ns: dict = {}
    exec("from zoo import models", ns)
    assert ns["models"].__name__ == "zoo.models"
