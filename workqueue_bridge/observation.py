"""Turn one read of the master (plus what the backend and the resource monitor
know) into the :class:`~hta.model.Observation` a policy sees."""

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
from workqueue_bridge.status import MasterSnapshot, TaskStatus


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


def build_observation(
    snap: MasterSnapshot,
    *,
    epoch: float,
    worker_shape: Resources,
    categories: Mapping[str, CategoryModel],
    worker_ids: Mapping[str, str],
    pending: list[PendingWorker],
    latency: LatencyStats,
    min_workers: int,
    max_workers: int,
    upcoming: UpcomingSource | None = None,
    cpu_utilization: Mapping[str, float] | None = None,
    retired: set[str] | None = None,
) -> Observation:
    """``epoch`` is the Unix time of t = 0; ``worker_ids`` maps a worker's
    ``ip:port`` to the backend's name for it (unknown workers keep the address);
    ``retired`` addresses (workers the backend already stopped) are left out."""
    gone = retired or set()
    live = [w for w in snap.workers if w.address not in gone]
    by_addr = {w.address: w for w in live}
    running = []
    for t in snap.tasks:
        if t.state != "running":
            continue
        alloc = task_request(t)
        if alloc == Resources() and t.worker in by_addr:
            w = by_addr[t.worker]
            alloc = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
        running.append(
            RunningTask(
                task_id=t.task_id,
                category=t.category,
                allocation=alloc,
                started_at=(t.started_at - epoch) if t.started_at else snap.taken_at - epoch,
                worker=worker_ids.get(t.worker or "", t.worker),
            )
        )
    cpu = cpu_utilization or {}
    workers = []
    for w in live:
        wid = worker_ids.get(w.address, w.address)
        workers.append(
            WorkerInfo(
                id=wid,
                capacity=Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb),
                in_use=Resources(cores=w.cores_in_use, memory_mb=w.memory_in_use_mb, disk_mb=w.disk_in_use_mb),
                running=w.tasks_running,
                connected_at=(w.started_at - epoch) if w.started_at else None,
                cpu_utilization=cpu.get(wid),
            )
        )
    waiting, group_of = index_waiting(snap.tasks)
    running_ids = {t.task_id for t in snap.tasks if t.state == "running"}
    return Observation(
        time=snap.taken_at - epoch,
        waiting=waiting,
        running=running,
        workers=workers,
        pending=pending,
        categories=dict(categories),
        upcoming=upcoming(group_of, running_ids) if upcoming else [],
        latency=latency,
        worker_shape=worker_shape,
        min_workers=min_workers,
        max_workers=max_workers,
        tasks_done=snap.queue.tasks_done,
        tasks_failed=snap.queue.tasks_failed,
    )
