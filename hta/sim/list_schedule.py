"""List schedules of a workload on one pool of cores (optionally fewer until a time).

References, not policies: how much of a run's distance from the runtime bound
(:mod:`hta.sim.oracle`) the master's dispatch order alone accounts for. Makeflow's submit
(``batch_job_wq_submit`` in CCTools' ``batch_job/src/batch_job_work_queue.c``) gives a
task its command, files, environment, category and resources, never a priority
(``work_queue_task_specify_priority``), so the master's own order decides, and no
autoscaling policy changes it. So:

- ``newest-first``: Work Queue's order under Makeflow, as the simulated master and a real
  one dispatch (:mod:`workqueue_bridge.dispatch`, measured in ``tests/test_sim_rules.py``):
  the task that became ready last first, and the tasks ready at once in the workflow's order;
- ``fifo``: first come, first served, each ready task in the order it became ready
  (ties: the workflow's order), what the simulator took the master's order to be until
  the real one was measured;
- ``critical-path``: the ready task with the longest tail first (its runtime plus its
  longest chain of descendants), the classic list-scheduling priority;
- ``category-path``: the same with every task's runtime read as its category's mean over
  the whole workflow: the classic priority on what a scheduler could know of a task
  before it runs (its category: HTA's learner and Work Queue's categories tell tasks
  apart by nothing else), granted the means in hindsight. Its distance from
  ``critical-path`` is what knowing each task's own runtime in advance buys:
  clairvoyance. Neither is an order any master or policy could choose, nor the best one
  (on SoyKB with 20 nodes ``category-path`` is slower than ``newest-first``).

Each starts every ready task that fits the free cores, in its order (a task that does
not fit is passed over, as Work Queue passes it over). The cores are one pool: a task
never waits for room on one node, no category's first tasks take a whole worker, and
the cores come exactly when the bound lets them. None is a bound nor an optimum:
list schedules are not monotone (critical path first is slower than first come, first
served on about 3 % of small random DAGs, and a simulated run can beat the master's own
order here), so read them as figures beside a run, not as parts of its time. Each task counts its runtime plus the
cluster's per-task overhead, as the bound does.
"""

from __future__ import annotations

import heapq
from statistics import fmean
from typing import Literal

from hta.sim.cluster import ClusterModel
from hta.sim.oracle import _durations
from hta.sim.workload import SimTask, Workload, topological_order

Order = Literal["newest-first", "fifo", "critical-path", "category-path"]


def tails(w: Workload, cluster: ClusterModel | None = None, by_category: bool = False) -> dict[str, float]:
    """Each task's tail: its runtime (plus the cluster's per-task overhead) and the longest
    chain of its descendants'; ``by_category`` reads every runtime as its category's mean
    over the whole workflow."""
    tasks = topological_order(w)
    dur = _durations(w, cluster)
    return _tails(tasks, _category_means(tasks, dur) if by_category else dur, _children(tasks))


def _children(tasks: list[SimTask]) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {}
    for t in tasks:
        for p in set(t.parents):
            children.setdefault(p, []).append(t.id)
    return children


def _category_means(tasks: list[SimTask], dur: dict[str, float]) -> dict[str, float]:
    """Each task's duration replaced by its category's mean."""
    by_cat: dict[str, list[float]] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(dur[t.id])
    mean = {c: fmean(v) for c, v in by_cat.items()}
    return {t.id: mean[t.category] for t in tasks}


def _tails(tasks: list[SimTask], dur: dict[str, float], children: dict[str, list[str]]) -> dict[str, float]:
    """``tasks`` in topological order."""
    tail: dict[str, float] = {}
    for t in reversed(tasks):
        tail[t.id] = dur[t.id] + max((tail[c] for c in children.get(t.id, ())), default=0.0)
    return tail


def list_schedule_s(w: Workload, cores: float, order: Order = "newest-first", cluster: ClusterModel | None = None, *,
                    start_cores: float | None = None, more_at_s: float = 0.0) -> float:
    """When the last task ends, every task started as soon as its parents have ended and
    it is first (by ``order``) among the ready tasks that fit the free cores. The pool has
    ``start_cores`` (default: all) until ``more_at_s``, ``cores`` from then on: the
    bound's own capacity over time, with ``more_at_s`` the soonest a bought node comes."""
    tasks = topological_order(w)
    if any(t.cores > cores + 1e-9 for t in tasks):
        raise ValueError(f"a task asks for more than the {cores:g} cores there are")
    dur = _durations(w, cluster)
    pos = {t.id: i for i, t in enumerate(w.tasks)}  # ties: the workflow's order, as the simulated master's
    need = {t.id: t.cores for t in tasks}
    parents_left = {t.id: len(set(t.parents)) for t in tasks}
    children = _children(tasks)
    tail: dict[str, float] = {}
    if order in ("critical-path", "category-path"):
        tail = _tails(tasks, _category_means(tasks, dur) if order == "category-path" else dur, children)

    def key(tid: str, ready_at: float) -> tuple[float, int]:
        if order == "newest-first":
            return -ready_at, pos[tid]
        return (ready_at, pos[tid]) if order == "fifo" else (-tail[tid], pos[tid])

    ready = [(*key(t.id, 0.0), t.id) for t in tasks if parents_left[t.id] == 0]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    first = float(cores) if start_cores is None or more_at_s <= 0 else min(float(start_cores), float(cores))
    free, now, more = first, 0.0, float(cores) - first  # ``more`` cores come at more_at_s
    while ready or running:
        passed = []
        while ready and free > 1e-9:
            item = heapq.heappop(ready)
            tid = item[-1]
            if need[tid] <= free + 1e-9:
                free -= need[tid]
                heapq.heappush(running, (now + dur[tid], tid))
            else:
                passed.append(item)
        for item in passed:
            heapq.heappush(ready, item)
        if more > 0 and (not running or more_at_s <= running[0][0]):
            now, free, more = max(now, more_at_s), free + more, 0.0
            continue
        now, tid = heapq.heappop(running)
        done = [tid]
        while running and running[0][0] <= now:
            done.append(heapq.heappop(running)[1])
        for tid in done:
            free += need[tid]
            for c in children.get(tid, ()):
                parents_left[c] -= 1
                if parents_left[c] == 0:
                    heapq.heappush(ready, (*key(c, now), c))
    return now
