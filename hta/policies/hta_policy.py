"""HTA's policy: buy what the queue-drain estimate says will still wait after
one preparation latency; drain what it says will sit idle.

The decision is made once per preparation cycle L (``next_decision_s = L``,
the thesis's adaptive stabilisation): asking sooner would count workers that
are still on their way as missing. A worker is drained only when it is idle
now and the estimate never needed it, on ``drain_after`` decisions in a row
(hysteresis, as Dask's ``wait_count``), and never below ``min_workers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hta.estimator import EstimatorOptions, QueueDrainEstimator
from hta.model import Observation, ScaleDecision


@dataclass
class HTAPolicy:
    name: str = "hta"
    options: EstimatorOptions = field(default_factory=EstimatorOptions)
    latency_statistic: Literal["last", "median"] = "median"
    drain_after: int = 1
    _proposed: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.estimator = QueueDrainEstimator(self.options)

    def decide(self, obs: Observation) -> ScaleDecision:
        latency = obs.latency.estimate(self.latency_statistic)
        est = self.estimator.estimate(obs, latency)
        have = len(obs.workers) + len(obs.pending)

        add = max(est.workers_needed, obs.min_workers - have, 0)
        add = max(0, min(add, obs.max_workers - have))

        drain: list[str] = []
        if add == 0 and est.left_count == 0:
            candidates = set(est.unused_idle)
            self._proposed = {w: self._proposed.get(w, 0) + 1 for w in candidates}
            ready = sorted(w for w, n in self._proposed.items() if n >= self.drain_after)
            room = max(0, have - obs.min_workers)
            drain = ready[:room]
        else:
            self._proposed.clear()
        for w in drain:
            self._proposed.pop(w, None)

        reason = (
            f"L={latency:.1f}s: {est.left_count} tasks still waiting at the horizon "
            f"(pack into {est.packed_need}, tail-aware {est.workers_needed}); "
            f"{len(est.unused_idle)} idle workers unneeded"
        )
        return ScaleDecision(
            add=add,
            shape=obs.worker_shape,
            drain=drain,
            next_decision_s=latency,
            target_workers=have + add - len(drain),
            reason=reason,
        )
