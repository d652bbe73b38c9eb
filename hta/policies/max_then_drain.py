"""The trivial rival: buy the maximum at once, drain idle workers once nothing is left to start.

While any task waits or the DAG still holds tasks not released, it keeps the cluster at
``max_workers`` (asking at once for whatever is missing). Once nothing waits and nothing
is upcoming, every idle worker is drained (never below ``min_workers``; busy workers
finish their tasks first and are drained when they fall idle). Under a cap that the
workflow's width exceeds, every sensible policy buys the cap at once, so this is the
reference HTA's sizing has to beat where the cap does not bind (DESIGN.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy


@dataclass
class MaxThenDrainPolicy(Policy):
    name: str = "max-then-drain"
    #: how often it looks (draining has no latency to wait for)
    check_s: float = 5.0

    def decide(self, obs: Observation) -> ScaleDecision:
        have = len(obs.workers) + len(obs.pending)
        upcoming = sum(u.count for u in obs.upcoming)
        if obs.waiting_count or upcoming:
            add = max(0, obs.max_workers - have)
            return ScaleDecision(add=add, shape=obs.worker_shape, next_decision_s=self.check_s,
                                 target_workers=have + add,
                                 reason=f"{obs.waiting_count} waiting, {upcoming} upcoming: "
                                        f"the maximum, {obs.max_workers} workers")
        idle = sorted(w.id for w in obs.workers if w.idle)
        drain = idle[:max(0, have - obs.min_workers)]
        return ScaleDecision(drain=drain, next_decision_s=self.check_s, target_workers=have - len(drain),
                             reason=f"nothing waits or is upcoming: drain {len(drain)} idle workers")
