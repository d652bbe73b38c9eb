"""work_queue_factory — CCTools' own worker pool manager, a rival.

As in ``work_queue_factory`` (CCTools, batch_job/work_queue_factory.c):
every 30 s, ``target = ceil((waiting + running) / tasks_per_worker)``
clamped to [min, max]; new workers are submitted only while fewer than
``workers_per_cycle`` (5) are submitted but not yet connected; it never
removes a worker itself: workers leave on their own after ``idle_timeout``
(300 s) without work. ``tasks_per_worker`` defaults to one task per core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hta.model import Observation, ScaleDecision

CYCLE_S = 30.0


@dataclass
class FactoryPolicy:
    name: str = "factory"
    tasks_per_worker: float | None = None
    workers_per_cycle: int = 5
    idle_timeout_s: float = 300.0

    def decide(self, obs: Observation) -> ScaleDecision:
        per = self.tasks_per_worker or max(1.0, obs.worker_shape.cores)
        target = math.ceil((obs.waiting_count + len(obs.running)) / per)
        target = max(obs.min_workers, min(obs.max_workers, target))
        have = len(obs.workers) + len(obs.pending)
        room = max(0, self.workers_per_cycle - len(obs.pending))
        add = max(0, min(target - have, room))
        # the workers' own idle timeout, carried out by the mechanism
        leave = [w.id for w in obs.workers
                 if w.idle and w.idle_since is not None and obs.time - w.idle_since >= self.idle_timeout_s]
        return ScaleDecision(add=add, shape=obs.worker_shape, drain=leave, next_decision_s=CYCLE_S,
                             target_workers=target, reason=f"target {target} from {obs.waiting_count} waiting + "
                                                           f"{len(obs.running)} running")
