"""What one run did, computed from its scaling-log records.

``hta makeflow`` prints this at the end of a run, ``hta simulate`` tabulates
it per run and ``hta report`` renders it; all three go through
:func:`summarize` so a number means the same thing everywhere.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field

from hta.accounting import CoreSample, integrate, node_seconds, node_seconds_after, split_totals
from hta.model import CategoryModel, DialPlan, LatencyStats
from hta.scaling_log import (
    CategoriesRecord,
    DecisionRecord,
    EndRecord,
    NodeRecord,
    ObservationRecord,
    RunRecord,
    ScalingLogWriter,
    WorkerRecord,
)
from resource_monitor.categories import percentile


class RunSummary(BaseModel):
    source: str | None = None
    workflow: str | None = None
    workload: str | None = None
    policy: str
    backend: str
    seed: int | None = None
    simulated: bool = False
    complete: bool
    exit_code: int | None = None
    runtime_s: float
    tasks_done: int
    #: of those, done by an earlier run of the workflow (makeflow resumed it)
    tasks_done_before: int = 0
    tasks_failed: int
    tasks_retried: int
    #: rules an earlier run left unfinished that this one ran again (not failures)
    tasks_resumed: int = 0
    waste_core_s: float
    #: the part of the waste on workers that ran nothing (drainable); the rest sat
    #: beside running tasks on busy workers
    idle_waste_core_s: float = 0.0
    #: the waste split at the workflow's end: while it ran, and in the teardown after its
    #: last task (workers the policy had not let go yet); the two add up to ``waste_core_s``
    run_waste_core_s: float = 0.0
    teardown_waste_core_s: float = 0.0
    shortage_core_s: float
    #: the part of the shortage beyond the cap (demand past ``max_workers`` workers' cores):
    #: the user's choice of cap, not the policy's miss
    shortage_beyond_cap_core_s: float = 0.0
    max_workers: int | None = None
    #: the cap in cores: ``max_workers`` workers of the configured shape
    cap_cores: float | None = None
    #: node·s paid (:func:`paid_intervals`: a node from its first worker's request until its
    #: last went, once however many share it), and the part of it paid after the workflow ended
    node_s: float
    teardown_node_s: float = 0.0
    lost_work_core_s: float = 0.0
    #: the lost work by what cost it (``time limit``, ``preemption``, ``node failure``, ``other``)
    lost_by_cause: dict[str, float] = Field(default_factory=dict)
    #: tasks running on workers that went away (the master ran them again)
    tasks_lost: int = 0
    #: workers that went away by themselves (``lost``) or never started (``failed``)
    workers_lost: int = 0
    workers_failed: int = 0
    utilization: float | None = None
    scale_actions: int
    scale_up_actions: int
    scale_down_actions: int
    workers_requested: int
    workers_connected: int
    workers_drained: int
    workers_removed: int = 0
    peak_workers: int = 0
    latency_count: int = 0
    latency_median_s: float | None = None
    latency_p90_s: float | None = None
    latency_phases_median_s: dict[str, float] = {}
    categories: dict[str, CategoryModel] = {}
    #: the time–cost dial's last plan (``--deadline``/``--budget``), None in a run without one
    #: (and in a log from before plans were kept): its ask, and spent_node_s, HTA's own count
    plan: DialPlan | None = None


def paid_intervals(workers: list[WorkerRecord], node_cores: float | None = None,
                   nodes_gone: dict[str, float] | None = None) -> list[tuple[float, float | None, float]]:
    """When each node was paid for, and what share of it: (start, stop or None, share).

    A worker's node is paid from the moment it was asked for until it went. Workers that
    share a node (records naming it: the simulator's, Kubernetes') pay it once, from the
    first one bound to it (asked for, plus any wait for room: its ``connected`` record's
    ``room`` phase) to the last one gone; a worker that never got a node (named "") pays
    nothing. A worker with no node named is a node of its own, or, given ``node_cores``
    (the local backend's, where no worker names a node) and smaller than that node (HTA's
    learned shapes cut it into 1/k-node workers), its share of one by cores: two
    half-node workers for a minute pay one node·minute, as they would packed on one node.
    A node that outlived its last worker (kept empty: ``nodes_gone``, from node records)
    is paid until it went."""
    asked: dict[str, float] = {}
    gone: dict[str, float] = {}
    node_of: dict[str, str] = {}
    cores: dict[str, float] = {}
    for w in workers:
        if w.event == "requested":
            asked.setdefault(w.worker, w.t)
            if w.cores:
                cores.setdefault(w.worker, w.cores)
        elif w.event in ("drained", "removed", "stopped", "lost", "failed"):
            gone.setdefault(w.worker, w.t)
        if w.event == "connected" and "room" in w.phases and w.worker in asked:
            asked[w.worker] += w.phases["room"]
        if w.node is not None and (w.node or w.worker not in node_of):
            node_of[w.worker] = w.node  # the last node named: a pod that waited for room names it later
    spans: dict[str, tuple[float, float | None, float]] = {}
    for wid, t0 in asked.items():
        key, t1 = node_of.get(wid, "worker " + wid), gone.get(wid)
        if key == "":
            continue
        if key not in spans:
            share = min(1.0, cores[wid] / node_cores) if wid not in node_of and node_cores and wid in cores else 1.0
            spans[key] = (t0, t1, share)
            continue
        s0, s1, _ = spans[key]
        spans[key] = (min(s0, t0), None if s1 is None or t1 is None else max(s1, t1), 1.0)
    for key, t in (nodes_gone or {}).items():
        if key in spans:
            s0, s1, share = spans[key]
            if s1 is not None:
                spans[key] = (s0, max(s1, t), share)
    return list(spans.values())


def _peak_connected(workers: list[WorkerRecord]) -> int:
    """The most workers connected at once, by their events: a short run's worker may connect
    and leave between two observations, which would show none."""
    now = peak = 0
    on: set[str] = set()
    for w in sorted(workers, key=lambda w: w.t):
        if w.event == "connected" and w.worker not in on:
            on.add(w.worker)
            now += 1
            peak = max(peak, now)
        elif w.event in ("drained", "removed", "stopped", "lost") and w.worker in on:
            on.discard(w.worker)
            now -= 1
    return peak


def summarize(records: list, source: str | None = None) -> RunSummary:
    run = next((r for r in records if isinstance(r, RunRecord)), None)
    if run is None:
        raise ValueError("no run record")
    obs = [r for r in records if isinstance(r, ObservationRecord)]
    decisions = [r for r in records if isinstance(r, DecisionRecord)]
    workers = [r for r in records if isinstance(r, WorkerRecord)]
    cats = [r for r in records if isinstance(r, CategoriesRecord)]
    end = next((r for r in records if isinstance(r, EndRecord)), None)

    last_t = max([r.t for r in records if hasattr(r, "t")] or [0.0])
    t_end = end.t if end else last_t
    # the workflow's end: its runtime (since t = 0); an unfinished run has no teardown
    ended = min(end.runtime_s, t_end) if end is not None and end.exit_code == 0 else t_end
    samples = [CoreSample(o.t, o.supply_cores, o.in_use_cores, o.demand_cores, o.idle_cores) for o in obs]
    cap_cores = run.max_workers * run.worker_shape.cores if run.worker_shape.cores > 0 else None
    totals = integrate(samples, t_end, cap_cores)
    during, teardown = split_totals(samples, ended, t_end)

    # (a local worker is a share of a node; a pod with no node named never got one: whole)
    nodes_gone = {r.node: r.t for r in records if isinstance(r, NodeRecord)}
    intervals = paid_intervals(workers, run.worker_shape.cores if run.backend == "local" else None, nodes_gone)
    node_s = node_seconds(intervals, t_end)

    connected = [w for w in workers if w.event == "connected"]
    # the preparation latency as HTA's policy reads it, and its phases: workers that waited
    # for a node (pods bound at once beside others only when none did; LatencyStats)
    timed = [w for w in connected if w.latency_s is not None]
    measured = [w for w in timed if LatencyStats.waited_for_node(w.phases)] or timed
    lat = [w.latency_s for w in measured if w.latency_s is not None]
    phase_names = sorted({k for w in measured for k in w.phases})
    phases = {
        k: statistics.median([w.phases[k] for w in measured if k in w.phases]) for k in phase_names
    }
    gone_with_work = [w for w in workers if w.took_work]
    tasks_lost = sum(w.tasks_lost for w in gone_with_work)
    lost_core_s = sum(w.lost_work_core_s for w in gone_with_work)
    by_cause: dict[str, float] = {}
    for w in gone_with_work:
        if w.lost_work_core_s:
            key = w.cause or "other"
            by_cause[key] = round(by_cause.get(key, 0.0) + w.lost_work_core_s, 3)
    lost_total = end.lost_work_core_s if end and end.lost_work_core_s else lost_core_s
    # work thrown away is not useful: utilisation counts it out (waste keeps its one definition,
    # decision 0012: cores paid and idle)
    utilization = totals.utilization
    if utilization is not None and lost_total:
        utilization = max(0.0, (totals.in_use_core_s - lost_total) / totals.supply_core_s)
    ups = sum(1 for d in decisions if d.add > 0)
    downs = sum(1 for d in decisions if d.drain or d.remove)
    last_obs = obs[-1] if obs else None
    return RunSummary(
        source=source,
        workflow=run.workflow,
        workload=run.workload,
        policy=run.policy,
        backend=run.backend,
        seed=run.seed,
        simulated=run.simulated,
        complete=end is not None,
        exit_code=end.exit_code if end else None,
        runtime_s=end.runtime_s if end else t_end,
        tasks_done=end.tasks_done if end else (last_obs.tasks_done if last_obs else 0),
        tasks_done_before=end.tasks_done_before if end else 0,
        tasks_failed=end.tasks_failed if end else (last_obs.tasks_failed if last_obs else 0),
        tasks_retried=end.tasks_retried if end else tasks_lost,
        tasks_resumed=end.tasks_resumed if end else 0,
        waste_core_s=totals.waste_core_s,
        idle_waste_core_s=totals.idle_waste_core_s,
        run_waste_core_s=during.waste_core_s,
        teardown_waste_core_s=teardown.waste_core_s,
        shortage_core_s=totals.shortage_core_s,
        shortage_beyond_cap_core_s=totals.shortage_beyond_cap_core_s,
        max_workers=run.max_workers,
        cap_cores=cap_cores,
        node_s=node_s,
        # (every node·s past the workflow's end: its teardown, and holds that outlive the log)
        teardown_node_s=max(0.0, node_s - node_seconds_after(intervals, 0.0, ended)),
        lost_work_core_s=lost_total,
        lost_by_cause=by_cause,
        tasks_lost=tasks_lost,
        workers_lost=sum(1 for w in workers if w.event == "lost"),
        workers_failed=sum(1 for w in workers if w.event == "failed"),
        utilization=utilization,
        scale_actions=ups + downs,
        scale_up_actions=ups,
        scale_down_actions=downs,
        workers_requested=sum(1 for w in workers if w.event == "requested"),
        workers_connected=len(connected),
        workers_drained=sum(1 for w in workers if w.event == "drained"),
        workers_removed=sum(1 for w in workers if w.event == "removed"),
        peak_workers=max(max((o.workers for o in obs), default=0), _peak_connected(workers)),
        latency_count=len(lat),
        latency_median_s=statistics.median(lat) if lat else None,
        latency_p90_s=percentile(lat, 90) if lat else None,
        latency_phases_median_s=phases,
        categories=cats[-1].categories if cats else {},
        plan=next((d.plan for d in reversed(decisions) if d.plan is not None), None),
    )


def end_run(writer: ScalingLogWriter, *, t: float, stopped: list[WorkerRecord], categories: dict[str, CategoryModel],
            end: EndRecord, source: str | None = None) -> RunSummary:
    """Close a run's scaling log, the same way for a real run and a simulated one: the
    workers stopped at the end, what each category measured, the end record; then what
    the run did."""
    for e in stopped:
        writer.write(e)
    writer.write(CategoriesRecord(t=round(t, 3), categories=categories))
    writer.write(end)
    writer.close()
    return summarize(writer.records, source)
