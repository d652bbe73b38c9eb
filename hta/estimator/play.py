"""One play of the queue from the observation's time to the horizon.

Slots are the connected workers (busy ones first, so idle ones stay idle unless the queue
needs them), then the pending workers that arrive within the horizon. Running tasks free
their allocation at their expected end (:mod:`hta.estimator.forecast`); freed room takes
waiting tasks newest first, each to the first slot with room (Work Queue's rule,
:func:`workqueue_bridge.dispatch.fit_count`); with lookahead, groups the DAG releases join
the queue (:mod:`hta.estimator.releases`). The play is event-driven and aggregated:
waiting tasks are runs of alike tasks, a dispatch starts k of them at once and their
completion is one event, so its cost grows with the number of distinct completion times
within the horizon, not with the number of tasks.

A category never measured has no runtime: its tasks are assumed to run past the horizon
(they hold their worker), which is what the first tasks of a new stage do until one
completes; for lookahead its dependents are still expected soon.

Whole-worker tasks the DAG releases within the first latency are offered to the busy
workers the play trusts, then to the workers idle now, and only then to doubtful busy
workers: those running a task of a category with a task running longer than
``OUTRUN_MARGIN`` × its longest measured runtime, unless that task is one the release
waits for directly. That category's measurements fall short (they are its first
completions, its shortest), so a busy worker is whole only if every task on it ends by its
forecast (docs/decisions/0009-release-to-idle-first.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Union, assert_never

from hta.estimator.forecast import (
    batch_last_runtime,
    expected_remaining,
    outrun_categories,
    past_outrun_margin,
    runtime_of,
)
from hta.estimator.options import EstimatorOptions
from hta.estimator.play_queue import PlayGroup, PlayQueue
from hta.estimator.releases import BarrierMemo, Releases, TaskReleased, barrier_times
from hta.model import CategoryModel, Observation, Resources, TaskGroup, UpcomingTasks
from workqueue_bridge.dispatch import EPS, allocated, fit_count

#: lookahead's guess for a task of a never-measured category that has not started:
#: short (its dependents are expected soon, so workers are kept for them), while
#: for buying the same task is assumed to hold its worker through the horizon
UNKNOWN_RELEASE_PRIOR_S = 1.0
_NO_LIMIT = 2**62  # fit_count's limit when only the resources should decide


# --- the play's events ------------------------------------------------------
# Kept in a heap as (at, sequence, event): ties in time go in the order the events were
# scheduled, so the play is deterministic.


class SlotFrees(NamedTuple):
    """Resources come back to a slot: running tasks (or a batch started by the play) end.
    ``group``: the queue group whose batch this completes, for its dependents (None when
    the batch's completion is a separate :class:`BatchDone`, or for tasks running before
    the play)."""

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


class BatchDone(NamedTuple):
    """A batch counts as done for its dependents, without freeing anything: the slowest of
    a batch (a barrier's last parent), or a never-measured task's guessed end
    (:data:`UNKNOWN_RELEASE_PRIOR_S`) while it keeps its worker."""

    at: float
    group: int


Event = Union[SlotFrees, WorkerArrives, TaskReleased, BatchDone]


# --- the slots ----------------------------------------------------------------


@dataclass(slots=True)
class Room:
    """A slot's free resources, updated in place. It reads like a
    :class:`~hta.model.Resources` for :func:`fit_count`, without building a validated model
    at every dispatch."""

    cores: float
    memory_mb: float
    disk_mb: float


@dataclass(slots=True)
class Slot:
    """A worker in the play: connected now, or pending (free from its arrival)."""

    id: str
    capacity: Resources
    capacity_key: int  # equal capacities, equal keys (see DrainPlay._fit)
    free: Room
    idle_now: bool
    used: bool = False
    #: given a task that no never-measured one comes before (see ``PlayGroup.after_unmeasured``)
    used_measured: bool = False
    #: idle now: the categories of the tasks it was given (None: none yet)
    given: set[str] | None = None


class DrainPlay:
    """One play of ``obs`` to the horizon (see the module): call :meth:`run` once, then read
    :meth:`left_waiting`, :meth:`unused_idle`, ``releases.released`` and ``inflight``."""

    def __init__(self, obs: Observation, horizon_s: float, options: EstimatorOptions,
                 latency_s: float | None = None, until_idle_used: bool = False,
                 measured_only: bool = False, barrier_memo: BarrierMemo | None = None) -> None:
        self.obs = obs
        self.barrier_memo = barrier_memo
        #: :meth:`unused_idle` counts as used only a worker given a task that no never-measured
        #: one comes before (``PlayGroup.after_unmeasured``)
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
        self.runtimes: dict[str, float | None] = {name: runtime_of(self.models, name) for name in self.models}
        upcoming: list[UpcomingTasks] = obs.upcoming if options.lookahead else []
        self.upcoming = upcoming
        self.slots: list[Slot] = []
        self.connected = 0  # slots[:connected] are the workers connected now
        self.queue = PlayQueue()
        self.releases = Releases(upcoming, self.end, self._push)
        #: (cores, seconds) measured tasks still hold past the horizon (see Estimate.inflight)
        self.inflight: list[tuple[float, float]] = []
        #: a never-measured category's tasks run at least as long as the longest any of
        #: its running tasks has run so far (none has ended: it has no measurement)
        self.unmeasured_elapsed: dict[str, float] = {}
        #: categories whose running tasks past the longest measured run as long again
        self.outrun = outrun_categories(obs)
        for t in obs.running:
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
        #: busy connected workers → their doubtful tasks, of a category with a task running
        #: longer than ``OUTRUN_MARGIN`` × its longest measured (see the module)
        self._doubtful: dict[int, list[str]] = {}

    # -- setting up --------------------------------------------------------

    def run(self) -> None:
        """Set up slots, queue and events, start what fits now, play to the horizon.
        The setup order is the order events are scheduled in, so it decides ties."""
        index = self._add_connected_workers()
        self._idle_left = sum(1 for s in self.slots if s.idle_now)
        task_done = self._schedule_running_tasks(index, self._barrier_times())
        self._add_pending_workers()
        self.queue.start_with([self._group(g.id, g.category, g.count, g.request) for g in self.obs.waiting])
        self.releases.start(task_done, self.now)
        if not self.releases.waits_for(self.now):
            for i in range(self.connected):
                self.fill(i, self.now)
        self._play()

    def _push(self, event: Event) -> None:
        heapq.heappush(self._events, (event.at, self._seq, event))
        self._seq += 1

    def _group(self, gid: str | None, category: str, count: int, request: Resources) -> PlayGroup:
        return PlayGroup(gid, category, count, request, self._key(request), self.runtimes.get(category),
                         self.models.get(category))

    def _key(self, amounts: Resources) -> int:
        """A small int per distinct (cores, memory, disk), for :meth:`_fit`'s memo."""
        return self._keys.setdefault((amounts.cores, amounts.memory_mb, amounts.disk_mb), len(self._keys))

    def _add_connected_workers(self) -> dict[str, int]:
        """One slot per connected worker, busy ones first; returns worker id → slot.

        Idle workers on nodes where others are busy come before those on nodes where none
        is: the play gives work to the first, so the idle ones it leaves unused, and drains,
        are those whose nodes it empties (C-Balancer's packing: a node the node autoscaler
        can take back, where draining a worker beside busy ones frees no node·s)."""
        nodes = self.obs.worker_nodes
        busy_on: dict[str, int] = {}
        if nodes:
            for w in self.obs.workers:
                if not w.idle and w.id in nodes:
                    busy_on[nodes[w.id]] = busy_on.get(nodes[w.id], 0) + 1

        def order(w) -> tuple:
            return (w.idle, -busy_on.get(nodes.get(w.id, ""), 0), w.id)

        index: dict[str, int] = {}
        for w in sorted(self.obs.workers, key=order):
            cap, used = w.capacity, w.in_use
            # what w.free computes, without building a Resources per worker
            free = Room(max(cap.cores - used.cores, 0), max(cap.memory_mb - used.memory_mb, 0),
                        max(cap.disk_mb - used.disk_mb, 0))
            index[w.id] = len(self.slots)
            self.slots.append(Slot(w.id, cap, self._key(cap), free, w.idle))
        self.connected = len(self.slots)
        return index

    def _barrier_times(self) -> dict[str, float]:
        """Lookahead, barrier-aware: task ref → when it counts as done for releases
        (:func:`~hta.estimator.releases.barrier_times`; plays of one observation share them)."""
        if not (self.options.barrier_aware and self.upcoming):
            return {}

        def compute() -> dict[str, float]:
            return barrier_times(self.obs, self.upcoming, lambda c: self.runtimes.get(c) is not None)
        return self.barrier_memo.get(self.obs, compute) if self.barrier_memo is not None else compute()

    def _schedule_running_tasks(self, index: dict[str, int], barrier_at: dict[str, float]) -> dict[str, float]:
        """Running tasks free their allocation when their category's runtime is over: one
        :class:`SlotFrees` per slot and millisecond, however many tasks end then. Returns task
        ref → when it counts as done for its dependents."""
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
                self.releases.unmeasured_refs.add(ref)
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
            if not self.slots[slot].idle_now:
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
        """Pending workers arrive one latency after they were asked for; those arriving after
        the horizon play no part."""
        for p in self.obs.pending:
            at = max(self.now, p.requested_at + self.latency_s)
            if at > self.end:
                continue
            self.slots.append(Slot(p.id, p.shape, self._key(p.shape), Room(0.0, 0.0, 0.0), False))
            self._push(WorkerArrives(at, len(self.slots) - 1))

    # -- dispatching ---------------------------------------------------------

    def fill(self, i: int, t: float) -> None:
        """Work Queue's rule on slot ``i`` at ``t``: waiting groups newest first each start as
        many tasks as fit (:meth:`_fit`), until the slot has no core left."""
        slot, groups = self.slots[i], self.queue.groups
        emptied = 0
        fits, free = self._fits, slot.free
        for gi in self.queue.newest_first():
            g = groups[gi]
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
            self.queue.prune(emptied)

    def _fit(self, g: PlayGroup, slot: Slot) -> int:
        """How many tasks of ``g`` (which has some left) ``slot`` can start now: :func:`fit_count`.

        It is a pure function of the request, the capacity and the free resources, and a slot
        keeps coming back to the same few free states (a batch ends, the next one starts), so
        each answer is remembered for the play: asked without a limit, then capped by the
        group's count (what ``fit_count``'s ``limit`` does)."""
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
            if slot.given is None:
                slot.given = {g.category}
            else:
                slot.given.add(g.category)
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
        """A never-measured batch keeps its resources through the horizon; with lookahead its
        dependents are still expected soon (a short prior), but no sooner than its category's
        longest-running task has already run."""
        g = self.queue[gi]
        guess = max(UNKNOWN_RELEASE_PRIOR_S, self.unmeasured_elapsed.get(g.category, 0.0))
        if self.upcoming and t + guess <= self.end:
            g.inflight += 1
            self._push(BatchDone(t + guess, gi))
        else:
            g.blocked = True

    def _schedule_batch(self, i: int, gi: int, k: int, each: Resources, runtime: float, t: float) -> None:
        """Resources come back at the category's mean ``runtime``; with lookahead and barrier
        awareness, the batch counts as done for its dependents only when its slowest task is
        likely to end (:func:`batch_last_runtime`)."""
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
        """:func:`batch_last_runtime`, remembered for the play (it interpolates the category's
        quantiles at every call, and batches of the same size recur)."""
        key = (category, k)
        last = self._last_runtimes.get(key)
        if last is None:
            last = self._last_runtimes[key] = batch_last_runtime(model, k)
        return last

    def _progress(self, gi: int, t: float) -> None:
        """A batch of group ``gi`` is done: if it was the group's last, the group completes."""
        g = self.queue[gi]
        if g.count == 0 and g.inflight == 0 and not g.blocked and g.finished_at is None and g.id:
            g.finished_at = t
            if g.after_unmeasured or g.runtime is None:
                self.releases.unmeasured_refs.add(g.id)
            self.releases.complete(g.id, t)

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
        if not (self.releases.due and self.releases.waits_for(at)):
            self.fill(i, at)

    def _on_worker_arrives(self, ev: WorkerArrives) -> None:
        """A pending worker connects, all of it free, and takes waiting tasks."""
        slot = self.slots[ev.slot]
        cap = slot.capacity
        slot.free = Room(cap.cores, cap.memory_mb, cap.disk_mb)
        self.fill(ev.slot, ev.at)

    def _on_task_released(self, ev: TaskReleased) -> None:
        """An upcoming group joins the queue (the newest: the master dispatches it first);
        every slot with room tries it, in slot order (whole-worker tasks released within a
        latency: in :meth:`_whole_release_order`)."""
        up = self.releases.handled(ev)
        group = self._group(up.id, up.category, up.count, up.request)
        group.after_unmeasured = self.releases.after_unmeasured[ev.upcoming_index]
        self.queue.release(group, ev.at)
        slots = self.slots
        order: Iterable[int] = range(len(slots))
        if up.whole_worker and ev.at <= self.now + self.latency_s:
            order = self._whole_release_order(up)
        for j in order:
            if slots[j].free.cores > EPS:
                self.fill(j, ev.at)

    def _whole_release_order(self, up: UpcomingTasks) -> list[int]:
        """Busy workers the play trusts, idle ones, busy ones running a doubtful task that is
        not one of ``up``'s parents, pending ones (see the module). Only direct parents are
        exempt: a doubtful task ``up`` waits for through another group still makes its worker
        doubtful (rare within a latency, and on the safe side)."""
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

    def left_waiting(self, gated: bool | None = None) -> list[TaskGroup]:
        """Tasks still waiting at the horizon, in queue order (``gated``: only those the play
        released after a never-measured task ended, whose time it guessed; or only the others)."""
        return self.queue.left_waiting(gated)

    def unmeasured_started(self) -> dict[str, float]:
        """Workers' worth of never-measured tasks the play started, by category (tasks over
        how many of them a worker of the shape holds)."""
        started: dict[str, float] = {}
        for g in self.queue.groups:
            per = fit_in(g.request, self.obs.worker_shape) if g.started_unmeasured else 0
            if per > 0:
                started[g.category] = started.get(g.category, 0.0) + g.started_unmeasured / per
        return started

    def unused_idle(self) -> list[str]:
        """Workers idle now that the play never gave a task (``measured_only``: a task that
        no never-measured one comes before)."""
        return [s.id for s in self.slots[: self.connected] if s.idle_now and not self._counts_used(s)]

    def given_idle(self) -> dict[str, set[str]]:
        """Workers idle now that the play gave a task, with the categories it gave them
        (with ``until_idle_used``, those it gave before the play stopped)."""
        return {s.id: s.given for s in self.slots[: self.connected] if s.idle_now and s.given}

    def _counts_used(self, slot: Slot) -> bool:
        return slot.used_measured if self.measured_only else slot.used


def fit_in(request: Resources, shape: Resources) -> int:
    """How many tasks asking ``request`` a worker of ``shape`` holds at once (one that
    declares nothing: a whole worker, one; 0: none ever fits)."""
    return 1 if request.declares_nothing else request.count_in(shape)
