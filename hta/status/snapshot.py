"""What a run looks like right now, as one JSON-able model.

:func:`build_snapshot` reads a :class:`~hta.controller.Controller` (its last
observation, decisions, worker events, core samples, latency, learned
categories, last error) and returns a :class:`StatusSnapshot`. The server's
``/status`` and ``/metrics``, the page, the terminal panel and ``hta status``
all render this one model, so they cannot disagree; ``hta status`` parses it
back from JSON with :meth:`StatusSnapshot.model_validate`.

Waste and shortage come from :func:`hta.accounting.integrate` over the
controller's samples up to now (the same definition as the end-of-run summary).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from hta.accounting import CoreSample, integrate
from hta.model import CategoryModel, DialPlan
from hta.plural import counted, node_hours, span
from hta.scaling_log import DecisionRecord, WorkerRecord

if TYPE_CHECKING:
    from hta.controller import Controller

FORMAT = "hta-status/1"

DecisionKind = Literal["up", "down", "none"]
DECISION_KINDS: tuple[DecisionKind, ...] = ("up", "down", "none")


class RunInfo(BaseModel):
    """What the controller does not know about its run: what ran, since when, as which process."""

    workflow: str | None = None
    policy: str
    backend: str
    #: Unix time the run started (the controller's epoch in production)
    started_at: float
    pid: int = Field(default_factory=os.getpid)


class CategoryTasks(BaseModel):
    name: str
    waiting: int = 0
    running: int = 0
    #: as the master counts them; None where it does not count per category
    done: int | None = None


class TaskCounts(BaseModel):
    waiting: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    categories: list[CategoryTasks] = Field(default_factory=list)


class WorkerView(BaseModel):
    id: str
    state: Literal["busy", "idle", "pending"]
    cores: float
    in_use_cores: float = 0.0
    running: int = 0
    #: seconds since the run started: when it connected (busy/idle) or was asked for (pending)
    since: float | None = None


class Cores(BaseModel):
    supply: float = 0.0
    in_use: float = 0.0
    demand: float = 0.0
    idle: float = 0.0


class Latency(BaseModel):
    """Preparation latency L: the estimate the policy uses and what it comes from."""

    estimate_s: float
    prior_s: float
    count: int = 0
    #: every measured latency (request → connected), oldest first
    samples_s: list[float] = Field(default_factory=list)


class DecisionView(BaseModel):
    t: float
    kind: DecisionKind
    add: int = 0
    drain: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    target: int | None = None
    latency_s: float | None = None
    next_decision_s: float | None = None
    reason: str = ""
    held_back: int = 0
    held_by: str | None = None
    waiting: int | None = None


class Cap(BaseModel):
    """The most workers the run may have (``--max-workers``; the simulated cluster's nodes)
    and whether it binds now: every worker the cap allows is there or on its way while
    tasks still wait. A shortage then is the cap's, the user's choice, not the policy's."""

    max_workers: int
    #: the cap in cores: that many workers of the configured shape
    cores: float
    at_cap: bool = False
    #: the last decision's workers that the cap (or the backend) held back, and by what
    held_back: int = 0
    held_by: str | None = None
    #: who set the cap while the run went (``hta set``, ``SIGHUP``); None: as the run started
    set_by: str | None = None


class ChangeView(BaseModel):
    """A setting changed while the run went (:mod:`hta.live`): when, and in words."""

    #: seconds since the run started, when it was put in force
    t: float
    setting: str
    line: str


class Accounting(BaseModel):
    """Waste and shortage so far, core·s (see :mod:`hta.accounting`)."""

    waste_core_s: float = 0.0
    idle_waste_core_s: float = 0.0
    shortage_core_s: float = 0.0
    utilization: float | None = None


class PlanView(DialPlan):
    """The time–cost dial's latest plan (``--deadline``/``--budget``; :class:`~hta.model.DialPlan`)
    and the one line the panel and the page show of it (:func:`plan_line`)."""

    line: str = ""


def _bare_node_hours(node_s: float) -> str:
    """``3.2`` of ``3.2 node·h``: a figure whose unit the line says once, after the last."""
    return node_hours(node_s).split(" ", 1)[0]


def plan_line(p: DialPlan) -> str:
    """The plan in one line: ``deadline 1h40m · projected end 1h21m (12 workers)``, or
    ``budget 16.7 node·h · spent 3.2 + forecast 12.1 node·h (5 workers)``; an ask the
    forecast cannot keep says so, and a spent budget that nothing more is bought."""
    pool = f" ({counted(p.nodes, 'worker')})" if p.nodes is not None else ""
    if p.deadline_s is not None:
        ask = f"deadline {span(p.deadline_s)}"
        if p.projected_end_s is None:
            return f"{ask} · no forecast until a first task ends"
        if not p.feasible:
            return f"{ask} · cannot be kept: projected end {span(p.projected_end_s)}{pool}, going as fast as it can"
        return f"{ask} · projected end {span(p.projected_end_s)}{pool}"
    ask = f"budget {node_hours(p.budget_node_s or 0.0)}"
    if p.exhausted:
        return f"{ask} · spent {node_hours(p.spent_node_s)}: the budget is spent, nothing more is bought"
    if p.forecast_node_s is None:
        return f"{ask} · spent {node_hours(p.spent_node_s)}; no forecast until a first task ends{pool}"
    spend = (f"spent {_bare_node_hours(p.spent_node_s)} + forecast "
             f"{node_hours(max(0.0, p.forecast_node_s - p.spent_node_s))}{pool}")
    if not p.feasible:
        return f"{ask} · cannot be kept: {spend}, going as cheaply as it can"
    return f"{ask} · {spend}"


def plan_view(p: DialPlan | None) -> PlanView | None:
    return None if p is None else PlanView(**p.model_dump(), line=plan_line(p))


class StatusSnapshot(BaseModel):
    format: str = FORMAT
    run: RunInfo
    #: seconds since the run started, when the snapshot was taken
    elapsed_s: float
    #: time of the last observation (None: nothing observed yet)
    observed_at: float | None = None
    tasks: TaskCounts = Field(default_factory=TaskCounts)
    workers: list[WorkerView] = Field(default_factory=list)
    cores: Cores = Field(default_factory=Cores)
    latency: Latency
    #: the last decisions, oldest first
    decisions: list[DecisionView] = Field(default_factory=list)
    #: every decision so far, by kind
    decision_counts: dict[DecisionKind, int] = Field(default_factory=lambda: dict.fromkeys(DECISION_KINDS, 0))
    #: the last worker events, oldest first
    worker_events: list[WorkerRecord] = Field(default_factory=list)
    #: every worker event so far, by event
    worker_event_counts: dict[str, int] = Field(default_factory=dict)
    categories: dict[str, CategoryModel] = Field(default_factory=dict)
    accounting: Accounting = Field(default_factory=Accounting)
    #: (t, supply, in use, demand) cores over time, a step function, thinned to a bounded length
    series: list[tuple[float, float, float, float]] = Field(default_factory=list)
    last_error: str | None = None
    #: steps that failed so far (an API error of the master or the backend)
    step_failures: int = 0
    cap: Cap | None = None
    #: the time–cost dial's latest plan (None: no ``--deadline`` or ``--budget``; absent from
    #: an older HTA's answer, read as None, so the format stays ``hta-status/1``)
    plan: PlanView | None = None
    #: the last settings changed while the run went (``hta set``, SIGHUP), oldest first
    #: (absent from an older HTA's answer: none)
    changes: list[ChangeView] = Field(default_factory=list)

    @property
    def connected(self) -> int:
        return sum(1 for w in self.workers if w.state != "pending")

    @property
    def pending(self) -> int:
        return sum(1 for w in self.workers if w.state == "pending")

    @property
    def last_decision(self) -> DecisionView | None:
        return self.decisions[-1] if self.decisions else None


def decision_kind(d: DecisionRecord) -> DecisionKind:
    """up: it asked for workers; down: it drained or removed some; none: it held."""
    if d.add > 0:
        return "up"
    if d.drain or d.remove:
        return "down"
    return "none"


def recent_decisions(decisions: list[DecisionRecord], last: int) -> list[DecisionRecord]:
    """The last ``last`` decisions that scaled, and the newest decision whatever it was (a
    long run holds far more often than it acts; the actions are what a person looks for)."""
    if not last or not decisions:
        return []
    acted = [d for d in decisions if decision_kind(d) != "none"][-last:]
    if not acted or acted[-1] is not decisions[-1]:
        acted = acted[-(last - 1):] if last > 1 else []
        acted.append(decisions[-1])
    return acted


def decision_view(d: DecisionRecord) -> DecisionView:
    return DecisionView(t=d.t, kind=decision_kind(d), add=d.add, drain=list(d.drain), remove=list(d.remove),
                        target=d.target, latency_s=d.latency_s, next_decision_s=d.next_decision_s, reason=d.reason,
                        held_back=d.held_back, held_by=d.held_by, waiting=d.waiting)


def cap_view(controller: Controller) -> Cap:
    """The cap as the run sees it now (see :class:`Cap`)."""
    config, obs = controller.config, controller.last_observation
    at_cap = False
    if obs is not None:
        at_cap = obs.room_for(obs.worker_shape) == 0 and (obs.waiting_count > 0 or bool(obs.upcoming))
    last = controller.decisions[-1] if controller.decisions else None
    set_by = next((c.source for _, c in reversed(getattr(controller, "changes", [])) if c.setting == "max-workers"),
                  None)
    return Cap(max_workers=config.max_workers, cores=config.max_workers * config.worker_shape.cores,
               at_cap=at_cap, held_back=last.held_back if last else 0, held_by=last.held_by if last else None,
               set_by=set_by)


def thin_series(samples: list[CoreSample], now: float, max_points: int = 600) -> list[tuple[float, float, float, float]]:
    """The supply / in-use / demand step function, at most ``max_points`` long, ending at ``now``.

    A long run has one sample per change; a page polling every second needs a bounded
    answer, so every k-th sample is kept (the last always), then the last values are
    extended to ``now`` so the chart reaches the present."""
    pts = [(round(s.t, 3), s.supply, s.in_use, s.demand) for s in samples]
    if len(pts) > max_points - 1:
        stride = -(-len(pts) // (max_points - 1))
        pts = pts[::stride] if (len(pts) - 1) % stride == 0 else pts[::stride] + [pts[-1]]
    if pts and now > pts[-1][0]:
        pts.append((round(now, 3), *pts[-1][1:]))
    return pts


def _tasks(controller: Controller) -> TaskCounts:
    obs = controller.last_observation
    if obs is None:
        return TaskCounts()
    per: dict[str, CategoryTasks] = {}
    for g in obs.waiting:
        per.setdefault(g.category, CategoryTasks(name=g.category)).waiting += g.count
    for r in obs.running:
        per.setdefault(r.category, CategoryTasks(name=r.category)).running += 1
    snap = controller.last_snapshot
    if snap is not None:
        for c in snap.queue.categories:
            entry = per.setdefault(c.name, CategoryTasks(name=c.name))
            if c.done:
                entry.done = c.done
    for name in controller.learner.models():
        per.setdefault(name, CategoryTasks(name=name))
    return TaskCounts(waiting=obs.waiting_count, running=len(obs.running), done=obs.tasks_done,
                      failed=obs.tasks_failed, categories=sorted(per.values(), key=lambda c: c.name))


def _workers(controller: Controller) -> list[WorkerView]:
    obs = controller.last_observation
    if obs is None:
        return []
    in_use = obs.in_use_by_worker()
    out = [WorkerView(id=w.id, state="idle" if w.idle else "busy", cores=w.capacity.cores,
                      in_use_cores=in_use[w.id], running=w.running, since=w.connected_at)
           for w in obs.workers]
    out += [WorkerView(id=p.id, state="pending", cores=p.shape.cores, since=p.requested_at) for p in obs.pending]
    return out


def build_snapshot(controller: Controller, info: RunInfo, *, last: int = 20, now: float | None = None,
                   max_points: int = 600) -> StatusSnapshot:
    """The run as it is now: ``last`` decisions and worker events, the series thinned to
    ``max_points``. ``now`` (seconds since the run started) defaults to the controller's clock."""
    now = controller.now() if now is None else now
    obs = controller.last_observation
    cores = Cores()
    if obs is not None:
        in_use = obs.in_use_cores()
        cores = Cores(supply=obs.supply_cores(), in_use=in_use, demand=in_use + obs.waiting_cores(),
                      idle=obs.idle_cores())
    counts: dict[DecisionKind, int] = {"up": 0, "down": 0, "none": 0}
    for d in controller.decisions:
        counts[decision_kind(d)] += 1
    events: dict[str, int] = {}
    for e in controller.worker_events:
        events[e.event] = events.get(e.event, 0) + 1
    samples = list(controller.samples)
    totals = integrate(samples, end=now)
    lat = controller.latency
    return StatusSnapshot(
        run=info, elapsed_s=round(now, 3), observed_at=None if obs is None else round(obs.time, 3),
        tasks=_tasks(controller), workers=_workers(controller), cores=cores,
        latency=Latency(estimate_s=lat.estimate(), prior_s=lat.prior_s, count=len(lat.measured),
                        samples_s=list(lat.measured)),
        decisions=[decision_view(d) for d in recent_decisions(controller.decisions, last)],
        decision_counts=counts,
        worker_events=[e.model_copy() for e in controller.worker_events[-last:]] if last else [],
        worker_event_counts=events,
        categories=controller.learner.models(),
        accounting=Accounting(waste_core_s=round(totals.waste_core_s, 3),
                              idle_waste_core_s=round(totals.idle_waste_core_s, 3),
                              shortage_core_s=round(totals.shortage_core_s, 3), utilization=totals.utilization),
        series=thin_series(samples, now, max_points),
        last_error=controller.last_error,
        step_failures=controller.step_failures,
        cap=cap_view(controller),
        plan=plan_view(controller.plan),
        changes=[ChangeView(t=round(t, 3), setting=c.setting, line=c.words())
                 for t, c in getattr(controller, "changes", [])[-last:]] if last else [],
    )
