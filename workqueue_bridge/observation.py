"""Turn one read of the master (plus what the backend and the resource monitor
know) into the :class:`~hta.model.Observation` a policy sees: the one
observation builder, used by the production controller and, through it, by
the simulator."""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterator, Mapping

from hta.model import (
    CategoryModel,
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)
from workqueue_bridge.dispatch import allocation_request
from workqueue_bridge.status import (CategoryStatus, MasterSnapshot, TaskStatus, WorkerStatus, _declared, _num,
                                     clean_category, parse_task_status)


def task_request(task: TaskStatus) -> Resources:
    """What Work Queue will allocate a task, as far as the master tells.

    Nothing declared → a whole worker (``Resources()``); otherwise the declared
    values, with undeclared dimensions left 0 (Work Queue gives those a
    proportional share, which fits whenever the cores fit).
    """
    return declared_request(task.cores, task.memory_mb, task.disk_mb)


def declared_request(cores: float | None, memory_mb: float | None, disk_mb: float | None) -> Resources:
    """:func:`task_request` from the three declared values (None: not declared)."""
    if cores is None and memory_mb is None and disk_mb is None:
        return Resources()
    return Resources(cores=cores or 0.0, memory_mb=memory_mb or 0.0, disk_mb=disk_mb or 0.0)


def group_waiting(tasks: list[TaskStatus]) -> list[TaskGroup]:
    """Waiting tasks in dispatch (task id) order, runs of alike tasks merged."""
    return index_waiting(tasks)[0]


def index_waiting(tasks: list[TaskStatus]) -> tuple[list[TaskGroup], dict[int, str]]:
    """The waiting groups (ids ``g0``, ``g1``…) and which group each task id is in."""
    groups: list[TaskGroup] = []
    group_of: dict[int, str] = {}
    for t in sorted((t for t in tasks if t.state == "waiting"), key=lambda t: t.task_id):
        req = task_request(t)
        if groups and groups[-1].category == t.category and groups[-1].request == req:
            groups[-1].count += 1
        else:
            groups.append(TaskGroup(category=t.category, count=1, request=req, id=f"g{len(groups)}"))
        group_of[t.task_id] = groups[-1].id
    return groups, group_of


class SegmentMap(Mapping[int, str]):
    """Which waiting group each waiting task id is in, kept as ranges: ``segments`` is
    ``(first id, last id, group id)`` for runs of consecutive ids that all wait, in order.
    Reads like the dict :func:`index_waiting` returns, without one entry per task."""

    def __init__(self, segments: list[tuple[int, int, str]]):
        self.segments = segments
        self._los = [s[0] for s in segments]

    def _find(self, task_id: object) -> str | None:
        if not isinstance(task_id, int):
            return None
        i = bisect.bisect_right(self._los, task_id) - 1
        if i >= 0 and task_id <= self.segments[i][1]:
            return self.segments[i][2]
        return None

    def __getitem__(self, task_id: int) -> str:
        g = self._find(task_id)
        if g is None:
            raise KeyError(task_id)
        return g

    def get(self, task_id, default=None):  # type: ignore[override]
        g = self._find(task_id)
        return default if g is None else g

    def __contains__(self, task_id: object) -> bool:
        return self._find(task_id) is not None

    def __iter__(self) -> Iterator[int]:
        for lo, hi, _ in self.segments:
            yield from range(lo, hi + 1)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi, _ in self.segments)


#: a run of waiting tasks with consecutive ids: (first id, last id, category, what each asks)
WaitingSegment = tuple[int, int, str, Resources]


def waiting_segments(tasks: list[TaskStatus]) -> list[WaitingSegment]:
    """The waiting tasks as runs of consecutive ids alike in category and request."""
    out: list[WaitingSegment] = []
    for t in sorted((t for t in tasks if t.state == "waiting"), key=lambda t: t.task_id):
        req = task_request(t)
        if out and out[-1][1] == t.task_id - 1 and out[-1][2] == t.category and out[-1][3] == req:
            out[-1] = (out[-1][0], t.task_id, t.category, req)
        else:
            out.append((t.task_id, t.task_id, t.category, req))
    return out


def split_task_status(data: Any) -> tuple[list[TaskStatus], list[WaitingSegment]]:
    """A ``/task_status`` answer as :func:`~workqueue_bridge.status.parse_task_status` then
    :func:`waiting_segments` would read it — the tasks that are not waiting, in id order,
    and the waiting ones as runs — without a model per waiting task. A read of 100k waiting
    tasks is most of a changed cycle's cost; each waiting task is here a few dict lookups
    (``tests/test_split_task_status.py`` checks both give the same, on odd input too)."""
    rows = [(int(_num(t.get("taskid"))), t) for t in data or []]
    rows.sort(key=lambda r: r[0])
    others: list[dict] = []
    out: list[WaitingSegment] = []
    # the same few raw values recur across 100k tasks: each is cleaned once
    waiting_states: dict[Any, bool] = {}
    categories: dict[Any, str] = {}
    requests: dict[tuple, Resources] = {}
    for tid, t in rows:
        state = t.get("state", "")
        waiting = waiting_states.get(state) if isinstance(state, str) else None
        if waiting is None:
            waiting = str(state).lower() == "waiting"
            if isinstance(state, str):
                waiting_states[state] = waiting
        if not waiting:
            others.append(t)
            continue
        raw_category = t.get("category")
        category = categories.get(raw_category) if isinstance(raw_category, str) else None
        if category is None:
            category = clean_category(raw_category)
            if isinstance(raw_category, str):
                categories[raw_category] = category
        raw: tuple | None = (t.get("cores"), t.get("memory"), t.get("disk"))
        try:  # values equal as keys (1, 1.0, True, "1") are equal to _declared too
            req = requests.get(raw)
        except TypeError:  # an unhashable value: worked out, not kept
            req, raw = None, None
        if req is None:  # what task_request gives the TaskStatus parse_task_status would make
            req = declared_request(*(_declared(t.get(k)) for k in ("cores", "memory", "disk")))
            if raw is not None:
                requests[raw] = req
        last = out[-1] if out else None
        if last is not None and last[1] == tid - 1 and last[2] == category and (last[3] is req or last[3] == req):
            out[-1] = (out[-1][0], tid, category, req)
        else:
            out.append((tid, tid, category, req))
    return parse_task_status(others), out


def index_segments(segments: list[WaitingSegment]) -> tuple[list[TaskGroup], SegmentMap]:
    """:func:`index_waiting` on waiting tasks given as runs of consecutive ids (in id
    order): the same groups, and the group of each task id as a :class:`SegmentMap`."""
    groups: list[TaskGroup] = []
    spans: list[tuple[int, int, str]] = []
    for lo, hi, category, req in segments:
        if groups and groups[-1].category == category and groups[-1].request == req:
            groups[-1].count += hi - lo + 1
        else:
            groups.append(TaskGroup(category=category, count=hi - lo + 1, request=req, id=f"g{len(groups)}"))
        spans.append((lo, hi, groups[-1].id))
    return groups, SegmentMap(spans)


def snapshot_waiting(snap: MasterSnapshot) -> tuple[list[TaskGroup], Mapping[int, str]]:
    """The waiting groups of a read of the master. A master that reports its waiting
    tasks as runs of consecutive ids (``waiting_segments``, as the simulated one does
    with a queue of 100k tasks) is read by run; otherwise task by task."""
    segments = getattr(snap, "waiting_segments", None)
    if segments is None:
        return index_waiting(snap.tasks)
    return index_segments(segments)


def _without(group_of: Mapping[int, str], ids: set[int], groups: set[str]) -> Mapping[int, str]:
    """``group_of`` less the task ``ids`` and every task of ``groups`` (kept as ranges if it was)."""
    if isinstance(group_of, SegmentMap):
        spans = []
        cuts = sorted(ids)
        for lo, hi, g in group_of.segments:
            if g in groups:
                continue
            for i in cuts[bisect.bisect_left(cuts, lo):bisect.bisect_right(cuts, hi)]:
                if lo < i:
                    spans.append((lo, i - 1, g))
                lo = i + 1
            if lo <= hi:
                spans.append((lo, hi, g))
        return SegmentMap(spans)
    return {t: g for t, g in group_of.items() if t not in ids and g not in groups}


def at_the_counts(groups: list[TaskGroup], counts: list[CategoryStatus],
                  requests: Mapping[str, Resources] | None = None) -> tuple[list[TaskGroup], set[str]]:
    """The waiting groups of a kept read of the master's task table, brought to the counts
    of a newer ``/queue_status``; and the ids of the groups that went. A large table is read
    within a budget (``MasterStatusClient.read_budget``: at 100k tasks, a read every
    15-100 s) while the counts are read every time.

    - A category with more waiting than its groups hold gets the rest as a group at the
      back (the newest, which the master dispatches first): tasks submitted since the table
      was read (a whole new stage, at a barrier) or put back in the queue (a lost
      worker's). Without them a decision would see nothing waiting, and nothing upcoming
      either, since the lookahead cannot place their parents. The group asks what the
      category's newest group asked, else ``requests[category]`` (what a task of it in
      the table asked), else what the category declares at most, else a whole worker.
    - A category with fewer loses the rest from the back, its newest tasks: tasks dispatched
      since, newest first as the master dispatches (those a
      worker runs now were taken out before: ``ObservationBuilder._dispatched_since``).
      A category the counts do not list is left as the table has it.
    - A group left with nothing (``count`` 0 given, or cut to it) goes.

    Applied only to a kept table (``MasterSnapshot.table_kept``): a fresh one is read
    after the counts, and a task dispatched in between would come back as one still
    waiting."""
    held: dict[str, int] = {}
    newest: dict[str, Resources] = {}
    for g in groups:
        held[g.category] = held.get(g.category, 0) + g.count
        newest[g.category] = g.request
    waiting = {c.name: c.waiting for c in counts}
    excess = {c: n - waiting[c] for c, n in held.items() if c in waiting and n > waiting[c]}
    out: list[TaskGroup] = []
    for g in reversed(groups):  # the newest first: the master dispatched them first
        cut = min(g.count, excess.get(g.category, 0))
        if cut > 0:
            excess[g.category] -= cut
        if g.count > cut:
            out.append(g if not cut else g.model_copy(update={"count": g.count - cut}))
    out.reverse()
    taken = {g.id for g in groups}  # (the gone ones' too: no id twice)
    for c in counts:
        n = c.waiting - held.get(c.name, 0)
        if n <= 0:
            continue
        request = newest.get(c.name) or (requests or {}).get(c.name) or declared_request(
            c.max_cores, c.max_memory_mb, c.max_disk_mb)
        gid = len(out)
        while f"g{gid}" in taken:
            gid += 1
        taken.add(f"g{gid}")
        out.append(TaskGroup(category=c.name, count=n, request=request, id=f"g{gid}"))
    return out, taken - {g.id for g in out} - {None}


def _still_running(t: TaskStatus, w: WorkerStatus | None) -> bool:
    """Does the current read of the workers leave a task of a kept table running? Not where
    its worker is gone or runs nothing now, or lists its tasks without this one: it ended,
    or went back to the queue (where the counts have it: :func:`at_the_counts`)."""
    if w is None or w.tasks_running == 0:
        return False
    return not w.task_ids or t.task_id in w.task_ids


def snapshot_running(snap: MasterSnapshot) -> list[TaskStatus]:
    """The running tasks of a read of the master, in task id order. A read that carries them
    already (``running_tasks``, as :class:`~workqueue_bridge.status.LiveSnapshot` does, worked
    out once per read of ``/task_status``) is not searched again."""
    running = getattr(snap, "running_tasks", None)
    if running is None:
        return [t for t in snap.tasks if t.state == "running"]
    return running


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
                 auto_allocation: bool = False):
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
    ) -> Observation:
        """``worker_ids`` maps a worker's ``ip:port`` to the backend's name for it (unknown
        workers keep the address); ``retired`` addresses (workers the backend already
        stopped) are left out; ``cpu_utilization`` is by backend worker name."""
        now = snap.taken_at - self.epoch
        gone = retired or set()
        live = [w for w in snap.workers if w.address not in gone]
        running = self._running(snap, {w.address: w for w in live}, worker_ids)
        workers = self._workers(live, worker_ids, cpu_utilization or {}, now)
        waiting, group_of = snapshot_waiting(snap)
        if not snap.table_kept:
            self._dispatched_seen = {}
        else:  # an older table than the counts: what moved since is in them and the workers' read
            running, waiting, ran = self._dispatched_since(live, worker_ids, running, waiting, group_of, now)
            asked = {t.category: task_request(t) for t in snapshot_running(snap)}
            waiting, gone_groups = at_the_counts(waiting, snap.queue.categories, {
                c: allocation_request(r, categories.get(c), auto=self.auto_allocation) for c, r in asked.items()})
            if ran or gone_groups:  # (the lookahead then finds no ref for their rules until the next read)
                group_of = _without(group_of, ran, gone_groups)
        ups: list[UpcomingTasks] = []
        if upcoming is not None:
            running_ids = {t.task_id for t in running}  # (a kept table's, brought up to this read)
            ups = [self._sized(u, categories) for u in upcoming(group_of, running_ids)]
        return Observation(
            time=now, waiting=waiting, running=running, workers=workers, pending=pending,
            categories=dict(categories), upcoming=ups, latency=latency, worker_shape=self.worker_shape,
            min_workers=self.min_workers, max_workers=self.max_workers,
            tasks_done=snap.queue.tasks_done, tasks_failed=snap.queue.tasks_failed,
            auto_allocation=self.auto_allocation,
        )

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
                if g is None or moved.get(g.id, 0) >= g.count:
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
            waiting = [g.model_copy(update={"count": g.count - moved[g.id]}) if g.id in moved else g for g in waiting]
        return out, waiting, set(first_seen)

    def _running(self, snap: MasterSnapshot, by_addr: Mapping[str, WorkerStatus],
                 worker_ids: Mapping[str, str]) -> list[RunningTask]:
        out = []
        made: dict[tuple, RunningTask] = {}
        kept = snap.table_kept
        for t in snapshot_running(snap):
            w = by_addr.get(t.worker) if t.worker is not None else None
            if kept and not _still_running(t, w):
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
                if whole:
                    alloc = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
                task = RunningTask(task_id=t.task_id, category=t.category, allocation=alloc, started_at=started,
                                   worker=wid, whole_worker=whole)
            made[key] = task
            out.append(task)
        self._running_made = made
        return out

    def _workers(self, live: list[WorkerStatus], worker_ids: Mapping[str, str], cpu: Mapping[str, float],
                 now: float) -> list[WorkerInfo]:
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
            key = (wid, w.cores, w.memory_mb, w.disk_mb, w.cores_in_use, w.memory_in_use_mb, w.disk_in_use_mb,
                   w.tasks_running, connected, idle_since.get(w.address), cpu.get(wid))
            info = self._workers_made.get(key)
            if info is None:
                info = WorkerInfo(
                    id=wid,
                    capacity=Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb),
                    in_use=Resources(cores=w.cores_in_use, memory_mb=w.memory_in_use_mb, disk_mb=w.disk_in_use_mb),
                    running=w.tasks_running, connected_at=connected, idle_since=idle_since.get(w.address),
                    cpu_utilization=cpu.get(wid),
                )
            made[key] = info
            out.append(info)
        self._workers_made = made
        self._idle_since = idle_since
        self._seen = {w.address for w in live}
        return out

    def _sized(self, up: UpcomingTasks, categories: Mapping[str, CategoryModel]) -> UpcomingTasks:
        req = allocation_request(up.request, categories.get(up.category), auto=self.auto_allocation)
        return up if req == up.request else up.model_copy(update={"request": req})
