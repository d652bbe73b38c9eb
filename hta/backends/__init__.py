"""Where workers run, by name: the one registry of backends.

The CLI (and anyone calling :func:`hta.submit.run.run_makeflow` from Python) asks
for a backend by name with :class:`BackendOptions`; each backend module turns
those options into a :class:`~hta.backends.base.WorkerBackend`. Adding a
backend is one entry in :data:`BACKENDS`; nothing else names backends.
"""

from __future__ import annotations

import importlib
import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hta.backends.base import WorkerBackend


class BackendOptions(BaseModel):
    """Every backend's settings, validated once (unknown keys are an error)."""

    model_config = ConfigDict(extra="forbid")

    #: a worker leaves on its own after this long without work
    idle_timeout_s: int = Field(900, ge=5)
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
    #: end the run when no worker pod could start (unschedulable, image not pulled, worker
    #: not reaching the master) for this long (None: $HTA_K8S_START_TIMEOUT_S, else 300 s)
    start_timeout_s: float | None = Field(None, gt=0)

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


#: name → "module:factory"; a factory takes (BackendOptions, RunContext) and returns a backend
BACKENDS: dict[str, str] = {
    "local": "hta.backends.local:from_options",
    "k8s": "k8s.backend:from_options",
}


def backend_names() -> list[str]:
    return list(BACKENDS)


def make_backend(name: str, options: BackendOptions, run: RunContext) -> WorkerBackend:
    """The named backend, ready to start (a backend that checks access does it here and
    raises ValueError with one line on failure)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    module, factory = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), factory)(options, run)
