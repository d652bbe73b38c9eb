"""KEDA **ScaledObject** variant on the master's waiting-task count — a rival, flagged:
it scales a Deployment and deletes pods busy or not. The KEDA shape users pick for
batch work is the ScaledJob (one Job per worker, run to completion):
:mod:`hta.policies.keda_job` (``keda-job``). This one is kept as ``keda-<tasks per pod>``
for comparison (docs/pareto.md); its livelock on BLAST, Epigenomics and Montage (busy
pods deleted, their tasks restarted) is an artifact of the ScaledObject.

Two loops, as KEDA runs them (keda.sh/docs/latest/concepts/scaling-deployments;
``RequestScale``, ``scaleFromZeroOrIdle`` and ``scaleToZeroOrIdle`` in KEDA's
pkg/scaling/executor/scale_scaledobjects.go):

- **KEDA's own**, every ``pollingInterval`` (30 s): the trigger is active while a task
  waits (activation threshold 0). Active at 0 replicas, it scales to
  max(``minReplicaCount``, 1) itself, whatever the backlog; active otherwise, it notes
  the time. Inactive with replicas and ``minReplicaCount`` 0, it scales to 0 once
  ``cooldownPeriod`` (300 s) has passed since the trigger was last active; inactive under
  ``minReplicaCount``, it scales to it.
- **The HPA it creates**, every 15 s, driven as :mod:`hta.policies.hpa` drives an HPA
  without ``spec.behavior`` (KEDA sets none unless
  ``advanced.horizontalPodAutoscalerConfig`` says), on the external metric with target
  type AverageValue: ``desired = ceil(waiting / tasks_per_pod)``, 10 % tolerance, the
  highest recommendation of the last 300 s, at most max(2 × current, 4) replicas a sync,
  and minReplicas max(``minReplicaCount``, 1): it never goes to 0 itself, and at 0
  replicas it does nothing ("scaling is disabled", horizontal.go).

Running tasks are invisible to the metric, so pods that run the last tasks are deleted
once the window passes, busy or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy
from hta.policies.hpa import ReplicaBehaviour, replica_change, within_tolerance

#: KEDA's defaults (ScaledObject spec: pollingInterval, cooldownPeriod)
POLLING_INTERVAL_S = 30.0
COOLDOWN_S = 300.0


@dataclass
class KEDAScaledObjectPolicy(Policy):
    tasks_per_pod: float = 3.0
    name: str = ""
    #: ``min_replicas`` is the ScaledObject's minReplicaCount (default 0)
    behaviour: ReplicaBehaviour = field(default_factory=lambda: ReplicaBehaviour(min_replicas=0))
    polling_interval_s: float = POLLING_INTERVAL_S
    cooldown_s: float = COOLDOWN_S
    _last_poll: float | None = field(default=None, repr=False)
    _last_active: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or f"keda-{self.tasks_per_pod:g}"
        self.validate()

    def validate(self) -> None:
        if not (self.tasks_per_pod > 0 and math.isfinite(self.tasks_per_pod)):
            raise ValueError(f"tasks_per_pod must be a number above 0, not {self.tasks_per_pod:g}")
        if self.behaviour.min_replicas < 0:
            raise ValueError(f"min_replicas must be at least 0, not {self.behaviour.min_replicas}")
        for key in ("polling_interval_s", "cooldown_s"):
            value = getattr(self, key)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{key} must be a number of seconds, 0 or more, not {value:g}")

    def decide(self, obs: Observation) -> ScaleDecision:
        current = len(obs.workers) + len(obs.pending)
        waiting = obs.waiting_count
        min_count = self.behaviour.min_replicas
        if self._last_poll is None or obs.time - self._last_poll >= self.polling_interval_s - 1e-9:
            self._last_poll = obs.time  # KEDA's loop
            if waiting > 0:
                self._last_active = obs.time
                if current == 0:
                    return replica_change(obs, 0, min(max(min_count, 1), obs.max_workers),
                                          f"{waiting} waiting: KEDA activates from 0")
            elif current > 0 and min_count == 0 and (
                    self._last_active is None or obs.time - self._last_active > self.cooldown_s):
                return replica_change(obs, current, 0, f"nothing waiting for {self.cooldown_s:g} s: KEDA deactivates")
            elif current < min_count:  # inactive under minReplicaCount: KEDA sets it
                return replica_change(obs, current, min(min_count, obs.max_workers),
                                      f"minReplicaCount {min_count}: KEDA scales to it")
        if current == 0:  # the HPA's loop: scaling is disabled at 0 replicas
            return replica_change(obs, 0, 0, "0 replicas: the HPA waits for KEDA")
        desired = math.ceil(waiting / self.tasks_per_pod)
        if within_tolerance(waiting / (self.tasks_per_pod * current)):
            desired = current
        desired = max(1, self.behaviour.bound(obs.time, current, desired, obs.max_workers))
        return replica_change(obs, current, desired, f"{waiting} waiting / {self.tasks_per_pod:g} per pod")


#: the name earlier code and tests use
KEDAPolicy = KEDAScaledObjectPolicy
