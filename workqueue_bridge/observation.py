"""Turn one read of the master (plus what the backend and the resource monitor
know) into the :class:`~hta.model.Observation` a policy sees: the one
observation builder, used by the production controller and, through it, by
the simulator."""

from __future__ import annotations

from typing import Callable, Mapping

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
from workqueue_bridge.status import MasterSnapshot, TaskStatus, WorkerStatus


def task_request(task: TaskStatus) -> Resources:
    """What Work Queue will allocate a task, as far as the master tells.

    Nothing declared → a whole worker (``Resources()``); otherwise the declared
    values, with undeclared dimensions left 0 (Work Queue gives those a
    proportional share, which fits whenever the cores fit).
    """
    if task.cores is None and task.memory_mb is None and task.disk_mb is None:
        return Resources()
    return Resources(cores=task.cores or 0.0, memory_mb=task.memory_mb or 0.0, disk_mb=task.disk_mb or 0.0)


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


#: builds the DAG lookahead from (waiting group of each task id, running task ids)
UpcomingSource = Callable[[dict[int, str], set[int]], list[UpcomingTasks]]


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
        waiting, group_of = index_waiting(snap.tasks)
        ups: list[UpcomingTasks] = []
        if upcoming is not None:
            running_ids = {t.task_id for t in snap.tasks if t.state == "running"}
            ups = [self._sized(u, categories) for u in upcoming(group_of, running_ids)]
        return Observation(
            time=now, waiting=waiting, running=running, workers=workers, pending=pending,
            categories=dict(categories), upcoming=ups, latency=latency, worker_shape=self.worker_shape,
            min_workers=self.min_workers, max_workers=self.max_workers,
            tasks_done=snap.queue.tasks_done, tasks_failed=snap.queue.tasks_failed,
        )

    def _running(self, snap: MasterSnapshot, by_addr: Mapping[str, WorkerStatus],
                 worker_ids: Mapping[str, str]) -> list[RunningTask]:
        out = []
        for t in snap.tasks:
            if t.state != "running":
                continue
            alloc = task_request(t)
            if alloc == Resources() and t.worker in by_addr:
                w = by_addr[t.worker]
                alloc = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
            started = (t.started_at - self.epoch) if t.started_at else snap.taken_at - self.epoch
            out.append(RunningTask(task_id=t.task_id, category=t.category, allocation=alloc, started_at=started,
                                   worker=worker_ids.get(t.worker or "", t.worker)))
        return out

    def _workers(self, live: list[WorkerStatus], worker_ids: Mapping[str, str], cpu: Mapping[str, float],
                 now: float) -> list[WorkerInfo]:
        out = []
        idle_since: dict[str, float] = {}
        for w in live:
            wid = worker_ids.get(w.address, w.address)
            connected = (w.started_at - self.epoch) if w.started_at else None
            if w.tasks_running == 0:
                # a worker never seen before has been idle since it connected; one seen
                # busy before, since this read
                since = now if w.address in self._seen or connected is None else connected
                idle_since[w.address] = self._idle_since.get(w.address, since)
            out.append(WorkerInfo(
                id=wid,
                capacity=Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb),
                in_use=Resources(cores=w.cores_in_use, memory_mb=w.memory_in_use_mb, disk_mb=w.disk_in_use_mb),
                running=w.tasks_running, connected_at=connected, idle_since=idle_since.get(w.address),
                cpu_utilization=cpu.get(wid),
            ))
        self._idle_since = idle_since
        self._seen = {w.address for w in live}
        return out

    def _sized(self, up: UpcomingTasks, categories: Mapping[str, CategoryModel]) -> UpcomingTasks:
        req = allocation_request(up.request, categories.get(up.category), auto=self.auto_allocation)
        return up if req == up.request else up.model_copy(update={"request": req})
