"""`sampling.backend`: the generator is registered and its parameters are allowed."""
from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("generator", "before_load")
def generator(s: BeforeLoad, rep: Report) -> None:
    """One line naming `sampling.backend`, what is wrong and the known generators (did-you-mean)."""
    from zoo.backends.generate.backend import backend_error

    err = backend_error(s.cfg.sampling.backend)
    if err:
        rep.errors.append(err)
