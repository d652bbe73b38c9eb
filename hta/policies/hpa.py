"""Kubernetes Horizontal Pod Autoscaler on average CPU utilisation — a rival.

Faithful to the HPA controller of Kubernetes v1.33.13, the version the test cluster
runs (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale; checked line by
line against ``GetResourceReplicas`` and ``groupPods`` in
pkg/controller/podautoscaler/replica_calculator.go, ``GetResourceUtilizationRatio`` in
metrics/utilization.go, and ``normalizeDesiredReplicas`` /
``normalizeDesiredReplicasWithBehaviors`` in horizontal.go):

- sync every 15 s; ``desired = ceil(ready × usage / target)`` with usage the CPU used
  by ready pods over their requests, in whole percent rounded down;
- no change while ``0.9 ≤ usage/target ≤ 1.1`` (tolerance);
- on scale-up, pods not yet ready count as 0 % (the controller sets them aside and
  re-averages), so pending pods damp further scale-up; a ready pod with no metric yet
  counts as 0 % on a scale-up and 100 % on a scale-down, and no change is made where
  that turns the direction;
- an HPA without ``spec.behavior`` (what ``kubectl autoscale`` and KEDA create; the API
  server fills in no behaviour where none is given, autoscaling/v2 defaults.go): the
  replicas move to the highest recommendation of the last 300 s
  (``--horizontal-pod-autoscaler-downscale-stabilization``), up as well as down, and at
  most to max(2 × current, 4) in one sync. ``hpa-N:spec_behavior=true`` models an HPA
  whose ``behavior`` is set to the documented defaults instead: up by max(4 pods, 100 %)
  per 15 s, down to the highest recommendation of the last 300 s;
- minReplicas 1; the ReplicaSet deletes pending pods first, then the newest,
  whether or not they run tasks (that is the rival's flaw HTA avoids).

Where the model differs, it differs in the rival's favour: its first sync is the run's
first decision, where the real controller's comes one resync period after the HPA is
created (``enqueueHPA`` adds the key with ``AddRateLimited``, and the HPA's rate limiter,
``FixedItemIntervalRateLimiter`` in rate_limiters.go, always waits the 15 s interval), so
the model may scale up to 15 s sooner; and in the simulator each worker's CPU busy is
read at the sync itself, where metrics-server serves a rate over its last scrape window
(in production the policy reads the metrics API, as the controller does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy

SYNC_S = 15.0
TOLERANCE = 0.1
SCALE_DOWN_WINDOW_S = 300.0
SCALE_UP_PODS = 4
SCALE_UP_PERCENT = 100.0
#: an HPA without spec.behavior: at most max(2 × current, 4) replicas after one sync
#: (horizontal.go scaleUpLimitFactor, scaleUpLimitMinimum)
SCALE_UP_FACTOR = 2
SCALE_UP_MINIMUM = 4


@dataclass
class ReplicaBehaviour:
    """How the HPA controller turns a metric's desired replicas into replicas (shared with
    KEDA's ScaledObject, which drives an HPA): ``spec_behavior`` false is an HPA without
    ``spec.behavior`` (horizontal.go ``normalizeDesiredReplicas``), true one with the
    documented default behaviour (``normalizeDesiredReplicasWithBehaviors``)."""

    min_replicas: int = 1
    spec_behavior: bool = False
    _recommendations: list[tuple[float, int]] = field(default_factory=list)

    def bound(self, now: float, current: int, desired: int, max_replicas: int) -> int:
        if not self._recommendations:  # recordInitialRecommendation: the replicas it found
            self._recommendations.append((now, current))
        if self.spec_behavior:
            # a recommendation counts while strictly younger than the window (timestamp.After)
            self._recommendations = [(t, d) for t, d in self._recommendations if now - t < SCALE_DOWN_WINDOW_S]
            highest = max([desired, *(d for _, d in self._recommendations)])
            self._recommendations.append((now, desired))
            if desired < current:
                desired = min(current, highest)
            if desired > current:
                desired = min(desired, current + max(SCALE_UP_PODS, math.ceil(current * SCALE_UP_PERCENT / 100)))
            return max(self.min_replicas, min(max_replicas, desired))
        # stabilizeRecommendation: the highest of this one and those not older than the
        # window (not timestamp.Before(cutoff)), up or down; then convertDesiredReplicasWithRules
        self._recommendations = [(t, d) for t, d in self._recommendations if now - t <= SCALE_DOWN_WINDOW_S]
        stabilized = max([desired, *(d for _, d in self._recommendations)])
        self._recommendations.append((now, desired))
        allowed = min(max_replicas, max(SCALE_UP_FACTOR * current, SCALE_UP_MINIMUM))
        return max(self.min_replicas, min(allowed, stabilized))


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
class HPAPolicy(Policy):
    #: reads each worker's measured CPU utilisation
    needs = frozenset({"cpu_utilization"})
    target_percent: float = 50.0
    name: str = ""
    behaviour: ReplicaBehaviour = field(default_factory=ReplicaBehaviour)

    def __post_init__(self) -> None:
        self.name = self.name or f"hpa-{self.target_percent:g}"
        self.validate()

    def validate(self) -> None:
        """Settings an HPA would refuse, refused in one line (again after ``hpa-N:key=value``)."""
        if not (self.target_percent > 0 and math.isfinite(self.target_percent)):
            raise ValueError(f"target_percent must be a number above 0, not {self.target_percent:g}")
        if self.behaviour.min_replicas < 1:  # (minReplicas 0 is behind the HPAScaleToZero alpha gate)
            raise ValueError(f"min_replicas must be at least 1, not {self.behaviour.min_replicas}")

    def decide(self, obs: Observation) -> ScaleDecision:
        ready = [w for w in obs.workers if w.cpu_utilization is not None]
        missing = len(obs.workers) - len(ready)  # connected, no metric read yet
        current = len(obs.workers) + len(obs.pending)
        if not ready:  # "did not receive metrics for targeted pods": no change, none recorded
            desired = max(current, self.behaviour.min_replicas)
            return replica_change(obs, current, desired, "no ready pods: no metrics")
        desired, usage = self.replicas(sum(w.cpu_utilization or 0.0 for w in ready), len(ready), missing,
                                       len(obs.pending), current)
        desired = self.behaviour.bound(obs.time, current, desired, obs.max_workers)
        return replica_change(obs, current, desired, f"cpu {usage}% vs target {self.target_percent:g}%")

    def replicas(self, used: float, ready: int, missing: int, unready: int, current: int) -> tuple[int, int]:
        """GetResourceReplicas: the desired replicas and the utilisation read, from the CPU
        ``used`` by ``ready`` pods (in pods' requests: the pods are all one shape)."""
        target = self.target_percent
        usage = whole_percent(used, ready)
        ratio = usage / target
        up_with_unready = unready > 0 and ratio > 1
        if not up_with_unready and not missing:
            return (current if within_tolerance(ratio) else math.ceil(ratio * ready)), usage
        counted = ready
        if missing and ratio < 1:  # on a scale-down, a pod with no metric counts as 100 % (or the target)
            used += missing * max(100.0, target) / 100.0
            counted += missing
        elif missing and ratio > 1:  # on a scale-up, as 0 %
            counted += missing
        if up_with_unready:  # on a scale-up, unready pods count as 0 %
            counted += unready
        new_ratio = whole_percent(used, counted) / target
        if within_tolerance(new_ratio) or (ratio < 1 < new_ratio) or (new_ratio < 1 < ratio):
            return current, usage  # too small a change, or one that turns the direction
        desired = math.ceil(new_ratio * counted)
        if (new_ratio < 1 and desired > current) or (new_ratio > 1 and desired < current):
            return current, usage
        return desired, usage


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
