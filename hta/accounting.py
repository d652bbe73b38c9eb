"""Waste and shortage, defined once.

supply S(t) = cores of connected workers; in-use U(t) = cores running tasks
use; demand D(t) = U(t) + cores wanted by waiting tasks. A task uses (and,
waiting, wants) the cores it declares, or, if it declares nothing and so is given a
whole worker, only what its category's resource monitoring measured, in whole cores
(:meth:`hta.model.Observation.in_use_by_worker`); until its category is measured,
the whole worker. So a node-sized worker running one 1-core task wastes two of its
three cores whether the task declared its core or not.

    waste    = ∫ max(S − U, 0) dt      (core·s paid for and not used)
    shortage = ∫ (D − U) dt            (core·s of work that waited for cores)

Waste splits by where it sits: on idle workers I(t) (cores of connected
workers running nothing, which a policy may drain) and the rest on busy
workers (free cores beside a running task: no policy that drains only idle
workers can remove those; only fewer, fuller workers avoid them).

    idle waste = ∫ min(I, max(S − U, 0)) dt;   busy waste = waste − idle waste

Shortage splits by the cap C (the most cores the run may have: ``--max-workers`` workers
of the configured shape): the demand beyond it could never be served, however good the
policy; that part is the user's choice, the rest the policy's.

    shortage beyond the cap = ∫ max(D − max(C, U), 0) dt;   under the cap = shortage − beyond

Teardown: the cluster a policy leaves behind after the workflow's last task ends is
still paid for; :func:`split_totals` cuts waste (and the rest) at that moment, and
:func:`node_seconds_after` counts the node time paid after it.

Samples are step functions: a sample's values hold until the next sample (or
the end of the run). The simulator, the controller's summary, the report and
the tests all call :func:`integrate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class CoreSample:
    t: float
    supply: float
    in_use: float
    demand: float
    #: cores of connected workers that run no task
    idle: float = 0.0


@dataclass(frozen=True)
class Totals:
    waste_core_s: float
    shortage_core_s: float
    supply_core_s: float
    in_use_core_s: float
    idle_waste_core_s: float = 0.0
    #: the shortage beyond the cap (0 without one)
    shortage_beyond_cap_core_s: float = 0.0

    @property
    def busy_waste_core_s(self) -> float:
        return max(self.waste_core_s - self.idle_waste_core_s, 0.0)

    @property
    def utilization(self) -> float | None:
        return self.in_use_core_s / self.supply_core_s if self.supply_core_s > 0 else None


def integrate(samples: Iterable[CoreSample], end: float | None = None, cap_cores: float | None = None) -> Totals:
    """Integrate step-function samples (sorted by time) up to ``end``; ``cap_cores``: the
    cap C, for the shortage beyond it."""
    waste = shortage = supply = in_use = idle = beyond = 0.0

    def add(s: CoreSample, dt: float) -> None:
        nonlocal waste, shortage, supply, in_use, idle, beyond
        free = max(s.supply - s.in_use, 0.0)
        waste += free * dt
        idle += min(s.idle, free) * dt
        shortage += max(s.demand - s.in_use, 0.0) * dt
        supply += s.supply * dt
        in_use += s.in_use * dt
        if cap_cores is not None:
            beyond += max(s.demand - max(cap_cores, s.in_use), 0.0) * dt

    prev: CoreSample | None = None
    for s in samples:
        if prev is not None:
            add(prev, max(0.0, s.t - prev.t))
        prev = s
    if prev is not None and end is not None and end > prev.t:
        add(prev, end - prev.t)
    return Totals(waste, shortage, supply, in_use, idle, beyond)


def split_totals(samples: Iterable[CoreSample], at: float, end: float) -> tuple[Totals, Totals]:
    """:func:`integrate` up to ``end`` cut in two at ``at``: before it (during the run) and
    after it (teardown: what the cluster cost once the workflow had ended). The two add
    up to the whole."""
    before: list[CoreSample] = []
    after: list[CoreSample] = []
    for s in samples:
        if s.t < at:
            before.append(s)
        else:
            after.append(s)
    if before and (not after or after[0].t > at):
        h = before[-1]  # the value holding at the cut
        after.insert(0, CoreSample(at, h.supply, h.in_use, h.demand, h.idle))
    return integrate(before, min(at, end)), integrate(after, end)


#: (start, stop or None while still paid, the share of a node paid: 1 unless given)
PaidSpan = tuple[float, float | None] | tuple[float, float | None, float]


def node_seconds(intervals: Iterable[PaidSpan], end: float) -> float:
    """Node-seconds paid: each node (or share of one) from the moment it was asked for
    until it stopped (or ``end`` if it never did)."""
    return sum(max(0.0, (stop if stop is not None else end) - start) * (share[0] if share else 1.0)
               for start, stop, *share in intervals)


def node_seconds_after(intervals: Iterable[PaidSpan], at: float, end: float) -> float:
    """The part of :func:`node_seconds` paid after ``at`` (each span clipped to [at, end])."""
    return sum(max(0.0, min(stop if stop is not None else end, end) - max(start, at)) * (share[0] if share else 1.0)
               for start, stop, *share in intervals)
