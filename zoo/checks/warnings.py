"""Run settings that would be silently ignored (zoo.checks.run_checks: a `set:` the budget replaces,
`ref_reset_every` without a KL, a critic warm-up as long as the run, a reward model not built yet):
warnings, the run still starts."""

from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("run_warnings", "before_load")
def run_warnings(s: BeforeLoad, rep: Report) -> None:
    from zoo.checks.run_checks import run_warnings as warnings_of

    if s.variant is not None:
        rep.warnings += warnings_of(s.cfg, s.variant)
