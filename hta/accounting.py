"""Waste and shortage, defined once.

supply S(t) = cores of connected workers; in-use U(t) = cores allocated to
running tasks; demand D(t) = U(t) + cores wanted by waiting tasks — the cores
each task declares (a task that declares nothing wants a whole worker).

    waste    = ∫ max(S − U, 0) dt      (core·s paid for and not used)
    shortage = ∫ (D − U) dt            (core·s of work that waited for cores)

Samples are step functions: a sample's values hold until the next sample (or
the end of the run). The simulator, the controller's summary, the report and
the tests all call :func:`integrate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class CoreSample:
    t: float
    supply: float
    in_use: float
    demand: float


@dataclass(frozen=True)
class Totals:
    waste_core_s: float
    shortage_core_s: float
    supply_core_s: float
    in_use_core_s: float

    @property
    def utilization(self) -> float | None:
        return self.in_use_core_s / self.supply_core_s if self.supply_core_s > 0 else None


def integrate(samples: Iterable[CoreSample], end: float | None = None) -> Totals:
    """Integrate step-function samples (sorted by time) up to ``end``."""
    waste = shortage = supply = in_use = 0.0
    prev: CoreSample | None = None
    for s in samples:
        if prev is not None:
            dt = max(0.0, s.t - prev.t)
            waste += max(prev.supply - prev.in_use, 0.0) * dt
            shortage += max(prev.demand - prev.in_use, 0.0) * dt
            supply += prev.supply * dt
            in_use += prev.in_use * dt
        prev = s
    if prev is not None and end is not None and end > prev.t:
        dt = end - prev.t
        waste += max(prev.supply - prev.in_use, 0.0) * dt
        shortage += max(prev.demand - prev.in_use, 0.0) * dt
        supply += prev.supply * dt
        in_use += prev.in_use * dt
    return Totals(waste, shortage, supply, in_use)


def node_seconds(intervals: Iterable[tuple[float, float | None]], end: float) -> float:
    """Worker-seconds paid: each worker from the moment it was asked for until
    it stopped (or ``end`` if it never did)."""
    return sum(max(0.0, (stop if stop is not None else end) - start) for start, stop in intervals)
