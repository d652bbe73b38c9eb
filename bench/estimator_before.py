"""FROZEN COPY of ``hta/estimator.py`` as it was before the refactor into a
readable drain simulation on the shared dispatch rule (issue 12, sections 2-3).
Used only by ``bench/estimator.py`` (side-by-side timing) and
``tests/test_estimator_refactor.py`` (identical results): the reference the
new estimator is held to. Do not edit it and do not import it from ``hta``.

The original module docstring follows.

How many workers? The queue-drain estimator behind HTA's policy.

Given an :class:`~hta.model.Observation` and the preparation latency L, play
the next L seconds forward: running tasks finish at their category's measured
runtime, freed resources take waiting tasks first-in first-out (Work Queue's
rule: the first worker with room), pending workers arrive one L after they
were asked for, and — with lookahead — tasks the DAG releases join the queue
when their parents finish (for a barrier, when the slowest parent is likely
to finish: resources come back at the mean, a stage ends with its
stragglers). What still waits at the horizon is the shortage to
buy now (packed into the worker shape); workers idle now that the play never
needed are the waste to drain.

Unlike the thesis's Algorithm 1 (a loop over every second and every waiting
task, O(L·n)), this is event-driven and aggregated: waiting tasks are runs of
alike tasks (category, request), a dispatch starts k tasks at once and their
completion is one event. The cost grows with the number of distinct
completion times within the horizon, not with the number of tasks.

A category never measured has no runtime: its tasks are assumed to run past
the horizon (they hold their worker), which is what the first tasks of a new
stage do until one completes.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

from hta.model import CategoryModel, Observation, Resources, TaskGroup

#: a running task past its expected runtime is assumed to need this fraction more
OVERDUE_FRACTION = 0.1
#: a running task past this many times its category's p90 runtime is an outlier
OUTLIER_FACTOR = 2.0
#: lookahead's guess for a task of a never-measured category that has not started:
#: short (its dependents are expected soon, so workers are kept for them), while
#: for buying the same task is assumed to hold its worker through the horizon
UNKNOWN_RELEASE_PRIOR_S = 1.0


@dataclass
class EstimatorOptions:
    #: tasks the DAG releases within the horizon join the queue
    lookahead: bool = True
    #: do not buy workers that would arrive after the work they are bought for is gone
    tail_aware: bool = True
    #: a release waiting on many tasks comes when the slowest of them ends (the
    #: median of their maximum), not when the average one does (lookahead only)
    barrier_aware: bool = True


@dataclass
class Estimate:
    horizon_s: float
    #: waiting tasks left at the horizon, in queue order
    left_waiting: list[TaskGroup]
    #: workers idle now that the play never gave a task
    unused_idle: list[str]
    #: workers to buy (after packing and tail awareness, before max_workers)
    workers_needed: int
    #: workers the leftover tasks would fill, before tail awareness
    packed_need: int
    backlog_core_s: float = 0.0
    #: (time, tasks) the DAG is expected to release within the horizon
    releases: list[tuple[float, int]] = field(default_factory=list)

    @property
    def left_count(self) -> int:
        return sum(g.count for g in self.left_waiting)


@dataclass
class _Slot:
    id: str
    cap_c: float
    cap_m: float
    cap_d: float
    free_c: float
    free_m: float
    free_d: float
    idle_now: bool
    used: bool = False


@dataclass
class _Group:
    """Waiting (or released) tasks of one kind, with what lookahead needs:
    batches still running and when the group's last task finished."""

    id: str | None
    category: str
    count: int
    req: Resources
    whole: bool
    runtime: float | None
    model: CategoryModel | None = None
    inflight: int = 0
    blocked: bool = False  # a task of it will not finish within the horizon
    finished_at: float | None = None


def expected_remaining(elapsed: float, model: CategoryModel) -> float:
    """How much longer a running task of a measured category should take.

    Before its mean runtime: the rest of the mean. Past the mean: a little more
    (``OVERDUE_FRACTION`` of the mean) — the category's ordinary stragglers.
    Past ``OUTLIER_FACTOR`` × its p90 it is an outlier (a task much larger than
    its category's usual ones): it is expected to run about as long again as it
    already has, instead of looking "about to end" at every decision.
    """
    mean = model.runtime_mean_s or 0.0
    if elapsed < mean:
        return mean - elapsed
    p90 = model.runtime_p90_s or mean
    if elapsed <= OUTLIER_FACTOR * p90:
        return OVERDUE_FRACTION * mean
    return max(elapsed, OVERDUE_FRACTION * mean)


def batch_last_runtime(model: CategoryModel, k: int) -> float:
    """When the slowest of ``k`` alike tasks started together ends: the median
    of their maximum, Q(0.5^(1/k)) of the category's runtime distribution
    (never below the mean). A barrier (a reduce waiting on every align) is
    released by its slowest parent; the mean predicts it one straggler early."""
    mean = model.runtime_mean_s or 0.0
    if k <= 1:
        return mean
    return max(mean, model.runtime_quantile(0.5 ** (1.0 / k)) or mean)


def runtime_cdf(model: CategoryModel) -> Callable[[float], float]:
    """P(runtime ≤ x) for the category: the inverse of its
    :meth:`~hta.model.CategoryModel.runtime_quantile` (1 if never measured)."""
    pts = model.runtime_knots()
    if not pts:
        return lambda x: 1.0
    xs = [x for _, x in pts]

    def cdf(x: float) -> float:
        if x >= xs[-1]:
            return 1.0
        if x < xs[0]:
            return 0.0
        i = bisect.bisect_right(xs, x)
        (q0, x0), (q1, x1) = pts[i - 1], pts[i]
        return q0 + (q1 - q0) * (x - x0) / (x1 - x0) if x1 > x0 else q1

    return cdf


def barrier_wait(tasks: list[tuple[CategoryModel, float]]) -> float:
    """Seconds until the last of these running tasks (model, elapsed) ends,
    as the median of that maximum: the Δ where the product of each task's
    conditional P(done within Δ | still running after its elapsed time) is ½.
    A task past its category's longest measured runtime contributes its
    :func:`expected_remaining` as a certainty. Tasks are bucketed by category
    and whole second of elapsed time, so a barrier over thousands of tasks
    costs a few hundred distinct terms per step."""
    sure = 0.0
    buckets: dict[tuple[str, int], int] = {}
    by_name: dict[str, CategoryModel] = {}
    for model, elapsed in tasks:
        by_name[model.name] = model
        key = (model.name, int(elapsed))
        buckets[key] = buckets.get(key, 0) + 1
    cdfs = {name: runtime_cdf(model) for name, model in by_name.items()}
    live: list[tuple[Callable[[float], float], float, float, int]] = []
    hi = 0.0
    for (name, elapsed), n in buckets.items():
        model, cdf = by_name[name], cdfs[name]
        f0 = cdf(elapsed)
        if f0 >= 1.0:
            sure = max(sure, expected_remaining(elapsed, model))
        else:
            live.append((cdf, elapsed, f0, n))
            hi = max(hi, (model.runtime_quantile(1.0) or 0.0) - elapsed)
    if not live:
        return sure

    def p_all_done(d: float) -> float:
        p = 1.0
        for cdf, elapsed, f0, n in live:
            p *= ((cdf(elapsed + d) - f0) / (1.0 - f0)) ** n
            if p < 0.5:
                break
        return p

    lo = 0.0
    for _ in range(24):  # bisection: hi / 2**24, far below a second
        mid = (lo + hi) / 2
        if p_all_done(mid) >= 0.5:
            hi = mid
        else:
            lo = mid
    return max(sure, hi)


def _runtime(models: dict[str, CategoryModel], category: str) -> float | None:
    m = models.get(category)
    if m is None or not m.measured:
        return None
    return m.runtime_mean_s


INF = float("inf")


class QueueDrainEstimator:
    """The estimator. Stateless: ``estimate()`` is a pure function of its input."""

    def __init__(self, options: EstimatorOptions | None = None):
        self.options = options or EstimatorOptions()

    def estimate(self, obs: Observation, horizon_s: float) -> Estimate:
        now = obs.time
        end = now + horizon_s
        models = obs.categories
        shape = obs.worker_shape

        slots: list[_Slot] = []
        # events: (time, seq, kind, slot or group index, cores, memory, disk)
        # kind 0: resources freed on a slot (group index in the last place, or -1)
        # kind 1: an upcoming group is released
        events: list[tuple] = []
        seq = 0

        # connected workers: busy ones first, so idle ones stay idle unless needed
        workers = sorted(obs.workers, key=lambda w: (w.idle, w.id))
        index = {}
        for w in workers:
            free = w.free
            index[w.id] = len(slots)
            slots.append(_Slot(w.id, w.capacity.cores, w.capacity.memory_mb, w.capacity.disk_mb,
                               max(free.cores, 0), max(free.memory_mb, 0), max(free.disk_mb, 0), w.idle))

        # lookahead: the DAG's upcoming groups, released when all they wait for completes
        upcoming = obs.upcoming if self.options.lookahead else []
        # barriers: a group waiting on several running tasks is released when the
        # slowest ends; each such task's completion (for releases only) is put there
        barrier_at: dict[str, float] = {}
        if self.options.barrier_aware and upcoming:
            running = {f"task:{t.task_id}": t for t in obs.running if _runtime(models, t.category) is not None}
            for up in upcoming:
                parents = [running[ref] for ref in up.after if ref in running]
                if len(parents) < 2:
                    continue
                at = now + barrier_wait([(models[t.category], now - t.started_at) for t in parents])
                for t in parents:
                    ref = f"task:{t.task_id}"
                    barrier_at[ref] = max(barrier_at.get(ref, at), at)

        # running tasks free their allocation when their category's runtime is over
        finishing: dict[tuple[int, float], list[float]] = {}
        task_done: dict[str, float] = {}
        for t in obs.running:
            rt = _runtime(models, t.category)
            if rt is None:
                # never measured: it holds its resources through the horizon, and (for
                # lookahead only) is expected to run as long again as it has so far
                task_done[f"task:{t.task_id}"] = now + max(now - t.started_at, UNKNOWN_RELEASE_PRIOR_S)
                continue
            elapsed = now - t.started_at
            at = now + max(expected_remaining(elapsed, models[t.category]), 0.0)
            ref = f"task:{t.task_id}"
            task_done[ref] = max(at, barrier_at.get(ref, at))
            slot = index.get(t.worker or "")
            if at > end or slot is None:
                continue
            acc = finishing.setdefault((slot, round(at, 3)), [0.0, 0.0, 0.0])
            acc[0] += t.allocation.cores
            acc[1] += t.allocation.memory_mb
            acc[2] += t.allocation.disk_mb
        for (slot, at), (c, m, d) in finishing.items():
            events.append((at, seq, 0, slot, c, m, d, -1))
            seq += 1

        # pending workers arrive one latency after they were asked for
        for p in obs.pending:
            at = max(now, p.requested_at + horizon_s)
            if at > end:
                continue
            slots.append(_Slot(p.id, p.shape.cores, p.shape.memory_mb, p.shape.disk_mb, 0, 0, 0, False))
            events.append((at, seq, 0, len(slots) - 1, p.shape.cores, p.shape.memory_mb, p.shape.disk_mb, -1))
            seq += 1

        queue = [_Group(g.id, g.category, g.count, g.request, g.whole_worker, _runtime(models, g.category),
                        models.get(g.category)) for g in obs.waiting]

        waits: dict[str, list[int]] = {}  # ref → upcoming groups waiting for it
        missing: list[int] = []  # per upcoming group: refs not yet complete
        for k, up in enumerate(upcoming):
            missing.append(0)
            for ref in up.after:
                waits.setdefault(ref, []).append(k)
                missing[k] += 1
        released_at: list[float] = [INF] * len(upcoming)

        def complete(ref: str, t: float) -> None:
            """``ref`` completed at ``t``: release what waited only for it."""
            nonlocal seq
            for k in waits.get(ref, ()):
                missing[k] -= 1
                released_at[k] = t if released_at[k] == INF else max(released_at[k], t)
                if missing[k] == 0 and released_at[k] <= end:
                    heapq.heappush(events, (released_at[k], seq, 1, k, 0.0, 0.0, 0.0, -1))
                    seq += 1

        if upcoming:
            for ref, at in task_done.items():
                if at <= end and ref in waits:
                    complete(ref, at)
            for k, up in enumerate(upcoming):
                if not up.after:
                    heapq.heappush(events, (now, seq, 1, k, 0.0, 0.0, 0.0, -1))
                    seq += 1
        heapq.heapify(events)

        def group_progress(gi: int, t: float) -> None:
            g = queue[gi]
            if g.count == 0 and g.inflight == 0 and not g.blocked and g.finished_at is None and g.id:
                g.finished_at = t
                complete(g.id, t)

        head = 0
        releases: list[tuple[float, int]] = []

        def fill(i: int, t: float) -> None:
            nonlocal head, seq
            s = slots[i]
            while head < len(queue) and queue[head].count == 0:
                head += 1
            for gi in range(head, len(queue)):
                g = queue[gi]
                if g.count == 0:
                    continue
                if g.whole:
                    if s.free_c < s.cap_c - 1e-9 or s.free_m < s.cap_m - 1e-9:
                        continue
                    k, c, m, d = 1, s.cap_c, s.cap_m, s.cap_d
                else:
                    c, m, d = g.req.cores, g.req.memory_mb, g.req.disk_mb
                    k = g.count
                    if c > 0:
                        k = min(k, math.floor(s.free_c / c + 1e-9))
                    if m > 0:
                        k = min(k, math.floor(s.free_m / m + 1e-9))
                    if d > 0:
                        k = min(k, math.floor(s.free_d / d + 1e-9))
                    if c <= 0 and m <= 0 and d <= 0:
                        k = 0
                if k <= 0:
                    continue
                g.count -= k
                s.free_c -= k * c
                s.free_m -= k * m
                s.free_d -= k * d
                s.used = True
                if g.runtime is None:
                    if upcoming and t + UNKNOWN_RELEASE_PRIOR_S <= end:
                        # resources stay held; only the dependents' release is predicted
                        g.inflight += 1
                        heapq.heappush(events, (t + UNKNOWN_RELEASE_PRIOR_S, seq, 2, i, 0.0, 0.0, 0.0, gi))
                        seq += 1
                    else:
                        g.blocked = True
                elif t + g.runtime > end:
                    g.blocked = True
                else:
                    last = g.runtime
                    if upcoming and self.options.barrier_aware and g.model is not None:
                        last = batch_last_runtime(g.model, k)
                    # resources come back at the mean; the batch counts as done when its last task is
                    later = last > g.runtime
                    heapq.heappush(events, (t + g.runtime, seq, 0, i, k * c, k * m, k * d, -1 if later else gi))
                    seq += 1
                    if not later:
                        g.inflight += 1
                    elif t + last <= end:
                        g.inflight += 1
                        heapq.heappush(events, (t + last, seq, 2, i, 0.0, 0.0, 0.0, gi))
                        seq += 1
                    else:
                        g.blocked = True
                if s.free_c <= 1e-9:
                    break

        for i in range(len(workers)):
            fill(i, now)

        while events:
            at, _, kind, i, c, m, d, gi = heapq.heappop(events)
            if at > end:
                break
            if kind == 1:
                up = upcoming[i]
                releases.append((at, up.count))
                queue.append(_Group(up.id, up.category, up.count, up.request, up.whole_worker,
                                    _runtime(models, up.category), models.get(up.category)))
                for j in range(len(slots)):
                    if slots[j].free_c > 1e-9:
                        fill(j, at)
                continue
            if kind == 2:  # a batch counts as done, for its dependents only (its resources are not freed here)
                queue[gi].inflight -= 1
                group_progress(gi, at)
                continue
            s = slots[i]
            s.free_c += c
            s.free_m += m
            s.free_d += d
            if gi >= 0:
                queue[gi].inflight -= 1
                group_progress(gi, at)
            fill(i, at)

        left = [TaskGroup(category=g.category, count=g.count, request=g.req, id=g.id) for g in queue if g.count > 0]
        unused = [s.id for s in slots[: len(workers)] if s.idle_now and not s.used]
        packed = self._pack(left, shape)
        backlog = sum(
            g.count * (shape.cores if g.whole_worker else g.request.cores) * (_runtime(models, g.category) or 0.0)
            for g in left
        )
        needed = packed
        if self.options.tail_aware and packed > 0:
            needed = min(packed, self._tail_cap(obs, left, backlog))
        return Estimate(horizon_s, left, unused, needed, packed, backlog, releases)

    @staticmethod
    def _pack(left: list[TaskGroup], shape: Resources) -> int:
        """Workers of ``shape`` that hold the leftover tasks (fractional bin packing, rounded up)."""
        need = 0.0
        for g in left:
            per = 1 if g.whole_worker else g.request.count_in(shape)
            if per <= 0:
                continue  # never fits a worker of this shape: buying does not help
            need += g.count / per
        return math.ceil(need - 1e-9)

    @staticmethod
    def _tail_cap(obs: Observation, left: list[TaskGroup], backlog_core_s: float) -> int:
        """Buy no more workers than the backlog keeps busy for one task runtime.

        After the horizon the backlog B (core·s) drains on the capacity C that
        exists or is coming; a new worker of c cores earns its keep only if the
        drain still lasts at least one task runtime r once it is there:
        B / (C + n·c) ≥ r  ⇔  n ≤ (B/r − C)/c (rounded up: tasks are whole).
        Categories never measured have no runtime, so no cap applies to them.
        """
        if any(_runtime(obs.categories, g.category) is None for g in left):
            return 10**9
        tasks = sum(g.count for g in left)
        if tasks == 0 or backlog_core_s <= 0:
            return 0
        runtimes = [(_runtime(obs.categories, g.category) or 0.0, g.count) for g in left]
        r = sum(rt * n for rt, n in runtimes) / tasks
        capacity = sum(w.capacity.cores for w in obs.workers) + sum(p.shape.cores for p in obs.pending)
        c = obs.worker_shape.cores or 1.0
        return max(0, math.ceil((backlog_core_s / r - capacity) / c - 1e-9))
