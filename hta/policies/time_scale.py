"""A policy run in the time of the experiment a compressed run stands for.

A replay compressed ``k`` times (runtimes and preparation latency ÷ k, so an
hour-long experiment fits in minutes) must not compress the policies' own
time constants by accident: HPA's 15 s sync and 300 s scale-down window, the
factory's 30 s cycle and 300 s idle timeout, HTA's 5 s idle check are part of
what is being compared. :class:`TimeScaled` shows the wrapped policy every
time in its observation multiplied by ``k`` (the clock, task starts, worker
connections and idle spells, measured runtimes and latencies) and divides the
``next_decision_s`` it answers by ``k``: the policy lives in the experiment's
time, unchanged.
"""

from __future__ import annotations

import dataclasses
import math

from hta.model import LatencyStats, Observation, ScaleDecision
from hta.policies.base import Policy

_RUNTIMES = ("runtime_mean_s", "runtime_median_s", "runtime_p90_s", "runtime_min_s", "runtime_max_s")


def _scaled(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def dilate(obs: Observation, k: float) -> Observation:
    """The same observation with every time (and duration) multiplied by ``k``."""
    cats = {n: c.model_copy(update={f: _scaled(getattr(c, f), k) for f in _RUNTIMES})
            for n, c in obs.categories.items()}
    return obs.model_copy(update={
        "time": obs.time * k,
        "running": [t.model_copy(update={"started_at": t.started_at * k}) for t in obs.running],
        "workers": [w.model_copy(update={"connected_at": _scaled(w.connected_at, k),
                                         "idle_since": _scaled(w.idle_since, k)}) for w in obs.workers],
        "pending": [p.model_copy(update={"requested_at": p.requested_at * k, "started_at": _scaled(p.started_at, k)})
                    for p in obs.pending],
        "categories": cats,
        "latency": LatencyStats(samples=[s * k for s in obs.latency.samples],
                                room_samples=[s * k for s in obs.latency.room_samples], prior_s=obs.latency.prior_s * k),
    })


def time_scale_of(policy_name: str) -> float:
    """The compression a run's policy ran at (``"hta@10"`` → 10; 1 when not compressed)."""
    _, at, k = policy_name.rpartition("@")
    try:
        return float(k) if at and float(k) > 0 and math.isfinite(float(k)) else 1.0
    except ValueError:
        return 1.0


class TimeScaled(Policy):
    def __init__(self, policy: Policy, k: float):
        if not (k > 0 and math.isfinite(k)):  # nan or inf: every next_decision_s would be nan or 0
            raise ValueError(f"time scale must be a finite positive number, not {k:g}")
        self.policy = policy
        self.k = k
        #: the run record names the scale, so a report can put the run in the experiment's time
        self.name = f"{policy.name}@{k:g}"
        self.needs = policy.needs

    @property
    def worker_lifetime(self):
        """The wrapped policy's workers' own lifetime, its idle timeout in the run's time."""
        lifetime = self.policy.worker_lifetime
        if lifetime is None or lifetime.idle_timeout_s is None:
            return lifetime
        return dataclasses.replace(lifetime, idle_timeout_s=lifetime.idle_timeout_s / self.k)

    @property
    def packs_pods(self) -> bool:
        return self.policy.packs_pods

    def decide(self, obs: Observation) -> ScaleDecision:
        d = self.policy.decide(dilate(obs, self.k))
        return d.model_copy(update={"next_decision_s": d.next_decision_s / self.k})


__all__ = ["TimeScaled", "dilate", "time_scale_of"]
