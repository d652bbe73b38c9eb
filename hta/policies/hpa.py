"""Kubernetes Horizontal Pod Autoscaler on average CPU utilisation — a rival.

Faithful to the HPA controller (kubernetes.io/docs/tasks/run-application/
horizontal-pod-autoscale, autoscaling/v2 default ``behavior``; checked against
``GetResourceReplicas`` and ``groupPods`` in Kubernetes v1.33.13's
pkg/controller/podautoscaler/replica_calculator.go, the version the test cluster runs):

- sync every 15 s; ``desired = ceil(current × usage / target)`` with usage the
  CPU used by ready pods over their requests, in whole percent rounded down;
- no change while ``|usage/target − 1| ≤ 0.1`` (tolerance);
- on scale-up, pods not yet ready count as 0 % (the controller sets them aside
  and re-averages), so pending pods damp further scale-up;
- scale-up limited per 15 s to the larger of 4 pods and 100 % of current;
- scale-down takes the highest recommendation of the last 300 s
  (stabilisation window), at most 100 % per 15 s;
- minReplicas 1; the ReplicaSet deletes pending pods first, then the newest,
  whether or not they run tasks (that is the rival's flaw HTA avoids).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from hta.model import Observation, ScaleDecision

SYNC_S = 15.0
TOLERANCE = 0.1
SCALE_DOWN_WINDOW_S = 300.0
SCALE_UP_PODS = 4
SCALE_UP_PERCENT = 100.0


@dataclass
class ReplicaBehaviour:
    """HPA's default behaviour: the scale-up rate limit and scale-down window,
    shared with KEDA (which drives an HPA)."""

    min_replicas: int = 1
    _recommendations: list[tuple[float, int]] = field(default_factory=list)

    def bound(self, now: float, current: int, desired: int, max_replicas: int) -> int:
        self._recommendations.append((now, desired))
        self._recommendations = [(t, d) for t, d in self._recommendations if now - t <= SCALE_DOWN_WINDOW_S]
        if desired < current:
            desired = min(current, max(d for _, d in self._recommendations))
        if desired > current:
            desired = min(desired, current + max(SCALE_UP_PODS, math.ceil(current * SCALE_UP_PERCENT / 100)))
        return max(self.min_replicas, min(max_replicas, desired))


def replica_change(obs: Observation, current: int, desired: int, reason: str) -> ScaleDecision:
    """Turn a replica count into pods to add or delete (pending first, then newest)."""
    if desired > current:
        return ScaleDecision(add=desired - current, shape=obs.worker_shape, next_decision_s=SYNC_S,
                             target_workers=desired, reason=reason)
    if desired < current:
        victims = [p.id for p in sorted(obs.pending, key=lambda p: -p.requested_at)]
        victims += [w.id for w in sorted(obs.workers, key=lambda w: -(w.connected_at or 0.0))]
        return ScaleDecision(remove=victims[: current - desired], next_decision_s=SYNC_S,
                             target_workers=desired, reason=reason)
    return ScaleDecision(next_decision_s=SYNC_S, target_workers=current, reason=reason)


@dataclass
class HPAPolicy:
    #: reads each worker's measured CPU utilisation
    needs: ClassVar[frozenset[str]] = frozenset({"cpu_utilization"})
    target_percent: float = 50.0
    name: str = ""
    behaviour: ReplicaBehaviour = field(default_factory=ReplicaBehaviour)

    def __post_init__(self) -> None:
        self.name = self.name or f"hpa-{self.target_percent:g}"

    def decide(self, obs: Observation) -> ScaleDecision:
        ready = obs.workers
        current = len(ready) + len(obs.pending)
        if not ready:
            desired = max(current, self.behaviour.min_replicas)
            return replica_change(obs, current, desired, "no ready pods: no metrics")
        used = sum(w.cpu_utilization or 0.0 for w in ready)  # (in pods' requests: all pods are one shape)
        usage = whole_percent(used, len(ready))
        ratio = usage / self.target_percent
        if ratio > 1 and obs.pending:
            usage = whole_percent(used, current)  # unready pods count as 0 %
            ratio = usage / self.target_percent
            if ratio <= 1:
                ratio = 1.0
        if within_tolerance(ratio):
            desired = current
        else:
            desired = math.ceil(len(ready) * ratio) if ratio < 1 else math.ceil(current * ratio)
        desired = self.behaviour.bound(obs.time, current, desired, obs.max_workers)
        return replica_change(obs, current, desired, f"cpu {usage}% vs target {self.target_percent:g}%")


def within_tolerance(ratio: float) -> bool:
    """No change for a usage ratio within 10 % of 1, written as the controller writes it
    (``Tolerances.isWithin``: ``1 - 0.1 <= ratio <= 1 + 0.1`` in float64), so that a ratio
    of exactly 1.1 (55 % against 50 %) is within, as there, where ``abs(1.1 - 1) <= 0.1``
    is not."""
    return 1.0 - TOLERANCE <= ratio <= 1.0 + TOLERANCE


def whole_percent(used: float, requested: float) -> int:
    """Utilisation as the HPA controller computes it: whole percent, rounded down
    (``int32(metricsTotal * 100 / requestsTotal)`` in ``GetResourceUtilizationRatio``,
    pkg/controller/podautoscaler/metrics/utilization.go), so 10.9 % against a 10 % target
    is 10 %, within the tolerance."""
    return int(100.0 * used / requested + 1e-9)
