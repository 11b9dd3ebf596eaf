"""One tracking interface: local JSONL (always) + Weights & Biases (offline unless a key is set).

`Tracker(run_dir, config=..., wandb_opts=..., name=..., group=..., job_type=..., tags=...)`:

- `log(metrics, step)` appends `{"step": step, **metrics}` to `run_dir/metrics.jsonl` and logs the
  same to W&B (W&B's x-axis is our `step` metric, via `define_metric`, so a resumed run whose steps
  restart after the last checkpoint is not dropped by W&B's monotonic `_step`);
- `log_samples(step, rows)` appends rows to `run_dir/samples.jsonl` and logs a W&B Table `samples`;
- `set_summary(d)` updates the W&B run summary; `finish(exit_code)` closes the W&B run;
- `run_id` is the W&B run id (also written to `run_dir/wandb_run_id`; `read_run_id(run_dir)` reads
  it back) for `Tracker(..., resume_id=...)` after a restart (`wandb.init(id=..., resume="allow")`);
- `truncate_after(step)` drops JSONL records with a step beyond a checkpoint's when resuming.

W&B mode (`resolve_mode`): `WANDB_DISABLED=true` or `tracking: {wandb: false}` -> disabled; else
`WANDB_MODE` (the machine's choice wins over the study file); else `tracking.wandb.mode`; else online
when an API key is configured (`WANDB_API_KEY`, or a netrc entry for the W&B host), offline otherwise.
Offline files land in `run_dir/wandb/offline-run-*/` (read back with `wandb leet inspect --json DIR`,
upload with `wandb sync DIR`).

A W&B failure (import, init, log, finish; e.g. disk full) never stops training: it is reported once
with `logging.warning`, W&B is switched off for this run and the JSONL files are still written.
"""

from __future__ import annotations

import json
import logging
import netrc
import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from zoo.config.run import RunConfig, WandbOpts
from zoo.run.jsonl import _plain, append_jsonl, read_json, read_jsonl, read_jsonl_counted, truncate_jsonl
from zoo.run.provenance import git_commit

# the JSONL helpers live in zoo.run.jsonl; these names stay importable from here
__all__ = [
    "METRICS_FILE",
    "RUN_ID_FILE",
    "SAMPLES_FILE",
    "TAG_BASELINE",
    "Tracker",
    "append_jsonl",
    "has_api_key",
    "read_json",
    "read_jsonl",
    "read_jsonl_counted",
    "read_run_id",
    "resolve_mode",
    "truncate_jsonl",
    "wandb_tags",
]

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
RUN_ID_FILE = "wandb_run_id"
_TRUE = {"1", "true", "yes", "on"}


# --------------------------------------------------------------------------- mode


def has_api_key() -> bool:
    """True when W&B credentials are configured: WANDB_API_KEY, or a netrc entry for the W&B host
    (WANDB_BASE_URL's host, default api.wandb.ai; netrc file from NETRC or ~/.netrc)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        auth = netrc.netrc(str(path)).authenticators(host) if path.is_file() else None
    except (netrc.NetrcParseError, OSError):
        return False
    return bool(auth and auth[2])


def resolve_mode(opts: WandbOpts | None) -> str:
    """ "online", "offline" or "disabled" for a run with these W&B options (see the module doc)."""
    if opts is None or os.environ.get("WANDB_DISABLED", "").lower() in _TRUE:
        return "disabled"
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    env = {"dryrun": "offline", "run": "online"}.get(env, env)
    if env in ("online", "offline", "disabled"):
        return env
    if opts.mode:
        return opts.mode
    return "online" if has_api_key() else "offline"


def read_run_id(run_dir: Path) -> str | None:
    """The W&B run id a previous Tracker wrote in run_dir, or None."""
    p = Path(run_dir) / RUN_ID_FILE
    return (p.read_text().strip() or None) if p.is_file() else None


# --------------------------------------------------------------------------- run metadata


# What a slot is compared with for its tag (a variant has no slot defaults: only the tags use these).
TAG_BASELINE = {
    "advantage": "group_mean",
    "normalizer": "group_std",
    "objective_norm": "none",
    "clip": "ppo",
    "aggregate": "token_mean",
    "kl": "none",
    "length": [],
    "filter": [],
    "critic": None,
}


def wandb_tags(cfg: RunConfig, resolved_slots: Mapping[str, Any] | None = None) -> list[str]:
    """Tags for a run: the variant, every `set` override (`clip.eps_high=0.32`), every slot whose
    component differs from `TAG_BASELINE` (`clip=clip_higher`), and the user's `tracking` tags.

    resolved_slots: `Variant.resolved()` of the run's variant (optional). W&B caps tags at 64 chars."""
    tags = [cfg.variant] + [f"{k}={_short(v)}" for k, v in cfg.set.items()]
    defaults = TAG_BASELINE
    for slot, spec in (resolved_slots or {}).items():
        name = _spec_name(spec)
        if name is not None and name != _spec_name(defaults.get(slot)):
            tags.append(f"{slot}={name}")
    opts = cfg.tracking.wandb_opts()
    tags += list(opts.tags) if opts else []
    return list(dict.fromkeys(t[:64] for t in tags))


def _spec_name(spec: Any) -> str | None:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        if "placement" in spec:
            return spec["placement"] if spec["placement"] == "none" else f"{spec['placement']}:{spec.get('estimator')}"
        return spec.get("name")
    if isinstance(spec, list):
        return "+".join(str(_spec_name(s)) for s in spec) or "none"
    return None


def _short(v: Any) -> str:
    return json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)


# --------------------------------------------------------------------------- tracker


class Tracker:
    """Local JSONL + optional W&B for one run (see the module doc).

    run_dir: the run's folder (created); config: the resolved run config (W&B run config);
    wandb_opts: None disables W&B; name/group/job_type/tags: the W&B run's; resume_id: a W&B run id
    to continue (`resume="allow"`). Never raises because of W&B; JSONL write errors do (WriteError,
    an OSError naming the file).
    """

    def __init__(
        self,
        run_dir: Path | str,
        *,
        config: Mapping[str, Any],
        wandb_opts: WandbOpts | None,
        name: str,
        group: str | None = None,
        job_type: str | None = None,
        tags: list[str] | None = None,
        resume_id: str | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.samples_path = self.run_dir / SAMPLES_FILE
        self.summary: dict[str, Any] = {}
        self.mode = resolve_mode(wandb_opts)
        self._run: Any = None
        self._run_id: str | None = None
        self._wandb: Any = None
        self._warned = False
        self._finished = False
        if self.mode != "disabled" and wandb_opts is not None:
            self._init_wandb(dict(config), wandb_opts, name, group, job_type, list(tags or []), resume_id)

    @classmethod
    def for_run(
        cls,
        cfg: RunConfig,
        *,
        config: Mapping[str, Any],
        resolved_slots: Mapping[str, Any] | None = None,
        resume_id: str | None = None,
        run_dir: Path | None = None,
    ) -> "Tracker":
        """The tracker the issue asks for: name = arm label, group = study (or None), job_type =
        variant, tags from `wandb_tags`, config + `git_commit` when not given."""
        conf = dict(config)
        conf.setdefault("git_commit", git_commit())
        return cls(
            run_dir or cfg.out_dir(),
            config=conf,
            wandb_opts=cfg.tracking.wandb_opts(),
            name=cfg.name,
            group=cfg.study,
            job_type=cfg.variant,
            tags=wandb_tags(cfg, resolved_slots),
            resume_id=resume_id,
        )

    # ----------------------------------------------------------------- W&B plumbing

    @property
    def wandb_enabled(self) -> bool:
        return self._run is not None

    @property
    def run_id(self) -> str | None:
        """The W&B run id (kept after `finish`), or None when W&B is off or its init failed."""
        return self._run_id

    def _init_wandb(
        self,
        config: dict[str, Any],
        opts: WandbOpts,
        name: str,
        group: str | None,
        job_type: str | None,
        tags: list[str],
        resume_id: str | None,
    ) -> None:
        try:
            import wandb

            self._wandb = wandb
            settings = wandb.Settings(
                console="off", silent=True, show_info=False, show_warnings=False, x_disable_stats=self.mode == "offline"
            )
            self._run = wandb.init(
                project=opts.project,
                entity=opts.entity,
                dir=str(self.run_dir),
                mode=self.mode,
                name=name,
                group=group,
                job_type=job_type,
                tags=tags or None,
                config=_plain(config),
                id=resume_id,
                resume="allow" if resume_id else None,
                reinit="finish_previous",
                settings=settings,
            )
            self._run_id = str(self._run.id)
            self._run.define_metric("step")
            self._run.define_metric("*", step_metric="step")
            (self.run_dir / RUN_ID_FILE).write_text(self._run_id + "\n")
        except Exception as e:  # noqa: BLE001 - any W&B problem must not stop training
            self._fail("init", e)

    def _fail(self, what: str, e: BaseException) -> None:
        """Warn once, switch W&B off for this run (the JSONL files go on)."""
        if not self._warned:
            log.warning(
                "W&B %s failed (%s: %s); W&B is off for this run, metrics go on to %s",
                what,
                type(e).__name__,
                e,
                self.metrics_path,
            )
            self._warned = True
        run, self._run = self._run, None
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001
                pass

    def _wandb_call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self._run is None:
            return
        try:
            fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            self._fail(what, e)

    # ----------------------------------------------------------------- public API

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append `{"step": step, **metrics}` to metrics.jsonl; log it to W&B when enabled."""
        rec = {"step": int(step), **{k: _plain(v) for k, v in metrics.items() if k != "step"}}
        append_jsonl(self.metrics_path, [rec])
        if self._run is not None:
            self._wandb_call("log", lambda: self._run.log(rec))

    def log_samples(self, step: int, rows: list[Mapping[str, Any]], key: str = "samples") -> None:
        """Append rows (prompt, completion, rewards, ...) with their step to samples.jsonl; log a W&B
        Table under `key` whose columns are the union of the rows' keys (first-seen order)."""
        if not rows:
            return
        recs = [{"step": int(step), **{k: _plain(v) for k, v in r.items() if k != "step"}} for r in rows]
        append_jsonl(self.samples_path, recs)
        if self._run is not None:
            cols = list(dict.fromkeys(k for r in recs for k in r))

            def _table() -> None:
                data = [[_cell(r.get(c)) for c in cols] for r in recs]
                self._run.log({key: self._wandb.Table(columns=cols, data=data), "step": int(step)})

            self._wandb_call("log_samples", _table)

    def set_summary(self, summary: Mapping[str, Any]) -> None:
        """Merge final metrics into the W&B run summary (and `self.summary`)."""
        plain = {k: _plain(v) for k, v in summary.items()}
        self.summary.update(plain)
        if self._run is not None:
            self._wandb_call("summary", lambda: self._run.summary.update(plain))

    def truncate_after(self, step: int) -> int:
        """Drop metrics.jsonl / samples.jsonl records with a step > `step` (resume from a checkpoint
        saved at `step`). Returns the number of metric records dropped."""
        dropped = truncate_jsonl(self.metrics_path, step)
        truncate_jsonl(self.samples_path, step)
        return dropped

    def finish(self, exit_code: int = 0) -> None:
        """Close the W&B run (idempotent). A non-zero exit code marks the W&B run failed."""
        if self._finished:
            return
        self._finished = True
        run, self._run = self._run, None
        if run is not None:
            try:
                run.finish(exit_code=exit_code)
            except Exception as e:  # noqa: BLE001
                self._run = None
                if not self._warned:
                    log.warning("W&B finish failed (%s: %s); local files are complete", type(e).__name__, e)
                    self._warned = True

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)


def _cell(v: Any) -> Any:
    """A W&B Table cell: numbers and strings as they are, anything else as compact JSON."""
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return json.dumps(v, default=str)
