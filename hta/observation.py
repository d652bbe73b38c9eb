"""Turn one read of the master (plus what the backend and the resource monitor know) into
the :class:`~hta.model.Observation` a policy sees: the one observation builder, used by the
production controller and, through it, by the simulator."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hta.model import (
    LINK_PRIOR_MB_PER_S,
    CategoryModel,
    LatencyStats,
    LinkStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)
from workqueue_bridge.dispatch import allocation_request
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import WorkerStatus
from workqueue_bridge.task_table import (
    at_the_counts,
    snapshot_running,
    snapshot_waiting,
    still_running,
    task_request,
    without_tasks,
)

#: builds the DAG lookahead from (waiting group of each task id, running task ids)
UpcomingSource = Callable[[Mapping[int, str], set[int]], list[UpcomingTasks]]


class ObservationBuilder:
    """Turns each read of the master into the :class:`~hta.model.Observation` a policy sees.

    The one place an observation is made, for production and the simulator alike. It keeps
    what a single read cannot tell: since when each worker has run nothing (``idle_since``,
    what work_queue_factory's idle timeout counts from). ``epoch`` is the Unix time of t = 0
    (0 in the simulator, whose clock starts there). ``auto_allocation`` says whether the
    master gives a task that declares nothing its category's measured peak (makeflow
    ``--allocation``) or a whole worker: upcoming tasks are sized by the same rule.
    """

    def __init__(self, *, epoch: float, worker_shape: Resources, min_workers: int, max_workers: int,
                 auto_allocation: bool = False, shared_inputs: Mapping[str, Mapping[str, float]] | None = None,
                 task_inputs_mb: Mapping[str, float] | None = None, link_prior_mb_per_s: float = LINK_PRIOR_MB_PER_S):
        self.epoch = epoch
        self.worker_shape = worker_shape
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.auto_allocation = auto_allocation
        self._idle_since: dict[str, float] = {}
        self._seen: set[str] = set()
        # the last build's running tasks and workers, by everything they are made of: a
        # read that shows the same task or worker again gets the same object back (the
        # simulator reads its master thousands of times while most of it stays put)
        self._running_made: dict[tuple, RunningTask] = {}
        self._workers_made: dict[tuple, WorkerInfo] = {}
        #: tasks a kept table has waiting that a worker runs: the first read that saw each
        self._dispatched_seen: dict[int, float] = {}
        #: category → file → MB read by every task of the category (``shared_inputs``), and
        #: by worker, the files of it that the worker was sent: those of each category it ran
        self.shared_inputs = {c: dict(files) for c, files in (shared_inputs or {}).items()}
        self._shared = {c: frozenset(files) for c, files in self.shared_inputs.items()}
        self._cached: dict[str, frozenset[str]] = {}
        self.task_inputs_mb = dict(task_inputs_mb or {})
        self.link_prior_mb_per_s = link_prior_mb_per_s

    def build(
        self,
        snap: MasterSnapshot,
        *,
        categories: Mapping[str, CategoryModel],
        worker_ids: Mapping[str, str],
        pending: list[PendingWorker],
        latency: LatencyStats,
        upcoming: UpcomingSource | None = None,
        cpu_utilization: Mapping[str, float] | None = None,
        retired: set[str] | None = None,
        node_hold_s: float | None = None,
        worker_nodes: Mapping[str, str] | None = None,
    ) -> Observation:
        """``worker_ids`` maps a worker's ``ip:port`` to the backend's name for it (unknown
        workers keep the address); ``retired`` addresses (workers the backend already
        stopped) are left out; ``cpu_utilization`` is by backend worker name; ``node_hold_s``
        is how long the backend has seen an empty node stay; ``worker_nodes``, the node of each
        worker (by backend name) where the backend knows it."""
        now = snap.taken_at - self.epoch
        gone = retired or set()
        live = [w for w in snap.workers if w.address not in gone]
        running = self._running(snap, {w.address: w for w in live}, worker_ids)
        waiting, group_of = snapshot_waiting(snap)
        if not snap.table_kept:
            self._dispatched_seen = {}
        else:  # an older table than the counts: what moved since is in them and the workers' read
            running, waiting, ran = self._dispatched_since(live, worker_ids, running, waiting, group_of, now)
            asked = {t.category: task_request(t) for t in snapshot_running(snap)}
            waiting, gone_groups = at_the_counts(waiting, snap.queue.categories, {
                c: allocation_request(r, categories.get(c), auto=self.auto_allocation) for c, r in asked.items()})
            if ran or gone_groups:  # (the lookahead then finds no ref for their rules until the next read)
                group_of = without_tasks(group_of, ran, gone_groups)
        # (after the kept table's pass: a task dispatched since it was read ran there too)
        workers = self._workers(live, worker_ids, cpu_utilization or {}, now, self._caches(running))
        ups: list[UpcomingTasks] = []
        if upcoming is not None:
            running_ids = {t.task_id for t in running}  # (a kept table's, brought up to this read)
            ups = [self._sized(u, categories) for u in upcoming(group_of, running_ids)]
        return Observation(
            time=now, waiting=waiting, running=running, workers=workers, pending=pending,
            categories=dict(categories), upcoming=ups, latency=latency, worker_shape=self.worker_shape,
            min_workers=self.min_workers, max_workers=self.max_workers,
            tasks_done=snap.queue.tasks_done, tasks_failed=snap.queue.tasks_failed,
            auto_allocation=self.auto_allocation, shared_inputs=self.shared_inputs,
            task_inputs_mb=self.task_inputs_mb, link=LinkStats.of(snap.queue, self.link_prior_mb_per_s),
            node_hold_s=node_hold_s, worker_nodes=dict(worker_nodes or {}),
        )

    def _caches(self, running: list[RunningTask]) -> dict[str, frozenset[str]]:
        """Each worker's cached shared inputs, with those of the tasks it runs now: seen
        running on a worker, a task was sent its inputs there, and Work Queue keeps them."""
        if not self._shared:
            return self._cached
        for t in running:
            files = self._shared.get(t.category)
            if files and t.worker is not None:
                have = self._cached.get(t.worker, frozenset())
                if not files <= have:
                    self._cached[t.worker] = have | files
        return self._cached

    def _dispatched_since(self, live: list[WorkerStatus], worker_ids: Mapping[str, str], running: list[RunningTask],
                          waiting: list[TaskGroup], group_of: Mapping[int, str],
                          now: float) -> tuple[list[RunningTask], list[TaskGroup], set[int]]:
        """The running tasks and waiting groups of a kept table, with the tasks a worker
        runs now that the table has waiting: dispatched since, they run (from the first read
        that saw each, their start being unknown), out of their groups (a count may reach
        0: :func:`at_the_counts` drops such a group); and those tasks' ids. Seen on the
        replay's BLAST: a /task_status read took 8-12 s on a loaded master, the table was
        kept for 36 s, and observations showed 168 tasks waiting and 0 running while 60 ran
        and 61 finished."""
        known = {t.task_id for t in running}
        by_id = {g.id: g for g in waiting}
        moved: dict[str, int] = {}
        out = list(running)
        first_seen: dict[int, float] = {}
        for w in live:
            for tid in w.task_ids:
                gid = group_of.get(tid) if tid not in known else None
                g = by_id.get(gid) if gid is not None else None
                if g is None or g.id is None or moved.get(g.id, 0) >= g.count:
                    continue
                known.add(tid)  # (once, however many workers list it)
                first_seen[tid] = self._dispatched_seen.get(tid, now)
                whole = g.whole_worker
                alloc = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb) if whole else g.request
                out.append(RunningTask(task_id=tid, category=g.category, allocation=alloc, started_at=first_seen[tid],
                                       worker=worker_ids.get(w.address, w.address), whole_worker=whole))
                moved[g.id] = moved.get(g.id, 0) + 1
        self._dispatched_seen = first_seen
        if moved:
            waiting = [g.model_copy(update={"count": g.count - moved[g.id]}) if g.id is not None and g.id in moved
                       else g for g in waiting]
        return out, waiting, set(first_seen)

    def _running(self, snap: MasterSnapshot, by_addr: Mapping[str, WorkerStatus],
                 worker_ids: Mapping[str, str]) -> list[RunningTask]:
        out = []
        made: dict[tuple, RunningTask] = {}
        kept = snap.table_kept
        for t in snapshot_running(snap):
            w = by_addr.get(t.worker) if t.worker is not None else None
            if kept and not still_running(t, w):
                continue
            # (None: not reported; 0.0 is a start at the simulator's epoch, not "unknown":
            # read as unknown, a task started at t = 0 never aged and looked just started)
            started = (t.started_at - self.epoch) if t.started_at is not None else snap.taken_at - self.epoch
            wid = worker_ids.get(t.worker or "", t.worker)
            key = (t.task_id, t.category, t.cores, t.memory_mb, t.disk_mb, started, wid,
                   None if w is None else (w.cores, w.memory_mb, w.disk_mb))
            task = self._running_made.get(key)
            if task is None:
                alloc = task_request(t)
                whole = alloc == Resources() and w is not None
                if whole and w is not None:
                    alloc = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
                task = RunningTask(task_id=t.task_id, category=t.category, allocation=alloc, started_at=started,
                                   worker=wid, whole_worker=whole)
            made[key] = task
            out.append(task)
        self._running_made = made
        return out

    def _workers(self, live: list[WorkerStatus], worker_ids: Mapping[str, str], cpu: Mapping[str, float],
                 now: float, cached: Mapping[str, frozenset[str]]) -> list[WorkerInfo]:
        out = []
        made: dict[tuple, WorkerInfo] = {}
        idle_since: dict[str, float] = {}
        for w in live:
            wid = worker_ids.get(w.address, w.address)
            connected = (w.started_at - self.epoch) if w.started_at is not None else None
            if w.tasks_running == 0:
                # a worker never seen before has been idle since it connected; one seen
                # busy before, since this read
                since = now if w.address in self._seen or connected is None else connected
                idle_since[w.address] = self._idle_since.get(w.address, since)
            holds = cached.get(wid, frozenset())
            key = (wid, w.cores, w.memory_mb, w.disk_mb, w.cores_in_use, w.memory_in_use_mb, w.disk_in_use_mb,
                   w.tasks_running, connected, idle_since.get(w.address), cpu.get(wid), holds)
            info = self._workers_made.get(key)
            if info is None:
                info = WorkerInfo(
                    id=wid,
                    capacity=Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb),
                    in_use=Resources(cores=w.cores_in_use, memory_mb=w.memory_in_use_mb, disk_mb=w.disk_in_use_mb),
                    running=w.tasks_running, connected_at=connected, idle_since=idle_since.get(w.address),
                    cpu_utilization=cpu.get(wid), cached_inputs=holds,
                )
            made[key] = info
            out.append(info)
        self._workers_made = made
        if cached:  # (workers gone: their caches with them, should an id come back)
            here = {w.id for w in out}
            for wid in [wid for wid in cached if wid not in here]:
                del self._cached[wid]
        self._idle_since = idle_since
        self._seen = {w.address for w in live}
        return out

    def _sized(self, up: UpcomingTasks, categories: Mapping[str, CategoryModel]) -> UpcomingTasks:
        req = allocation_request(up.request, categories.get(up.category), auto=self.auto_allocation)
        return up if req == up.request else up.model_copy(update={"request": req})
