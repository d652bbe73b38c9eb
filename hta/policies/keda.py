"""KEDA **ScaledObject** variant on the master's waiting-task count — a rival, flagged:
it scales a Deployment and deletes pods busy or not. The KEDA shape users pick for
batch work is the ScaledJob (one Job per worker, run to completion):
:mod:`hta.policies.keda_job` (``keda-job``). This one is kept as ``keda-<tasks per pod>``
so earlier comparisons stay reproducible; its livelock on BLAST, Epigenomics and
Montage (busy pods deleted, their tasks restarted) is an artifact of the ScaledObject.

KEDA feeds an external metric (here: tasks waiting in the Work Queue master)
to an HPA with target type AverageValue, so
``desired = ceil(waiting / tasks_per_pod)`` (keda.sh/docs/latest/concepts/
scaling-deployments), driven as :mod:`hta.policies.hpa` drives an HPA without
``spec.behavior`` (KEDA sets none unless ``advanced.horizontalPodAutoscalerConfig``
says): 15 s sync, 10 % tolerance, the highest recommendation of the last 300 s,
at most max(2 × current, 4) replicas a sync (KEDA's cooldownPeriod is 300 s too),
and minReplicaCount 0. (From zero KEDA itself activates one pod before the HPA
acts; here the first sync may go to 4.) Running tasks are invisible to the metric, so pods that
run the last tasks are deleted once the window passes, busy or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hta.model import Observation, ScaleDecision
from hta.policies.hpa import ReplicaBehaviour, replica_change, within_tolerance


@dataclass
class KEDAScaledObjectPolicy:
    tasks_per_pod: float = 3.0
    name: str = ""
    behaviour: ReplicaBehaviour = field(default_factory=lambda: ReplicaBehaviour(min_replicas=0))

    def __post_init__(self) -> None:
        self.name = self.name or f"keda-{self.tasks_per_pod:g}"
        self.validate()

    def validate(self) -> None:
        if not (self.tasks_per_pod > 0 and math.isfinite(self.tasks_per_pod)):
            raise ValueError(f"tasks_per_pod must be a number above 0, not {self.tasks_per_pod:g}")
        if self.behaviour.min_replicas < 0:
            raise ValueError(f"min_replicas must be at least 0, not {self.behaviour.min_replicas}")

    def decide(self, obs: Observation) -> ScaleDecision:
        current = len(obs.workers) + len(obs.pending)
        waiting = obs.waiting_count
        desired = math.ceil(waiting / self.tasks_per_pod)
        if current > 0 and within_tolerance(waiting / (self.tasks_per_pod * current)):
            desired = current
        desired = self.behaviour.bound(obs.time, current, desired, obs.max_workers)
        return replica_change(obs, current, desired, f"{waiting} waiting / {self.tasks_per_pod:g} per pod")


#: the name earlier code and tests use
KEDAPolicy = KEDAScaledObjectPolicy
