"""Watch only: never asks for or removes a worker.

For runs where something else scales the workers (the real
``work_queue_factory``, a cluster's own autoscaler): HTA still observes the
master and writes the scaling log, so the other autoscaler's supply, waste
and shortage are measured by the same definitions as HTA's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy


@dataclass
class ObservePolicy(Policy):
    name: str = "observe"
    every_s: float = 5.0

    def decide(self, obs: Observation) -> ScaleDecision:
        return ScaleDecision(next_decision_s=self.every_s, target_workers=len(obs.workers) + len(obs.pending),
                             reason="observe only")
