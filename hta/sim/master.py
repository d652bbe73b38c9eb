"""What the controller reads from the simulated world, in production's types.

- :class:`SimMaster` answers ``snapshot()`` with the same
  :class:`~workqueue_bridge.status.MasterSnapshot` the bridge builds from a
  real master's ``/queue_status``, ``/task_status`` and ``/worker_status``;
- :class:`SimMonitor` hands over resource-monitor summaries of completed
  tasks, once each, as ``SummaryDirectory`` does with ``*.summary`` files;
- :class:`SimLookahead` is production's DAG lookahead
  (:func:`workqueue_bridge.dag.upcoming_tasks`) on the workload's DAG, with
  the node states makeflow's log would show.

None of them exposes ground truth a real master would not: a task's true
runtime and peak reach the controller only through a completed task's summary.
"""

from __future__ import annotations

from hta.model import Resources, UpcomingTasks
from hta.sim.world import World
from workqueue_bridge.dag import Dag, Rule, upcoming_tasks
from workqueue_bridge.dispatch import is_whole_worker
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.status import CategoryStatus, MasterSnapshot, QueueStatus, TaskStatus, WorkerStatus


def _declared(request: Resources) -> dict[str, float | None]:
    """The task fields the master reports for an allocation (None: not declared, a whole worker)."""
    if is_whole_worker(request):
        return {"cores": None, "memory_mb": None, "disk_mb": None}
    return {"cores": request.cores or None, "memory_mb": request.memory_mb or None,
            "disk_mb": request.disk_mb or None}


class SimMaster:
    """The simulated Work Queue master's status endpoints."""

    def __init__(self, world: World):
        self.world = world

    async def snapshot(self, now: float) -> MasterSnapshot:
        w = self.world
        tasks: list[TaskStatus] = []
        counts: dict[str, list[int]] = {}
        for tid in w.waiting:
            t = w.tasks[tid]
            counts.setdefault(t.category, [0, 0])[0] += 1
            tasks.append(TaskStatus.model_construct(task_id=w.task_id[tid], state="waiting", category=t.category,
                                                    worker=None, started_at=None, **_declared(w.request_of(tid))))
        for tid, r in w.runs.items():
            counts.setdefault(r.task.category, [0, 0])[1] += 1
            whole = r.alloc is r.node.capacity
            tasks.append(TaskStatus.model_construct(
                task_id=w.task_id[tid], state="running", category=r.task.category, worker=r.node.address,
                started_at=r.start, **_declared(Resources() if whole else r.alloc)))
        tasks.sort(key=lambda t: t.task_id)
        workers = [self._worker(w.nodes[i]) for i in w.order]
        queue = QueueStatus(tasks_waiting=len(w.waiting), tasks_running=len(w.runs), tasks_done=len(w.done),
                            workers_connected=len(workers),
                            categories=[CategoryStatus(name=c, waiting=n[0], running=n[1])
                                        for c, n in sorted(counts.items())])
        return MasterSnapshot.model_construct(taken_at=now, queue=queue, tasks=tasks, workers=workers)

    def _worker(self, n) -> WorkerStatus:
        runs = [self.world.runs[t] for t in n.running]
        return WorkerStatus.model_construct(
            address=n.address, hostname=n.id, cores=n.capacity.cores, memory_mb=n.capacity.memory_mb,
            disk_mb=n.capacity.disk_mb, cores_in_use=n.capacity.cores - n.free_c,
            memory_in_use_mb=n.capacity.memory_mb - n.free_m, disk_in_use_mb=0.0, tasks_running=len(runs),
            task_ids=sorted(self.world.task_id[r.task.id] for r in runs), started_at=n.connected_at)


class SimMonitor:
    """New summaries of completed tasks since the last poll."""

    def __init__(self, world: World):
        self.world = world
        self._seen = 0

    def poll(self) -> list[TaskSummary]:
        new = self.world.summaries[self._seen:]
        self._seen = len(self.world.summaries)
        return new


class SimLookahead:
    """Production's lookahead on the workload's DAG, each rule with what its task declares
    (``Resources()``: nothing; the observation builder then sizes it by the master's rule)."""

    def __init__(self, world: World):
        self.world = world
        num = {t.id: i for i, t in enumerate(world.workload.tasks)}
        self.dag = Dag([Rule(i, t.category, world.declared(t) or Resources(), sorted(num[p] for p in t.parents))
                        for i, t in enumerate(world.workload.tasks)])

    def __call__(self, waiting_group_of: dict[int, str], running_tasks: set[int]) -> list[UpcomingTasks]:
        return upcoming_tasks(self.dag, self.world.node_states(), waiting_group_of, running_tasks)
