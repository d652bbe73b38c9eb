"""The policy contract: what a policy is, and what it may say of the workers it starts.

A policy is a :class:`Policy`: a ``name`` and ``decide(obs) -> ScaleDecision``, and the
optional hooks, each declared here with its default.
It may keep state between calls (HPA's stabilisation window, HTA's
hysteresis) but sees nothing but the :class:`~hta.model.Observation`: what
production can observe. It never acts; the controller (or the simulator)
carries the decision out and asks again after ``decision.next_decision_s``.

A policy that reads an observation field only some backends can fill names it
in ``needs`` (HPA: ``{"cpu_utilization"}``); :func:`check_signals` refuses to
run it where the backend cannot measure it, instead of feeding it zeros.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from hta.model import Observation, ScaleDecision


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


class Policy(ABC):
    """Decides how many workers of what shape should exist; see the module."""

    #: the name the run record and the report show (settings included: ``factory:idle_timeout_s=60``)
    name: str = "policy"
    #: observation fields it reads that only some backends fill (:func:`check_signals`)
    needs: frozenset[str] = frozenset()

    @property
    def worker_lifetime(self) -> WorkerLifetime | None:
        """What its workers do on their own (:class:`WorkerLifetime`); None: they stay until drained."""
        return None

    @property
    def packs_pods(self) -> bool:
        """Whether its worker pods prefer a node that holds the run's workers already (HTA's
        pod affinity, ``k8s/pods.py``), so nodes fill one by one and a drained one empties;
        False: plain pods, which the default scheduler spreads (``NodeResourcesFit``
        scores the least allocated node highest), so they keep every node busy a little."""
        return True

    def validate(self) -> None:
        """Refuse settings that make no sense together (ValueError, one line); called once a
        spec's settings are applied."""
        return None

    @abstractmethod
    def decide(self, obs: Observation) -> ScaleDecision:
        """The decision for this observation: workers to add, which to drain, when to ask again."""


class PluginPolicy(Policy):
    """A user's policy written as any object with a ``name`` and ``decide`` (the contract
    plug-ins have always had): its optional hooks are read here, once."""

    def __init__(self, inner: object):
        self.inner = inner
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self.needs = frozenset(getattr(inner, "needs", frozenset()))

    @property
    def worker_lifetime(self) -> WorkerLifetime | None:
        return getattr(self.inner, "worker_lifetime", None)

    @property
    def packs_pods(self) -> bool:
        return bool(getattr(self.inner, "packs_pods", True))

    def validate(self) -> None:
        validate = getattr(self.inner, "validate", None)
        if callable(validate):
            validate()

    def decide(self, obs: Observation) -> ScaleDecision:
        return self.inner.decide(obs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        """The user's own attributes (its settings), read through."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def as_policy(obj: object) -> Policy:
    """``obj`` as a :class:`Policy`: itself, or a user's duck-typed policy adapted."""
    return obj if isinstance(obj, Policy) else PluginPolicy(obj)


#: what each optional observation field is, for the refusal message
SIGNAL_NAMES = {"cpu_utilization": "the workers' measured CPU utilisation"}


def check_signals(policy: Policy, backend_name: str, signals: frozenset[str], why: str = "") -> None:
    """Raise ValueError (one line) if ``policy`` needs a field the backend cannot fill."""
    missing = sorted(set(policy.needs) - set(signals))
    if missing:
        what = ", ".join(SIGNAL_NAMES.get(m, m) for m in missing)
        raise ValueError(f"policy {policy.name} needs {what}, which the {backend_name} backend cannot measure"
                         f"{': ' + why if why else ''}; choose another policy (e.g. --policy hta)")
