"""`sampling.backend` and `eval.backend`: the generators are registered and their parameters allowed."""

from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("generator", "before_load")
def generator(s: BeforeLoad, rep: Report) -> None:
    """One line naming `sampling.backend` (or `eval.backend` when set), what is wrong and the known
    generators (did-you-mean)."""
    from zoo.backends.generate.backend import backend_error

    err = backend_error(s.cfg.sampling.backend)
    if err:
        rep.errors.append(err)
    err = backend_error(s.cfg.eval.backend, "eval.backend") if s.cfg.eval.backend is not None else None
    if err:
        rep.errors.append(err)
