"""Every option of ``hta makeflow``, validated in one place, and the checks of the workflow
file that refuse a run before anything starts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hta.backends import BackendOptions, backend_names
from hta.controller import ControllerConfig
from hta.errors import UsageError
from hta.model import Resources
from hta.policies.registry import make_policy
from workqueue_bridge.dag import viz_json
from workqueue_bridge.makeflow import MakeflowError, check_extra_args
from workqueue_bridge.makeflow_args import ArgsError, MakeflowArgs

#: default for ``--worker-stall-timeout``: a worker silent this long is dropped by the master
STALL_TIMEOUT_S = 120.0


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
        if self.log is not None:
            if self.log.is_dir():
                raise UsageError(f"--log {self.log} is a directory: give a file name, e.g. {self.log}/run.scaling.jsonl")
            if not self.log.parent.is_dir():
                raise UsageError(f"--log {self.log}: folder {self.log.parent} does not exist: create it or choose "
                                 f"another file")
        if self.min_workers > self.max_workers:
            raise UsageError(f"--min-workers ({self.min_workers}) is above --max-workers ({self.max_workers})")
        if self.min_interval_s > self.max_interval_s:
            raise UsageError(f"--min-interval ({self.min_interval_s:g}) is above --max-interval "
                             f"({self.max_interval_s:g})")
        return args

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

    def controller_config(self) -> ControllerConfig:
        prior = self.latency_prior_s
        if prior is None:
            prior = self.backend_options.provision_delay_s + 2.0
        return ControllerConfig(
            worker_shape=Resources(cores=self.worker_cores, memory_mb=self.worker_memory_mb,
                                   disk_mb=self.worker_disk_mb),
            min_workers=self.min_workers, max_workers=self.max_workers, poll_interval_s=self.poll_interval_s,
            min_interval_s=self.min_interval_s, max_interval_s=self.max_interval_s, latency_prior_s=prior,
        )


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
