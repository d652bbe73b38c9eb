"""The policy contract: what a policy is, and what it may say of the workers it starts.

A policy is an object with a ``name`` and ``decide(obs) -> ScaleDecision``.
It may keep state between calls (HPA's stabilisation window, HTA's
hysteresis) but sees nothing but the :class:`~hta.model.Observation`: what
production can observe. It never acts; the controller (or the simulator)
carries the decision out and asks again after ``decision.next_decision_s``.

A policy that reads an observation field only some backends can fill names it
in ``needs`` (HPA: ``{"cpu_utilization"}``); :func:`check_signals` refuses to
run it where the backend cannot measure it, instead of feeding it zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hta.model import Observation, ScaleDecision


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> ScaleDecision: ...


@dataclass(frozen=True)
class WorkerLifetime:
    """What the workers a policy starts do on their own, whatever the policy decides later.

    A policy whose workers run to completion (KEDA's ScaledJob: one Kubernetes Job per
    worker) says so in a ``worker_lifetime`` attribute; the simulator's world then lets
    each worker leave by itself, never while it runs a task: after ``max_tasks`` tasks
    (it accepts no more), or after ``idle_timeout_s`` without one (``work_queue_worker
    -t``). ``None``: no such limit. Policies without the attribute start workers that
    stay until the policy drains or removes them."""

    max_tasks: int | None = None
    idle_timeout_s: float | None = None


#: what each optional observation field is, for the refusal message
SIGNAL_NAMES = {"cpu_utilization": "the workers' measured CPU utilisation"}


def check_signals(policy: Policy, backend_name: str, signals: frozenset[str], why: str = "") -> None:
    """Raise ValueError (one line) if ``policy`` needs a field the backend cannot fill."""
    missing = sorted(set(getattr(policy, "needs", frozenset())) - set(signals))
    if missing:
        what = ", ".join(SIGNAL_NAMES.get(m, m) for m in missing)
        raise ValueError(f"policy {policy.name} needs {what}, which the {backend_name} backend cannot measure"
                         f"{': ' + why if why else ''}; choose another policy (e.g. --policy hta)")
