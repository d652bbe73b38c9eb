"""A static cluster of the maximum size: the reference every autoscaler is measured against.

It asks for ``max_workers`` at its first decision and never scales down (a
cluster provisioned for the peak and paid for all along).
"""

from __future__ import annotations

from dataclasses import dataclass

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy


@dataclass
class StaticPolicy(Policy):
    name: str = "static"

    def decide(self, obs: Observation) -> ScaleDecision:
        have = len(obs.workers) + len(obs.pending)
        add = max(0, obs.max_workers - have)
        return ScaleDecision(add=add, shape=obs.worker_shape, next_decision_s=600.0, target_workers=obs.max_workers,
                             reason=f"static: {obs.max_workers} workers from the start")
