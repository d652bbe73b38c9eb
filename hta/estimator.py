"""How many workers? The queue-drain estimator behind HTA's policy.

Given an :class:`~hta.model.Observation` and the preparation latency L, play
the next L seconds forward: running tasks finish at their category's measured
runtime, freed resources take waiting tasks newest first (the master's order,
:mod:`workqueue_bridge.dispatch`: what a completion releases before older tasks;
each to the first worker with room), pending workers arrive one L after they
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

How many tasks of a group a worker can start is Work Queue's placement rule,
written once in :mod:`workqueue_bridge.dispatch` (:func:`fit_count`) and shared
with the simulator, so the estimate and the world it is tested in cannot
disagree about what fits.

A category never measured has no runtime: its tasks are assumed to run past
the horizon (they hold their worker), which is what the first tasks of a new
stage do until one completes.

Reading order: :class:`QueueDrainEstimator` runs one :class:`_DrainPlay` — the
state of the play (slots, queue, an event heap) and one method per step — then
packs what is left into workers to buy. The play's events are the four named
tuples :class:`SlotFrees`, :class:`WorkerArrives`, :class:`TaskReleased` and
:class:`BatchDone`.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal, NamedTuple, Union, assert_never

from hta.model import CategoryModel, Observation, Resources, TaskGroup, UpcomingTasks
from workqueue_bridge.dispatch import EPS, allocated, fit_count

#: a running task past its expected runtime is assumed to need this fraction more
OVERDUE_FRACTION = 0.1
#: a running task past this many times its category's p90 runtime is an outlier
OUTLIER_FACTOR = 2.0
#: a category's measurements are its short tasks (:func:`outrun_categories`) once as
#: many of its running tasks have run this many times its longest measured runtime as
#: were measured; a stage's tasks started together, just past the one measured, are not
OUTRUN_MARGIN = 1.2
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
    #: tail awareness: a worker is bought only if the backlog keeps it busy for this many
    #: mean task runtimes once it is there (1: the thesis's rule; more buys fewer workers,
    #: a cheaper and slower run; it must be > 0 — turn ``tail_aware`` off for no cap)
    busy_runtimes: float = 1.0
    #: tail awareness: ``busy_runtimes`` asks no more than this many preparation latencies
    #: of busy time, and never less than one task runtime (0: no such bound). The latency
    #: is what a worker pays before it works, so b latencies of work keep it at most
    #: 1/(b+1) of its bill whatever its tasks' length; k runtimes of a stage of long tasks
    #: ask far more, and a cost setting ran them in rounds to save a latency per worker.
    #: Measured tasks only: never-measured ones still get a worker per ``unmeasured_rounds``
    #: of them
    busy_latencies: float = 0.0
    #: the task runtime ρ that ``busy_latencies`` counts rounds in: ``mean`` (r) or ``p90``
    #: (each waiting category's measured 90th percentile, at least its mean, weighted by its
    #: tasks). The busy time asked is r × rounds, rounds = b·L / ρ kept within [1, k].
    #: Why: while a stage runs, its measurements are its first completions, its shortest:
    #: SoyKB's 410 ``haplotype_caller`` tasks (true mean 311 s) had a measured mean of
    #: 90–135 s from 1,100 to 1,300 s, so 2 latencies (328 s) asked each new worker for
    #: about three rounds and ``hta-cost`` bought nothing while 100–188 tasks waited;
    #: counted in their 90th percentile (165–275 s), 1.2–2 rounds (docs/pareto.md,
    #: fifteenth run). ``busy_runtimes`` alone needs no such care:
    #: it asks k·r of a worker for a backlog counted as tasks × r, so r cancels out and a
    #: mean that is too short buys as many workers as the true one would; b·L does not
    #: scale with r
    busy_latencies_runtime: Literal["mean", "p90"] = "mean"
    #: a never-measured category's tasks are expected to run at least as long as its
    #: longest-running task already has (off: a task just started is expected to end in
    #: about a second — the thesis-era prior, which kept idle workers for releases that
    #: kept not coming: 82 % of HTA's waste on WfCommons Epigenomics)
    unmeasured_floor: bool = True
    #: tail awareness: never-measured tasks left at the horizon get one worker per this
    #: many (at least ``busy_runtimes``; measured ones are capped on their own). Each such
    #: task takes a whole worker, but only until one of its category ends: then the rest
    #: are packed by what it used, so a worker bought for two runs the second, and its
    #: category's later ones beside it
    unmeasured_per_worker: float = 1.0
    #: in a category whose measurements are its short tasks (:func:`outrun_categories`), a
    #: running task that has run longer than any measured one is expected to run as long
    #: again (see :func:`expected_remaining`); off: only past ``OUTLIER_FACTOR`` × its p90
    overdue_past_longest: bool = True
    #: whole-worker tasks the DAG releases within the first latency are offered to idle
    #: workers before busy ones running a task (not one of the release's parents) of a
    #: category with a task running longer than ``OUTRUN_MARGIN`` × its longest measured
    #: runtime (see :class:`_DrainPlay`); off: the usual slot order, busy workers first
    release_to_idle_first: bool = True
    #: the queue is played newest first, as the master dispatches (:mod:`workqueue_bridge.dispatch`);
    #: off: oldest first, what the estimator took the master's order to be until the real one
    #: was measured (the thirty-second session)
    newest_first: bool = True

    @property
    def unmeasured_rounds(self) -> float:
        """u: how many never-measured tasks in a row a worker bought for them is to run."""
        return max(self.busy_runtimes, self.unmeasured_per_worker)


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
    #: (cores, seconds) measured tasks running at the horizon still hold after it: the
    #: capacity they hold is not free to drain the leftover tasks until they end
    inflight: list[tuple[float, float]] = field(default_factory=list)

    @property
    def inflight_core_s(self) -> float:
        return sum(c * s for c, s in self.inflight)

    @property
    def left_count(self) -> int:
        return sum(g.count for g in self.left_waiting)


def expected_remaining(elapsed: float, model: CategoryModel, past_longest: bool = False) -> float:
    """How much longer a running task of a measured category should take.

    Before its mean runtime: the rest of the mean. Past the mean: a little more
    (``OVERDUE_FRACTION`` of the mean) — the category's ordinary stragglers.
    Past ``OUTLIER_FACTOR`` × its p90 it is an outlier (a task much larger than
    its category's usual ones): it is expected to run about as long again as it
    already has, instead of looking "about to end" at every decision.

    ``past_longest`` (for a category in :func:`outrun_categories`): so is a task that
    has run longer than any of its category has. Nothing measured says how much is
    left, and the measurements are the category's first completions, its shortest:
    on SoyKB 13 genotype tasks ran past the 5 measured (93–106 s; the category's true
    mean is 491 s), each expected to end within 10 s at every decision for 436 s,
    while the workflow's one 3,786 s task waited for a core that "was about to free".
    """
    mean = model.runtime_mean_s or 0.0
    if elapsed < mean:
        return mean - elapsed
    p90 = model.runtime_p90_s or mean
    ordinary = OUTLIER_FACTOR * p90
    if past_longest and model.runtime_max_s is not None:
        ordinary = min(ordinary, model.runtime_max_s)
    if elapsed <= ordinary:
        return OVERDUE_FRACTION * mean
    return max(elapsed, OVERDUE_FRACTION * mean)


def past_outrun_margin(model: CategoryModel, elapsed: float) -> bool:
    """A running task of ``model``'s category has run longer than ``OUTRUN_MARGIN`` × the
    longest runtime measured in it (a category with no longest: never)."""
    return model.runtime_max_s is not None and elapsed > OUTRUN_MARGIN * model.runtime_max_s


def outrun_categories(obs: Observation) -> frozenset[str]:
    """Measured categories whose measurements are their short tasks: at least as many of
    their running tasks have run ``OUTRUN_MARGIN`` × the longest measured runtime as were
    measured (the tasks still running outnumber the measured ones, and each has run a
    fifth as long again as any of those did).

    Not a category with many measurements whose last stragglers run a little past the
    longest: BLAST's align has 180 measured, 350 s at the longest, and a few running
    at 351–353 s are about to end. Counted as running as long again, the barrier they
    gate looked 350 s away, the workers waiting for it were drained, and the run took
    1,606 s instead of 1,348. Nor a stage whose tasks all started together and have
    just passed its first completion (39 running at 302 s, one measured at 300 s): they
    are that task's peers, about to end, until they run a fifth as long again (1.5 ×
    cost SoyKB uncapped 100 s, one seed 500 s: the rule fired too late there)."""
    past: dict[str, int] = {}
    for t in obs.running:
        m = obs.categories.get(t.category)
        if m is not None and m.measured and past_outrun_margin(m, obs.time - t.started_at):
            past[t.category] = past.get(t.category, 0) + 1
    return frozenset(c for c, n in past.items() if n >= obs.categories[c].samples)


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
    return lambda x: _cdf_at(xs, pts, x)


def _cdf_at(xs: list[float], pts: list[tuple[float, float]], x: float) -> float:
    """:func:`runtime_cdf` at ``x`` on the knots (``xs``: their runtimes), linear between them."""
    if x >= xs[-1]:
        return 1.0
    if x < xs[0]:
        return 0.0
    i = bisect.bisect_right(xs, x)
    (q0, x0), (q1, x1) = pts[i - 1], pts[i]
    return q0 + (q1 - q0) * (x - x0) / (x1 - x0) if x1 > x0 else q1


def barrier_wait(tasks: list[tuple[CategoryModel, float]]) -> float:
    """Seconds until the last of these running tasks (model, elapsed) ends,
    as the median of that maximum: the Δ where the product of each task's
    conditional P(done within Δ | still running after its elapsed time) is ½.
    A task past its category's longest measured runtime contributes its
    :func:`expected_remaining` as a certainty. Tasks are bucketed by category
    and whole second of elapsed time, so a barrier over thousands of tasks
    costs a few hundred distinct terms per step; past the longest measured, a
    bucket stands for its furthest-run task (an outlier's remaining time is its
    elapsed time: the whole second would cut up to a second off it).

    A parent in an outrun category (:func:`outrun_categories`) is not made
    longer here: it holds back its own dependents through its own expected end,
    while a barrier's time counts for all of its parents' dependents."""
    sure = 0.0
    buckets: dict[tuple[str, int], list[float]] = {}  # (category, whole second) → [count, furthest]
    by_name: dict[str, CategoryModel] = {}
    for model, elapsed in tasks:
        by_name[model.name] = model
        b = buckets.setdefault((model.name, int(elapsed)), [0, elapsed])
        b[0] += 1
        b[1] = max(b[1], elapsed)
    # per category: its knots' runtimes, its knots, its longest runtime
    knots = {}
    for name, model in by_name.items():
        pts = model.runtime_knots()
        knots[name] = ([x for _, x in pts], pts, model.runtime_quantile(1.0) or 0.0)
    # (knot runtimes, knots, elapsed, P(done by elapsed), P(not), tasks) per bucket still running
    live: list[tuple[list[float], list[tuple[float, float]], float, float, float, int]] = []
    hi = 0.0
    for (name, elapsed), (n, furthest) in buckets.items():
        xs, pts, longest = knots[name]
        f0 = _cdf_at(xs, pts, elapsed) if pts else 1.0
        if f0 >= 1.0:
            sure = max(sure, expected_remaining(furthest, by_name[name]))
        else:
            live.append((xs, pts, elapsed, f0, 1.0 - f0, int(n)))
            hi = max(hi, longest - elapsed)
    if not live:
        return sure

    def p_all_done(d: float) -> float:
        p = 1.0
        for xs, pts, elapsed, f0, not_f0, n in live:
            p *= ((_cdf_at(xs, pts, elapsed + d) - f0) / not_f0) ** n
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


def _per_worker(g: TaskGroup, shape: Resources) -> int:
    """How many of the group's tasks a worker of ``shape`` holds at once (a whole-worker
    task: one; 0: none ever fits)."""
    return _fit_in(g.request, shape)


def _fit_in(request: Resources, shape: Resources) -> int:
    """:func:`_per_worker` for a request (one that declares nothing: a whole worker)."""
    return 1 if request.declares_nothing else request.count_in(shape)


def _runtime(models: dict[str, CategoryModel], category: str) -> float | None:
    m = models.get(category)
    if m is None or not m.measured:
        return None
    return m.runtime_mean_s


def _p90_runtime(models: dict[str, CategoryModel], category: str, mean_s: float) -> float:
    """A measured category's 90th-percentile runtime (never under its mean)."""
    m = models.get(category)
    p90 = m.runtime_p90_s if m is not None else None
    return max(mean_s, p90 or mean_s)


INF = float("inf")
_NO_LIMIT = 2**62  # fit_count's limit when only the resources should decide


# --- the play's events ------------------------------------------------------
# Kept in a heap as (at, sequence, event): ties in time go in the order the
# events were scheduled, so the play is deterministic.


class SlotFrees(NamedTuple):
    """Resources come back to a slot: running tasks (or a batch started by the
    play) end. ``group``: the queue group whose batch this completes, for its
    dependents (None when the batch's completion is a separate
    :class:`BatchDone`, or for tasks running before the play)."""

    at: float
    slot: int
    cores: float
    memory_mb: float
    disk_mb: float
    group: int | None


class WorkerArrives(NamedTuple):
    """A pending worker connects, all of it free."""

    at: float
    slot: int


class TaskReleased(NamedTuple):
    """Lookahead: the DAG releases an upcoming group (everything it waits for is done)."""

    at: float
    upcoming_index: int


class BatchDone(NamedTuple):
    """A batch counts as done for its dependents, without freeing anything: the
    slowest of a batch (a barrier's last parent), or a never-measured task's
    guessed end (:data:`UNKNOWN_RELEASE_PRIOR_S`) while it keeps its worker."""

    at: float
    group: int


Event = Union[SlotFrees, WorkerArrives, TaskReleased, BatchDone]


# --- the play's state -------------------------------------------------------


@dataclass(slots=True)
class _Room:
    """A slot's free resources, updated in place. It reads like a
    :class:`~hta.model.Resources` for :func:`fit_count`, without building a
    validated model at every dispatch."""

    cores: float
    memory_mb: float
    disk_mb: float


@dataclass(slots=True)
class _Slot:
    """A worker in the play: connected now, or pending (free from its arrival)."""

    id: str
    capacity: Resources
    capacity_key: int  # equal capacities, equal keys (see :meth:`_DrainPlay._fit`)
    free: _Room
    idle_now: bool
    used: bool = False
    #: given a task that no never-measured one comes before (see ``_Group.after_unmeasured``)
    used_measured: bool = False


@dataclass(slots=True)
class _Group:
    """Waiting (or released) tasks of one kind, with what lookahead needs:
    batches still running and when the group's last task finished."""

    id: str | None
    category: str
    count: int
    request: Resources
    request_key: int  # equal requests, equal keys (see :meth:`_DrainPlay._fit`)
    runtime: float | None
    model: CategoryModel | None = None
    inflight: int = 0
    #: released after a never-measured task or batch ends (directly, or through groups
    #: released after one): when that is, the play guesses, from how long such tasks have
    #: run or from a short prior
    after_unmeasured: bool = False
    blocked: bool = False  # a task of it will not finish within the horizon
    finished_at: float | None = None
    #: never-measured tasks of it the play started (see :meth:`QueueDrainEstimator._tail_cap`)
    started_unmeasured: int = 0


class _BarrierMemo:
    """The barrier times (:meth:`_DrainPlay._barrier_times`) of the last observation played.

    One decision plays the same observation several times (HTA's policy plays it once to
    choose a worker shape and again with that shape; draining plays it to the hold's
    horizon), and barrier times depend only on what the plays share: the running tasks,
    the DAG's upcoming groups, the learned categories and the time. A copy of an
    observation with another worker shape (``model_copy``) holds the same lists, so they
    are compared by identity and the memo keeps them alive: an id is never reused while
    held. Measured: the barriers' bisection was 29 % of a 3k-task simulation, computed
    twice per decision."""

    def __init__(self) -> None:
        self._key: tuple[object, object, object, float] | None = None
        self._value: dict[str, float] = {}

    def get(self, obs: Observation, compute: Callable[[], dict[str, float]]) -> dict[str, float]:
        key = (obs.running, obs.upcoming, obs.categories, obs.time)
        held = self._key
        if held is None or any(a is not b for a, b in zip(held[:3], key[:3])) or held[3] != key[3]:
            self._value = compute()
            self._key = key
        return self._value


class _DrainPlay:
    """One play of the queue from ``obs.time`` to the horizon: call :meth:`run`
    once, then read :meth:`left_waiting`, :meth:`unused_idle` and ``releases``.

    Slots are the connected workers (busy ones first, so idle ones stay idle
    unless the queue needs them), then the pending workers that arrive within
    the horizon. The queue is the waiting groups in dispatch order; lookahead
    appends upcoming groups as the DAG releases them.

    Whole-worker tasks (undeclared tasks of a never-measured category, or any
    undeclared task when Work Queue does not size tasks) that the DAG releases
    within the first latency are offered to the busy workers the play trusts,
    then to the workers idle now, and only then to doubtful busy workers: those
    running a task of a category with a task running longer than
    ``OUTRUN_MARGIN`` × its longest measured runtime, unless that task is one the
    release waits for directly (the release comes only when it ends). That
    category's measurements fall short (they are its first completions, its
    shortest), and a busy worker is whole only if every task on it ends by its
    forecast. A drain that trusted such a forecast left a task
    waiting a latency for a worker bought back (SoyKB, seed 0: the merge task
    waited 266 s); an idle worker's room is known. Trusting no busy worker at
    all kept idle workers through every stage change (Cycles uncapped: +7 %
    node·s at the same runtime), and offering later releases to idle workers
    first kept them through the hold's long play (SoyKB uncapped: +9 %).
    """

    def __init__(self, obs: Observation, horizon_s: float, options: EstimatorOptions,
                 latency_s: float | None = None, until_idle_used: bool = False,
                 measured_only: bool = False, barrier_memo: _BarrierMemo | None = None) -> None:
        self.obs = obs
        self.barrier_memo = barrier_memo
        #: :meth:`unused_idle` counts as used only a worker given a task that no never-measured
        #: one comes before (``_Group.after_unmeasured``)
        self.measured_only = measured_only
        #: stop once every worker idle now has been given a task (all a caller of
        #: :meth:`unused_idle` alone wants to know: a long play need not go on)
        self.until_idle_used = until_idle_used
        self._idle_left = 0
        self.options = options
        self.horizon_s = horizon_s
        #: how long after it was asked for a pending worker connects (the horizon, unless
        #: the play looks further than one latency ahead)
        self.latency_s = horizon_s if latency_s is None else latency_s
        self.now = obs.time
        self.end = obs.time + horizon_s
        self.models = obs.categories
        #: mean runtime of each measured category (None: never measured; .get: unknown)
        self.runtimes: dict[str, float | None] = {name: _runtime(self.models, name) for name in self.models}
        self.upcoming: list[UpcomingTasks] = obs.upcoming if options.lookahead else []
        self.slots: list[_Slot] = []
        self.connected = 0  # slots[:connected] are the workers connected now
        self.queue: list[_Group] = []
        #: indices of the queue's groups, oldest first as the master would have been given them
        #: (fill() reads it newest first); a group that has emptied stays until the end it
        #: drains from reaches it, or until more than half of them are empty (:meth:`_prune`)
        self.live: list[int] = []
        self._head = 0  # oldest first (newest_first off): live[:_head] has all emptied
        self._dead = 0  # emptied groups still in live[_head:]
        #: releases scheduled, by time, not handled yet: a slot freed at such a time waits for
        #: them, since the master gives what a completion releases before older tasks
        self._releases_due: dict[float, int] = {}
        #: the releases of the time now handled, as their groups' indices (one batch: makeflow
        #: submits it last-in-the-file first, so the first in the file is the newest)
        self._batch_at = -INF
        self._batch: list[int] = []
        self.releases: list[tuple[float, int]] = []
        #: (cores, seconds) measured tasks still hold past the horizon (see Estimate.inflight)
        self.inflight: list[tuple[float, float]] = []
        #: a never-measured category's tasks run at least as long as the longest any of
        #: its running tasks has run so far (none has ended: it has no measurement)
        self.unmeasured_elapsed: dict[str, float] = {}
        #: categories whose running tasks past the longest measured run as long again
        self.outrun = outrun_categories(obs) if options.overdue_past_longest else frozenset()
        for t in obs.running if options.unmeasured_floor else ():
            if self.runtimes.get(t.category) is None:
                e = self.now - t.started_at
                self.unmeasured_elapsed[t.category] = max(self.unmeasured_elapsed.get(t.category, 0.0), e)
        # fit_count's answers, by (request, capacity, free cores, memory, disk): see _fit
        self._keys: dict[tuple[float, float, float], int] = {}
        self._fits: dict[tuple[int, int, float, float, float], int] = {}
        # what a task of a request is given on a capacity (``allocated``), by their keys
        self._allocations: dict[tuple[int, int], Resources] = {}
        # batch_last_runtime by (category, tasks in the batch): the same few batches recur
        self._last_runtimes: dict[tuple[str, int], float] = {}
        self._events: list[tuple[float, int, Event]] = []
        self._seq = 0
        # lookahead: upcoming groups waiting for a ref, refs each still misses, release times
        self._waiting_for: dict[str, list[int]] = {}
        self._missing: list[int] = []
        self._released_at: list[float] = []
        #: refs (tasks, groups) that are or come after a never-measured task, and the upcoming
        #: groups released after one
        self._unmeasured_refs: set[str] = set()
        self._up_after_unmeasured: list[bool] = []
        #: busy connected workers → their doubtful tasks, of a category with a task running
        #: longer than ``OUTRUN_MARGIN`` × its longest measured (see the class docstring)
        self._doubtful: dict[int, list[str]] = {}

    # -- setting up --------------------------------------------------------

    def run(self) -> None:
        """Set up slots, queue and events, start what fits now, play to the horizon.
        The setup order is the order events are scheduled in, so it decides ties."""
        index = self._add_connected_workers()
        self._idle_left = sum(1 for s in self.slots if s.idle_now)
        task_done = self._schedule_running_tasks(index, self._barrier_times())
        self._add_pending_workers()
        self.queue = [self._group(g.id, g.category, g.count, g.request) for g in self.obs.waiting]
        self.live = [gi for gi, g in enumerate(self.queue) if g.count > 0]
        self._index_upcoming()
        self._release_ready(task_done)
        if not self._waits_for_release(self.now):
            for i in range(self.connected):
                self.fill(i, self.now)
        self._play()

    def _push(self, event: Event) -> None:
        heapq.heappush(self._events, (event.at, self._seq, event))
        self._seq += 1

    def _push_release(self, event: TaskReleased) -> None:
        """:meth:`_push`, counted among the releases due (see :meth:`_waits_for_release`)."""
        self._push(event)
        self._releases_due[event.at] = self._releases_due.get(event.at, 0) + 1

    def _waits_for_release(self, at: float) -> bool:
        """Whether what frees up at ``at`` waits for groups released at ``at`` (newest first:
        they come before every older waiting task; their handler fills every slot with room)."""
        return self.options.newest_first and self._releases_due.get(at, 0) > 0

    def _group(self, gid: str | None, category: str, count: int, request: Resources) -> _Group:
        return _Group(gid, category, count, request, self._key(request), self.runtimes.get(category),
                      self.models.get(category))

    def _key(self, amounts: Resources) -> int:
        """A small int per distinct (cores, memory, disk), for :meth:`_fit`'s memo."""
        return self._keys.setdefault((amounts.cores, amounts.memory_mb, amounts.disk_mb), len(self._keys))

    def _add_connected_workers(self) -> dict[str, int]:
        """One slot per connected worker, busy ones first; returns worker id → slot."""
        index: dict[str, int] = {}
        for w in sorted(self.obs.workers, key=lambda w: (w.idle, w.id)):
            cap, used = w.capacity, w.in_use
            # what w.free computes, without building a Resources per worker
            free = _Room(max(cap.cores - used.cores, 0), max(cap.memory_mb - used.memory_mb, 0),
                         max(cap.disk_mb - used.disk_mb, 0))
            index[w.id] = len(self.slots)
            self.slots.append(_Slot(w.id, cap, self._key(cap), free, w.idle))
        self.connected = len(self.slots)
        return index

    def _barrier_times(self) -> dict[str, float]:
        """Lookahead, barrier-aware: a group waiting on several running tasks is
        released when the slowest ends (:func:`barrier_wait`), so each of those
        tasks counts as done then — for releases only: its resources still come
        back at its own expected end. Returns task ref → that time (read only: plays
        of one observation share it, see :class:`_BarrierMemo`)."""
        if not (self.options.barrier_aware and self.upcoming):
            return {}
        if self.barrier_memo is not None:
            return self.barrier_memo.get(self.obs, self._compute_barrier_times)
        return self._compute_barrier_times()

    def _compute_barrier_times(self) -> dict[str, float]:
        models, now = self.models, self.now
        running = {f"task:{t.task_id}": t for t in self.obs.running if self.runtimes.get(t.category) is not None}
        barrier_at: dict[str, float] = {}
        for up in self.upcoming:
            parents = [running[ref] for ref in up.after if ref in running]
            if len(parents) < 2:
                continue
            at = now + barrier_wait([(models[t.category], now - t.started_at) for t in parents])
            for t in parents:
                ref = f"task:{t.task_id}"
                barrier_at[ref] = max(barrier_at.get(ref, at), at)
        return barrier_at

    def _schedule_running_tasks(self, index: dict[str, int], barrier_at: dict[str, float]) -> dict[str, float]:
        """Running tasks free their allocation when their category's runtime is
        over: one :class:`SlotFrees` per slot and millisecond, however many tasks
        end then. Returns task ref → when it counts as done for its dependents."""
        models, runtimes, now, end = self.models, self.runtimes, self.now, self.end
        finishing: dict[tuple[int, float], list[float]] = {}
        task_done: dict[str, float] = {}
        # (slot, ref, category) of each measured running task on a busy worker; categories
        # with a task running longer than OUTRUN_MARGIN × the longest measured (their
        # measurements fall short: their tasks are doubtful)
        slot_tasks: list[tuple[int, str, str]] = []
        doubtful_categories: set[str] = set()
        for t in self.obs.running:
            ref = f"task:{t.task_id}"
            if runtimes.get(t.category) is None:
                # never measured: it holds its resources through the horizon, and (for
                # lookahead only) is expected to run as long again as it has so far, and
                # at least as long as its category's longest-running task already has
                e = now - t.started_at
                self._unmeasured_refs.add(ref)
                task_done[ref] = now + max(e, self.unmeasured_elapsed.get(t.category, 0.0) - e, UNKNOWN_RELEASE_PRIOR_S)
                continue
            model, elapsed = models[t.category], now - t.started_at
            at = now + max(expected_remaining(elapsed, model, t.category in self.outrun), 0.0)
            task_done[ref] = max(at, barrier_at.get(ref, at))
            if past_outrun_margin(model, elapsed):
                doubtful_categories.add(t.category)
            slot = index.get(t.worker or "")
            if slot is None:
                continue
            if self.options.release_to_idle_first and not self.slots[slot].idle_now:
                slot_tasks.append((slot, ref, t.category))
            if at > end:
                self.inflight.append((t.allocation.cores, at - end))
                continue
            acc, alloc = finishing.setdefault((slot, round(at, 3)), [0.0, 0.0, 0.0]), t.allocation
            acc[0] += alloc.cores
            acc[1] += alloc.memory_mb
            acc[2] += alloc.disk_mb
        for (slot, at), (c, m, d) in finishing.items():
            self._push(SlotFrees(at, slot, c, m, d, None))
        if doubtful_categories:
            for slot, ref, category in slot_tasks:
                if category in doubtful_categories:
                    self._doubtful.setdefault(slot, []).append(ref)
        return task_done

    def _add_pending_workers(self) -> None:
        """Pending workers arrive one latency after they were asked for; those
        arriving after the horizon play no part."""
        for p in self.obs.pending:
            at = max(self.now, p.requested_at + self.latency_s)
            if at > self.end:
                continue
            self.slots.append(_Slot(p.id, p.shape, self._key(p.shape), _Room(0.0, 0.0, 0.0), False))
            self._push(WorkerArrives(at, len(self.slots) - 1))

    # -- lookahead: the DAG's upcoming groups --------------------------------

    def _index_upcoming(self) -> None:
        """Who waits for what: an upcoming group is released once every ref in
        its ``after`` has completed."""
        for k, up in enumerate(self.upcoming):
            self._missing.append(len(up.after))
            for ref in up.after:
                self._waiting_for.setdefault(ref, []).append(k)
        self._released_at = [INF] * len(self.upcoming)
        self._up_after_unmeasured = [False] * len(self.upcoming)

    def _release_ready(self, task_done: dict[str, float]) -> None:
        """Complete the running tasks expected done within the horizon; groups
        waiting for nothing are released now."""
        if not self.upcoming:
            return
        for ref, at in task_done.items():
            if at <= self.end and ref in self._waiting_for:
                self._complete(ref, at)
        for k, up in enumerate(self.upcoming):
            if not up.after:
                self._push_release(TaskReleased(self.now, k))

    def _complete(self, ref: str, t: float) -> None:
        """``ref`` (a task or a group) completed at ``t``: release what waited only for it."""
        unmeasured = ref in self._unmeasured_refs
        for k in self._waiting_for.get(ref, ()):
            self._missing[k] -= 1
            if unmeasured:
                self._up_after_unmeasured[k] = True
            before = self._released_at[k]
            self._released_at[k] = t if before == INF else max(before, t)
            if self._missing[k] == 0 and self._released_at[k] <= self.end:
                self._push_release(TaskReleased(self._released_at[k], k))

    def _progress(self, gi: int, t: float) -> None:
        """A batch of group ``gi`` is done: if it was the group's last, the group completes."""
        g = self.queue[gi]
        if g.count == 0 and g.inflight == 0 and not g.blocked and g.finished_at is None and g.id:
            g.finished_at = t
            if g.after_unmeasured or g.runtime is None:
                self._unmeasured_refs.add(g.id)
            self._complete(g.id, t)

    # -- dispatching ---------------------------------------------------------

    def fill(self, i: int, t: float) -> None:
        """Work Queue's rule on slot ``i`` at ``t``: waiting groups newest first (the
        master's order, :mod:`workqueue_bridge.dispatch`: the queue is oldest first, a
        released group joins its end) each start as many tasks as fit (:meth:`_fit`),
        until the slot has no core left."""
        slot, queue, live = self.slots[i], self.queue, self.live
        emptied = 0
        order: Iterable[int] = reversed(live)
        if not self.options.newest_first:  # (from the head on: what lies before it has emptied)
            order = live if not self._head else map(live.__getitem__, range(self._head, len(live)))
        fits, free = self._fits, slot.free
        for gi in order:
            g = queue[gi]
            if not g.count:
                continue
            # (_fit's memo, read here: this loop is the play's hottest)
            k = fits.get((g.request_key, slot.capacity_key, free.cores, free.memory_mb, free.disk_mb))
            if k is None:
                k = self._fit(g, slot)
            elif k > g.count:
                k = g.count
            if k <= 0:
                continue
            self._start(i, gi, k, t)
            if not g.count:
                emptied += 1
            if slot.free.cores <= EPS:
                break
        if emptied:
            self._prune(emptied)

    def _prune(self, emptied: int) -> None:
        """``emptied`` more groups have no task left: drop those at the end the queue drains
        from (amortised O(1) a fill, as most groups empty there), and the rest once they are
        more than half of what is left (a scan now and then, not at every fill)."""
        queue, live = self.queue, self.live
        self._dead += emptied
        if self.options.newest_first:
            while live and not queue[live[-1]].count:
                live.pop()
                self._dead -= 1
        else:
            while self._head < len(live) and not queue[live[self._head]].count:
                self._head += 1
                self._dead -= 1
        if self._dead > 16 and 2 * self._dead > len(live) - self._head:
            self.live = [gi for gi in live[self._head:] if queue[gi].count]
            self._head = self._dead = 0

    def _fit(self, g: _Group, slot: _Slot) -> int:
        """How many tasks of ``g`` (which has some left) ``slot`` can start now: :func:`fit_count`.

        It is a pure function of the request, the capacity and the free
        resources, and a slot keeps coming back to the same few free states (a
        batch ends, the next one starts), so each answer is remembered for the
        play: asked without a limit, then capped by the group's count (what
        ``fit_count``'s ``limit`` does)."""
        free = slot.free
        key = (g.request_key, slot.capacity_key, free.cores, free.memory_mb, free.disk_mb)
        fit = self._fits.get(key)
        if fit is None:
            fit = self._fits[key] = fit_count(g.request, free, slot.capacity, _NO_LIMIT)
        return min(fit, g.count)

    def _start(self, i: int, gi: int, k: int, t: float) -> None:
        """Start ``k`` tasks of group ``gi`` on slot ``i`` at ``t`` and schedule their end."""
        slot, g = self.slots[i], self.queue[gi]
        each = self._allocations.get((g.request_key, slot.capacity_key))
        if each is None:
            each = self._allocations[g.request_key, slot.capacity_key] = allocated(g.request, slot.capacity)
        free = slot.free
        g.count -= k
        free.cores -= k * each.cores
        free.memory_mb -= k * each.memory_mb
        free.disk_mb -= k * each.disk_mb
        answered = slot.idle_now and self._counts_used(slot)
        slot.used = True
        if slot.idle_now:
            slot.used_measured |= not g.after_unmeasured
            if not answered and self._counts_used(slot):
                self._idle_left -= 1  # its answer is known: the early stop need not wait for it
        runtime = g.runtime
        if runtime is None:
            g.started_unmeasured += k
            self._start_unmeasured(gi, t)
        elif t + runtime > self.end:
            g.blocked = True
            self.inflight.append((k * each.cores, t + runtime - self.end))
        else:
            self._schedule_batch(i, gi, k, each, runtime, t)

    def _start_unmeasured(self, gi: int, t: float) -> None:
        """A never-measured batch keeps its resources through the horizon; with
        lookahead its dependents are still expected soon (a short prior), but no sooner
        than its category's longest-running task has already run."""
        g = self.queue[gi]
        guess = max(UNKNOWN_RELEASE_PRIOR_S, self.unmeasured_elapsed.get(g.category, 0.0))
        if self.upcoming and t + guess <= self.end:
            g.inflight += 1
            self._push(BatchDone(t + guess, gi))
        else:
            g.blocked = True

    def _schedule_batch(self, i: int, gi: int, k: int, each: Resources, runtime: float, t: float) -> None:
        """Resources come back at the category's mean ``runtime``; with lookahead
        and barrier awareness, the batch counts as done for its dependents only
        when its slowest task is likely to end (:func:`batch_last_runtime`)."""
        g = self.queue[gi]
        last = runtime
        if self.upcoming and self.options.barrier_aware and g.model is not None:
            last = self._last_runtime(g.category, g.model, k)
        later = last > runtime
        self._push(SlotFrees(t + runtime, i, k * each.cores, k * each.memory_mb, k * each.disk_mb,
                             None if later else gi))
        if not later:
            g.inflight += 1
        elif t + last <= self.end:
            g.inflight += 1
            self._push(BatchDone(t + last, gi))
        else:
            g.blocked = True

    def _last_runtime(self, category: str, model: CategoryModel, k: int) -> float:
        """:func:`batch_last_runtime`, remembered for the play (it interpolates the
        category's quantiles at every call, and batches of the same size recur)."""
        key = (category, k)
        last = self._last_runtimes.get(key)
        if last is None:
            last = self._last_runtimes[key] = batch_last_runtime(model, k)
        return last

    # -- playing -------------------------------------------------------------

    def _play(self) -> None:
        """Handle events in (time, sequence) order until the horizon."""
        events, end = self._events, self.end
        while events:
            if self.until_idle_used and not self._idle_left:
                break
            at, _, event = heapq.heappop(events)
            if at > end:
                break
            match event:
                case SlotFrees():
                    self._on_slot_frees(event)
                case WorkerArrives():
                    self._on_worker_arrives(event)
                case TaskReleased():
                    self._on_task_released(event)
                case BatchDone():
                    self._on_batch_done(event)
                case _:
                    assert_never(event)

    def _on_slot_frees(self, ev: SlotFrees) -> None:
        """Resources come back (a group may complete); the slot takes waiting tasks."""
        at, i, cores, memory_mb, disk_mb, group = ev
        free = self.slots[i].free
        free.cores += cores
        free.memory_mb += memory_mb
        free.disk_mb += disk_mb
        if group is not None:
            self.queue[group].inflight -= 1
            self._progress(group, at)
        if not (self._releases_due and self._waits_for_release(at)):
            self.fill(i, at)

    def _on_worker_arrives(self, ev: WorkerArrives) -> None:
        """A pending worker connects, all of it free, and takes waiting tasks."""
        slot = self.slots[ev.slot]
        cap = slot.capacity
        slot.free = _Room(cap.cores, cap.memory_mb, cap.disk_mb)
        self.fill(ev.slot, ev.at)

    def _on_task_released(self, ev: TaskReleased) -> None:
        """An upcoming group joins the end of the queue (the newest: the master dispatches it
        first); every slot with room tries it, in
        slot order (whole-worker tasks released within a latency: in
        :meth:`_whole_release_order`)."""
        up = self.upcoming[ev.upcoming_index]
        left = self._releases_due[ev.at] - 1
        if left:
            self._releases_due[ev.at] = left
        else:
            del self._releases_due[ev.at]  # (an empty dict: no slot freed from now on waits)
        self.releases.append((ev.at, up.count))
        self.queue.append(self._group(up.id, up.category, up.count, up.request))
        self.queue[-1].after_unmeasured = self._up_after_unmeasured[ev.upcoming_index]
        if up.count > 0:
            self._join(len(self.queue) - 1, ev.at)
        slots = self.slots
        order: Iterable[int] = range(len(slots))
        if up.whole_worker and ev.at <= self.now + self.latency_s and self.options.release_to_idle_first:
            order = self._whole_release_order(up)
        for j in order:
            if slots[j].free.cores > EPS:
                self.fill(j, ev.at)

    def _join(self, gi: int, at: float) -> None:
        """Group ``gi``, released at ``at``, joins the queue as the master would get it: after
        everything older; among groups released at the same time (one batch of makeflow's,
        submitted last-in-the-file first), before those the file lists first (newest first, the
        first in the file is dispatched first). Oldest first: appended, as before."""
        live = self.live
        if not self.options.newest_first:
            live.append(gi)
            return
        if at != self._batch_at:
            self._batch_at, self._batch = at, []
        # the batch's groups sit together at the end, the first in the file last: this one goes
        # before the one that joined last (and is still there)
        anchor = next((b for b in reversed(self._batch) if b in live), None)
        if anchor is None:
            live.append(gi)
        else:
            live.insert(live.index(anchor), gi)
        self._batch.append(gi)

    def _whole_release_order(self, up: UpcomingTasks) -> list[int]:
        """Busy workers the play trusts, idle ones, busy ones running a doubtful task
        that is not one of ``up``'s parents, pending ones (see the class docstring). Only
        direct parents are exempt: a doubtful task ``up`` waits for through another
        group still makes its worker doubtful (rare within a latency, and on the safe side)."""
        slots, after = self.slots, set(up.after)
        doubtful = {i for i, refs in self._doubtful.items() if any(r not in after for r in refs)}
        connected = range(self.connected)
        return [*(i for i in connected if not slots[i].idle_now and i not in doubtful),
                *(i for i in connected if slots[i].idle_now),
                *(i for i in connected if i in doubtful),
                *range(self.connected, len(slots))]

    def _on_batch_done(self, ev: BatchDone) -> None:
        """A batch counts as done for its dependents (its resources are not freed here)."""
        self.queue[ev.group].inflight -= 1
        self._progress(ev.group, ev.at)

    # -- results ---------------------------------------------------------------

    def left_waiting(self) -> list[TaskGroup]:
        """Tasks still waiting at the horizon, in queue order."""
        return [TaskGroup(category=g.category, count=g.count, request=g.request, id=g.id)
                for g in self.queue if g.count > 0]

    def unmeasured_started(self) -> dict[str, float]:
        """Workers' worth of never-measured tasks the play started, by category (tasks over
        how many of them a worker of the shape holds)."""
        started: dict[str, float] = {}
        for g in self.queue:
            per = _fit_in(g.request, self.obs.worker_shape) if g.started_unmeasured else 0
            if per > 0:
                started[g.category] = started.get(g.category, 0.0) + g.started_unmeasured / per
        return started

    def unused_idle(self) -> list[str]:
        """Workers idle now that the play never gave a task (``measured_only``: a task that
        no never-measured one comes before)."""
        return [s.id for s in self.slots[: self.connected] if s.idle_now and not self._counts_used(s)]

    def _counts_used(self, slot: _Slot) -> bool:
        return slot.used_measured if self.measured_only else slot.used


class QueueDrainEstimator:
    """The estimator. ``estimate()`` is a pure function of its input; the one state kept,
    a :class:`_BarrierMemo`, only spares the plays of one observation computing its barrier
    times again."""

    def __init__(self, options: EstimatorOptions | None = None):
        self.options = options or EstimatorOptions()
        self._barriers = _BarrierMemo()

    def estimate(self, obs: Observation, horizon_s: float) -> Estimate:
        """Play the queue to the horizon, then size what is left: packed into
        workers of the shape, capped by tail awareness. The horizon is the preparation
        latency L (what a worker bought now waits), which ``busy_latencies`` counts in."""
        play = _DrainPlay(obs, horizon_s, self.options, barrier_memo=self._barriers)
        play.run()
        left = play.left_waiting()
        packed = self._pack(left, obs.worker_shape)
        backlog = self._backlog(obs, left)
        needed = packed
        if self.options.tail_aware and packed > 0:
            # workers on their way are credited only when each is to run u > 1 rounds
            started = play.unmeasured_started() if self.options.unmeasured_rounds > 1 else None
            needed = min(packed, self._tail_cap(obs, left, backlog, play.inflight, started, horizon_s))
        return Estimate(horizon_s, left, play.unused_idle(), needed, packed, backlog, play.releases,
                        play.inflight)

    def unused_idle(self, obs: Observation, latency_s: float, horizon_s: float,
                    measured_only: bool = False) -> list[str]:
        """Workers idle now that a play to ``horizon_s`` (pending workers still one
        ``latency_s`` after their request) never gives a task (``measured_only``: a task
        released without waiting on a never-measured one, whose end the play guesses)."""
        play = _DrainPlay(obs, horizon_s, self.options, latency_s, until_idle_used=True,
                          measured_only=measured_only, barrier_memo=self._barriers)
        play.run()
        return play.unused_idle()

    @staticmethod
    def _backlog(obs: Observation, left: list[TaskGroup]) -> float:
        """Core·seconds of the leftover tasks (a whole-worker task holds the shape's cores;
        a never-measured one counts 0: its runtime is unknown)."""
        shape, models = obs.worker_shape, obs.categories
        return sum(
            g.count * (shape.cores if g.whole_worker else g.request.cores) * (_runtime(models, g.category) or 0.0)
            for g in left
        )

    @staticmethod
    def _pack(left: list[TaskGroup], shape: Resources) -> int:
        """Workers of ``shape`` that hold the leftover tasks (fractional bin packing, rounded up)."""
        need = 0.0
        for g in left:
            per = _per_worker(g, shape)
            if per <= 0:
                continue  # never fits a worker of this shape: buying does not help
            need += g.count / per
        return math.ceil(need - 1e-9)

    def _tail_cap(self, obs: Observation, left: list[TaskGroup], backlog_core_s: float,
                  inflight: list[tuple[float, float]], started: dict[str, float] | None = None,
                  latency_s: float | None = None) -> int:
        """Buy no more workers than the backlog keeps busy for ``busy_runtimes`` task runtimes
        (or ``busy_latencies`` latencies, if that is less but at least one runtime).

        Measured tasks: after the horizon their backlog B (core·s) drains on the capacity C
        that exists or is coming; a new worker of c cores earns its keep only if the drain
        still lasts at least k task runtimes r once it is there (k = 1 by default):
        W / (C + n·c) ≥ k·r  ⇔  n ≤ (W/(k·r) − C)/c (rounded up: tasks are whole), where
        W = B plus, for each task still running at the horizon, its cores times how long it
        runs on, up to k·r: a core busy that long is a core C does not have for the drain.
        Without it, cores busy with a stage that had just started counted as free to run
        the rest of it, and a third of BLAST's second stage waited a whole extra round.
        A worker drains only the tasks that fit in it: W is divided by the share of a
        worker's cores they can use (2-core tasks on 3-core workers: ⅔, one at a time);
        counted as 3 cores, each worker looked 1.5 tasks wide and HTA bought two thirds of
        what a 2-core stage needed (BLAST with 2-core aligns, 200 nodes: 1,650 s where
        buying for everything took 1,363 s). With ``busy_latencies`` b > 0 and the latency L
        given (``latency_s``: the horizon), the busy time asked is r·min(k, max(1, b·L/ρ)),
        where ρ is r or the tasks' 90th-percentile runtime (``busy_latencies_runtime``: each
        category's, at least its mean, weighted by its tasks); with ρ = r that is
        min(k·r, max(r, b·L)). Never under r unless k·r is: k runtimes of long tasks ask
        more than the latency a worker pays is worth, and no setting asks less than the
        default's one runtime (with a small L, b·L would buy for every task of a long
        stage at once).

        Never-measured tasks have no runtime: one worker is bought for every
        u = max(k, ``unmeasured_per_worker``) of their packed need (each is to run about u
        of them in a row, as a KEDA job of u tasks does); u ≤ 1: one each, no cap.
        A worker the play starts on such tasks (``started``: workers' worth of them, by
        category; one on its way, idle now, or freed within the horizon) is to run them u − 1
        more times over: that many of those left are taken off before the cap. Counting
        it for one round, every decision bought again a u-th of what the workers on their
        way would run: Epigenomics with declared cores (200 nodes, ``hta-cost`` at 5 task
        runtimes, seed 0) bought 194 one-core workers in 9 purchases over 180 s and paid
        18.8k node·s (11.7k with the credit, at 1.02× the runtime). A worker running such
        a task now is not counted for more: each latency still buys for a u-th of what
        waits while the first ones run, a ramp. Counting it too (u − 1 more each) cost 1.01–1.39× the
        runtime for 0.68–1.03× the node·s on ``bench/pareto.py``'s 14 cases (the same
        ``hta-cost``, seed 0); not counting it, 0.99–1.08× for 0.69–1.00×.
        """
        k = self.options.busy_runtimes
        measured: list[tuple[TaskGroup, float]] = []
        unmeasured: list[TaskGroup] = []
        for g in left:
            rt = _runtime(obs.categories, g.category)
            if rt is None:
                unmeasured.append(g)
            else:
                measured.append((g, rt))
        cap = 0
        if unmeasured:
            u = self.options.unmeasured_rounds
            if u > 1:
                unmeasured = self._credit_first_runs(unmeasured, started or {}, u - 1, obs.worker_shape)
            need = self._pack(unmeasured, obs.worker_shape)
            cap += math.ceil(need / u - 1e-9) if u > 1 else need
        tasks = sum(g.count for g, _ in measured)
        if tasks == 0 or backlog_core_s <= 0:
            return cap
        mean_s = sum(rt * g.count for g, rt in measured) / tasks
        busy_s = k * mean_s  # the busy time asked of a worker bought
        if self.options.busy_latencies > 0 and latency_s:
            round_s = mean_s
            if self.options.busy_latencies_runtime == "p90":
                round_s = sum(_p90_runtime(obs.categories, g.category, rt) * g.count for g, rt in measured) / tasks
            busy_s = mean_s * min(k, max(1.0, self.options.busy_latencies * latency_s / round_s))
        work = backlog_core_s + sum(cores * min(seconds, busy_s) for cores, seconds in inflight)
        capacity = sum(w.capacity.cores for w in obs.workers) + sum(p.shape.cores for p in obs.pending)
        c = obs.worker_shape.cores or 1.0
        work /= self._usable_share(measured, obs.worker_shape)
        return cap + max(0, math.ceil((work / busy_s - capacity) / c - 1e-9))

    @staticmethod
    def _credit_first_runs(unmeasured: list[TaskGroup], started: dict[str, float], more: float,
                           shape: Resources) -> list[TaskGroup]:
        """The never-measured groups left once each worker's worth of their category the play
        started runs ``more`` rounds of them after it (from the back of the queue; a round is
        as many tasks of a group as a worker of ``shape`` holds)."""
        rounds = {c: n * more for c, n in started.items()}
        kept: list[TaskGroup] = []
        for g in reversed(unmeasured):
            per = _per_worker(g, shape)
            off = min(g.count, math.floor(rounds.get(g.category, 0.0) * per + 1e-9)) if per > 0 else 0
            if off:
                rounds[g.category] -= off / per
            if g.count - off > 0:
                kept.append(g if not off else g.model_copy(update={"count": g.count - off}))
        kept.reverse()
        return kept

    @staticmethod
    def _usable_share(measured: list[tuple[TaskGroup, float]], shape: Resources) -> float:
        """The share of a worker's cores the measured tasks left can use, weighted by their
        work: as many as fit in a worker of ``shape`` (by cores, memory and disk), each its
        cores; a whole-worker task uses it all. 1 when nothing tells."""
        used = taken = 0.0
        for g, rt in measured:
            per = _per_worker(g, shape)
            if per <= 0 or shape.cores <= 0:
                continue  # never fits: buying does not help (see _pack)
            cores = shape.cores if g.whole_worker else g.request.cores
            used += g.count * rt * cores
            taken += g.count * rt * shape.cores / per
        return min(1.0, used / taken) if used > 0 and taken > 0 else 1.0
