"""Every option of ``hta makeflow``, validated in one place, and the checks of the workflow
file that refuse a run before anything starts."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from hta.backends import BackendOptions, backend_names
from hta.controller import ControllerConfig
from hta.dial_input import parse_budget, parse_deadline
from hta.errors import UsageError
from hta.model import Resources
from hta.policies.registry import make_policy
from hta.scaling_log import measured_categories
from workqueue_bridge.dag import viz_json
from workqueue_bridge.makeflow import MakeflowError, check_extra_args
from workqueue_bridge.makeflow_args import ArgsError, MakeflowArgs

#: default for ``--worker-stall-timeout``: a worker silent this long is dropped by the master
STALL_TIMEOUT_S = 120.0

#: the policies that take the time–cost dial (``--deadline``, ``--budget``): HTA's, with or
#: without settings (``hta-cost:busy_runtimes=5``); not time-scaled (``hta@10``) nor cut into
#: pods (``hta[pods=3]``), whose specs take no settings appended
_DIAL_POLICY = re.compile(r"(hta|hta-time|hta-cost)(:[^@\[\]]*)?")
#: the policy settings the dial sets
_DIAL_SETTINGS = ("deadline_s", "budget_node_s")


class MakeflowOptions(BaseModel):
    """Every option of ``hta makeflow``, validated in one place."""

    model_config = ConfigDict(extra="forbid")

    #: the Makeflow file (None: named by MAKEFLOW in an ``--argv`` file among makeflow_args)
    workflow: Path | None = None
    #: makeflow's own options, passed through (those HTA sets itself are refused)
    makeflow_args: list[str] = Field(default_factory=list)
    #: where makeflow runs, as if the user had typed ``makeflow`` here
    cwd: Path = Field(default_factory=Path.cwd)
    backend: str = "local"
    backend_options: BackendOptions = Field(default_factory=BackendOptions)
    policy: str = "hta"
    #: the time–cost dial, as given (:mod:`hta.dial_input`): finish by this time
    #: (a duration from the start, or a clock time), paying the fewest node·s the forecast allows
    deadline: str | None = None
    #: ... or finish as early as this many node-hours (or core-hours) allow
    budget: str | None = None
    #: master port (None: the backend's default — any free port locally, a fixed one on Kubernetes)
    port: int | None = Field(None, ge=0, le=65535)
    min_workers: int = Field(0, ge=0)
    max_workers: int = Field(4, ge=1)
    worker_cores: int = Field(1, ge=1)
    worker_memory_mb: int = Field(1024, ge=1)
    worker_disk_mb: int = Field(4096, ge=1)
    poll_interval_s: float = Field(1.0, ge=0.1)
    min_interval_s: float = Field(2.0, ge=0.1)
    max_interval_s: float = Field(300.0, ge=0.1)
    #: preparation latency assumed until one is measured (None: provision delay + 2 s)
    latency_prior_s: float | None = Field(None, gt=0)
    #: an earlier run's scaling log (or a workflow, for its latest run): its categories' mean
    #: runtimes are the time-cost dial's forecast until this run measures its own
    runtime_prior: Path | None = None
    log: Path | None = None
    lookahead: bool = True
    #: write every answer the controller reads here (for hta.replay)
    record: Path | None = None
    #: a worker that does not answer the master for this long is dropped and replaced
    stall_timeout_s: float = Field(STALL_TIMEOUT_S, ge=2)
    #: serve /status, /metrics and a live page during the run
    status: bool = True
    #: the status server's port (0: any free port)
    status_port: int = Field(0, ge=0, le=65535)
    #: the address it listens on (0.0.0.0 to be reached from other hosts, e.g. in a pod)
    status_host: str = "127.0.0.1"
    #: a token every reader of the status server must send (None: none asked)
    status_token: str | None = None
    #: a token that may change the run while it runs (``hta set URL --token``), from anywhere;
    #: None: only this user on this host may (``hta set WORKFLOW``)
    control_token: str | None = None
    #: the deadline in seconds from the check that resolved it (:meth:`check_dial`): a clock
    #: time is read once, at the start, not again when the policy is made
    _deadline_s: float | None = PrivateAttr(default=None)
    #: the budget in node-seconds, from :meth:`check_dial`
    _budget_node_s: float | None = PrivateAttr(default=None)
    #: what :meth:`check_dial` resolved those from (checked again only if that changes)
    _dial_of: tuple[object, ...] | None = PrivateAttr(default=None)

    @field_validator("deadline", "budget", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        """A config file's number (``deadline: 5400``, TOML's ``budget = 40``) or date-time
        (``deadline: 2026-12-07T09:00:00``, TOML's ``deadline = 09:00:00``), as the text it
        was written as: the check reads it as the flag's text."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # (a bool: refused by config.build)
            return str(value)
        if isinstance(value, dt.datetime):
            return value.isoformat()
        if isinstance(value, dt.time):
            if value.second or value.microsecond:
                raise ValueError(f"the clock time {value.isoformat()} has seconds: a clock time is HH:MM, or "
                                 f"give a date-time (2026-12-07T09:00:30)")
            return value.strftime("%H:%M")
        if isinstance(value, dt.date):
            return value.isoformat()
        return value

    @field_validator("policy")
    @classmethod
    def _a_policy(cls, spec: str) -> str:
        """A spec that names no policy is refused here, so the error line says where it came from
        (``--policy``, ``HTA_POLICY``, a config file's key)."""
        make_policy(spec)  # (ValueError: the choices, or what is wrong with the settings)
        return spec

    def invocation(self) -> MakeflowArgs:
        """makeflow's command line (options and workflow) as makeflow will read it."""
        try:
            args = MakeflowArgs.parse([*self.makeflow_args, *([str(self.workflow)] if self.workflow else [])],
                                      cwd=self.cwd)
            check_extra_args(args)
        except (ArgsError, MakeflowError) as exc:
            raise UsageError(str(exc)) from None
        return args

    def check_settings(self) -> MakeflowArgs:
        """What :meth:`check` refuses short of the workflow file itself (``hta config`` runs
        it, so that it prints no configuration ``hta makeflow`` would refuse)."""
        args = self.invocation()
        if self.backend not in backend_names():
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(backend_names())}")
        # (the policy was checked when the options were built: _a_policy)
        self.check_dial()
        self.prior_runtimes()
        if self.log is not None:
            if self.log.is_dir():
                raise UsageError(f"--log {self.log} is a directory: give a file name, e.g. {self.log}/run.scaling.jsonl")
            if not self.log.parent.is_dir():
                raise UsageError(f"--log {self.log}: folder {self.log.parent} does not exist: create it or choose "
                                 f"another file")
        if self.min_workers > self.max_workers:
            raise UsageError(f"--min-workers ({self.min_workers}) is above --max-workers ({self.max_workers})")
        if self.control_token is not None and self.control_token == self.status_token:
            raise UsageError("--control-token is the same as --status-token: the control token changes the run, "
                             "the status token only reads it (a metrics scraper holds it); give them different "
                             "values")
        if self.control_token is not None and not self.control_token.strip():
            raise UsageError("--control-token is empty: give a token (e.g. openssl rand -hex 24), or leave it out")
        if self.min_interval_s > self.max_interval_s:
            raise UsageError(f"--min-interval ({self.min_interval_s:g}) is above --max-interval "
                             f"({self.max_interval_s:g})")
        return args

    def check_dial(self, now: dt.datetime | None = None) -> None:
        """``--deadline`` and ``--budget``: not both, only with HTA's policy, values that parse.
        The deadline is resolved against ``now`` (default: this moment, local time), once:
        later checks keep what the first found (unless the dial, the policy or the worker
        cores were changed since), so a clock time is not read again when the policy is made."""
        given = (self.deadline, self.budget, self.policy, self.worker_cores)
        if given == self._dial_of:
            return
        self._deadline_s = self._budget_node_s = None
        if self.deadline is None and self.budget is None:
            self._dial_of = given
            return
        if self.deadline is not None and self.budget is not None:
            raise UsageError("give --deadline or --budget, not both")
        flag = "--deadline" if self.deadline is not None else "--budget"
        if not _DIAL_POLICY.fullmatch(self.policy):
            raise UsageError(f"{flag} needs HTA's policy (hta, hta-time or hta-cost), not {self.policy}: drop {flag} "
                             f"or choose one of those")
        own = [key for item in self.policy.partition(":")[2].split(",")
               if (key := item.partition("=")[0].strip()) in _DIAL_SETTINGS]
        if own:
            raise UsageError(f"{flag} and the policy's own {own[0]} (--policy {self.policy}) both set the dial: "
                             f"give one of them")
        if self.deadline is not None:
            self._deadline_s = parse_deadline(self.deadline, dt.datetime.now() if now is None else now)
        else:
            assert self.budget is not None
            self._budget_node_s = parse_budget(self.budget, self.worker_cores)
        self._dial_of = given

    @property
    def deadline_s(self) -> float | None:
        """The deadline in seconds from the check (None: none given, or not checked yet)."""
        return self._deadline_s

    @property
    def budget_node_s(self) -> float | None:
        """The budget in node-seconds (None: none given, or not checked yet)."""
        return self._budget_node_s

    def policy_spec(self) -> str:
        """The policy as :func:`~hta.policies.registry.make_policy` takes it, with the dial
        appended as its settings: ``hta:busy_runtimes=3`` and ``--deadline 90m`` →
        ``hta:busy_runtimes=3,deadline_s=5400``; ``hta-cost`` and ``--budget 4node-h`` →
        ``hta-cost:budget_node_s=14400``. Checks the dial first if nobody has."""
        self.check_dial()
        if self._deadline_s is not None:  # (never 0, which would mean no deadline)
            setting = f"deadline_s={_number(max(0.1, round(self._deadline_s, 1)))}"
        elif self._budget_node_s is not None:  # (nor a budget that rounds to 0 node·s)
            setting = f"budget_node_s={max(1, round(self._budget_node_s))}"
        else:
            return self.policy
        if ":" not in self.policy:
            return f"{self.policy}:{setting}"
        return self.policy + ("" if self.policy.endswith((":", ",")) else ",") + setting

    def check_workflow(self, args: MakeflowArgs) -> None:
        """The workflow file: named, there, a file, text."""
        wf = args.workflow_path
        if wf is None:
            raise UsageError("no workflow given: hta makeflow WORKFLOW (or MAKEFLOW in an --argv file)")
        shown = args.dagfile or str(wf)
        if wf.is_dir():
            inside = " (it holds one: " + str(Path(shown) / "Makeflow") + ")" if (wf / "Makeflow").is_file() else ""
            raise UsageError(f"workflow {shown!r} is a folder: give the path to a Makeflow file{inside}")
        if not wf.is_file():
            trouble = "is not a regular file" if wf.exists() else "not found"
            raise UsageError(f"workflow file {shown!r} {trouble}: give the path to a Makeflow file")
        why = not_text(wf)
        if why:
            raise UsageError(f"workflow file {shown!r} is not a text file ({why}): give the path to a "
                             f"Makeflow file")

    def check(self) -> MakeflowArgs:
        """Cross-field checks, as one-line :class:`UsageError`; returns makeflow's command line."""
        args = self.check_settings()
        self.check_workflow(args)
        return args

    def prior_runtimes(self) -> dict[str, float]:
        """``--runtime-prior``: each category's mean runtime in that run (none given: none),
        or one line saying why the file cannot give them."""
        if self.runtime_prior is None:
            return {}
        path = Path(self.cwd, self.runtime_prior)
        try:
            return {n: m.runtime_mean_s for n, m in measured_categories(path).items() if m.runtime_mean_s}
        except ValueError as exc:  # (LogError too)
            raise UsageError(f"--runtime-prior: {exc}") from None

    def controller_config(self) -> ControllerConfig:
        prior = self.latency_prior_s
        if prior is None:
            prior = self.backend_options.provision_delay_s + 2.0
        return ControllerConfig(
            worker_shape=Resources(cores=self.worker_cores, memory_mb=self.worker_memory_mb,
                                   disk_mb=self.worker_disk_mb),
            min_workers=self.min_workers, max_workers=self.max_workers, poll_interval_s=self.poll_interval_s,
            min_interval_s=self.min_interval_s, max_interval_s=self.max_interval_s, latency_prior_s=prior,
            runtime_prior=self.prior_runtimes(),
        )


def _number(x: float) -> str:
    """``5400.0`` → ``5400``, ``5400.5`` → ``5400.5``: a setting as a person writes it."""
    return f"{x:.1f}".removesuffix(".0")


#: where makeflow's parser (makeflow_viz shares it) says a workflow is wrong: "… line: 3 column: 1"
_PARSE_ERROR = re.compile(r"(.*?)\.? line: (\d+)(?: column: (\d+))?")


def check_not_empty(args: MakeflowArgs) -> None:
    """Refuse a workflow without a rule (makeflow would exit 0 having done nothing), or one
    makeflow's parser refuses at a line (makeflow would refuse it too, after hta had started
    a run and written its log). Any other failure of makeflow_viz is left to makeflow."""
    assert args.workflow_path is not None
    try:
        data = viz_json(args.workflow_path, args.format_options(), args.cwd, timeout_s=60)
    except ValueError as exc:
        said = str(exc).split(": ", 1)[-1]
        m = _PARSE_ERROR.search(said)
        if m:
            where = f"line {m.group(2)}" + (f", column {m.group(3)}" if m.group(3) else "")
            rule = " (a rule is `OUTPUTS: INPUTS` followed by a tab-indented command)" if "keyword" in said else ""
            raise UsageError(f"workflow {args.dagfile} does not parse at {where}: {m.group(1)}: fix that "
                             f"line{rule}") from None
        return
    except (OSError, subprocess.SubprocessError):
        return
    if not data.get("rules"):
        raise UsageError(f"workflow {args.dagfile} has no rules: nothing to run (a rule is `OUTPUTS: INPUTS` "
                         f"followed by a tab-indented command)")


def not_text(path: Path, sample: int = 65536) -> str | None:
    """Why ``path`` is not a text file (makeflow and makeflow_viz spin for minutes on a
    binary one), or None if it is one."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(sample)
    except OSError as exc:
        return exc.strerror or str(exc)
    if b"\0" in head:
        return "it holds NUL bytes: it looks binary"
    control = sum(1 for b in head if b < 32 and b not in b"\t\n\r\f\v\x1b")
    if head and control / len(head) > 0.05:
        return f"{100 * control / len(head):.0f} % of its first bytes are control characters: it looks binary"
    return None
