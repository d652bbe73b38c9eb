"""Where workers run, by name: the one registry of backends.

The CLI (and anyone calling :func:`hta.submit.run.run_makeflow` from Python) asks for a
backend by name with :class:`BackendOptions`. A name is an entry point of the
``hta.backends`` group (declared in ``setup.cfg`` for the built-in ones; a user's package
declares its own, see docs/providers.md): a factory that takes (:class:`BackendOptions`,
:class:`RunContext`) and returns a :class:`~hta.backends.base.WorkerBackend`, in practice a
:class:`~hta.backends.pool.WorkerPool` over the provider it makes.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hta.backends import local, slurm
from hta.backends.base import WorkerBackend

#: the entry point group every backend, built-in or a user's, is found in
GROUP = "hta.backends"


class BackendOptions(BaseModel):
    """Every backend's settings, validated once (unknown keys are an error)."""

    model_config = ConfigDict(extra="forbid")

    #: a worker leaves on its own after this long without work
    idle_timeout_s: int = Field(900, ge=5)
    #: the CSS classifier on every worker: on, off, or dry-run (classify and log, never pin)
    css: Literal["on", "off", "dry-run"] = "on"
    # -- local processes
    #: emulated time from asking for a worker to starting it
    provision_delay_s: float = Field(0.0, ge=0)
    provision_jitter_s: float = Field(0.0, ge=0)
    # -- Kubernetes
    kubeconfig: str | None = None
    #: a DNS-1123 label, as Kubernetes names namespaces (:meth:`_namespace`)
    namespace: str = "default"
    image: str = "localhost/hta-worker:latest"
    #: the address workers use to reach the master (default: this host's routable address)
    master_host: str | None = None
    host_network: bool = False
    #: end the run when no worker could start (unschedulable, image not pulled, worker not
    #: reaching the master) for this long (None: $HTA_K8S_START_TIMEOUT_S, else 300 s)
    start_timeout_s: float | None = Field(None, gt=0)
    # -- Slurm (each worker a batch job; None: the cluster's default)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    #: each worker job's time limit, in sbatch's --time forms (``MM``, ``HH:MM:SS``, ``D-HH``)
    time_limit: str | None = None
    #: tasks of one category cut at a time limit they could never fit in, before the run ends
    max_task_losses: int = Field(2, ge=1)
    #: more sbatch arguments for every worker job (shell words in one string, or a list)
    sbatch_args: list[str] = Field(default_factory=list)

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}|\d+-\d+|UNLIMITED|INFINITE", v.strip()):
            raise ValueError("not a Slurm time limit: minutes (30), HH:MM:SS (2:00:00), D-HH (1-12) or UNLIMITED")
        return None if v is None else v.strip()

    @field_validator("sbatch_args", mode="before")
    @classmethod
    def _sbatch_args(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                return shlex.split(v)
            except ValueError as exc:
                raise ValueError(f"not shell words ({exc}): quote them as a shell would") from None
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v):
            raise ValueError("not a Kubernetes namespace name: lowercase letters, digits and '-', at most 63, "
                             "beginning and ending with a letter or digit")
        return v


class RunContext(BaseModel):
    """What a backend needs to know of the run it serves."""

    workflow: Path
    run_dir: Path
    epoch: float = Field(default_factory=time.time)


Factory = Callable[[BackendOptions, RunContext], WorkerBackend]
#: the built-in backends this package can import without a loop; others come from entry points
BUILT_IN: dict[str, Factory] = {"local": local.from_options, "slurm": slurm.from_options}


def backends() -> dict[str, Factory | None]:
    """Every backend by name: the built-in ones, then the entry points (loaded when chosen)."""
    found: dict[str, Factory | None] = dict(BUILT_IN)
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, None)
    return found


def backend_names() -> list[str]:
    return list(backends())


def make_backend(name: str, options: BackendOptions, run: RunContext) -> WorkerBackend:
    """The named backend, ready to start (a backend that checks access does it here and
    raises ValueError with one line on failure)."""
    factory = BUILT_IN.get(name)
    if factory is None:
        eps = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not eps:
            raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(backends())}")
        try:
            factory = eps[0].load()
        except Exception as exc:  # noqa: BLE001 — a plug-in that does not import is one line, not a traceback
            raise ValueError(f"backend {name!r} ({eps[0].value}) cannot be loaded: {type(exc).__name__}: "
                             f"{exc}") from None
    return factory(options, run)
