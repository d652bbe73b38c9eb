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

from collections.abc import Mapping
from typing import Any

from hta.model import Resources, UpcomingTasks
from hta.sim.cluster import SimNode
from hta.sim.world import World
from workqueue_bridge.dag import Dag, Rule, UpcomingIndex
from workqueue_bridge.dispatch import allocation_request, is_whole_worker
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import CategoryStatus, QueueStatus, TaskStatus, WorkerStatus
from workqueue_bridge.task_table import WaitingSegment, task_request


def _declared(request: Resources) -> dict[str, Any]:
    """The task fields the master reports for an allocation (None: not declared, a whole worker)."""
    if is_whole_worker(request):
        return {"cores": None, "memory_mb": None, "disk_mb": None}
    return {"cores": request.cores or None, "memory_mb": request.memory_mb or None,
            "disk_mb": request.disk_mb or None}


class SimSnapshot(MasterSnapshot):
    """A read of the simulated master: ``tasks`` lists the running tasks; the waiting ones
    come as runs of consecutive task ids (what ``/task_status`` would list one by one),
    which the observation builder reads by run (:func:`~workqueue_bridge.task_table.snapshot_waiting`)."""

    waiting_segments: list[WaitingSegment] = []


class SimMaster:
    """The simulated Work Queue master's status endpoints."""

    def __init__(self, world: World):
        self.world = world
        self._workers: dict[str, tuple[tuple, WorkerStatus]] = {}

    def _waiting_segments(self) -> list[WaitingSegment]:
        """The waiting tasks by run of consecutive ids, each run with what the master reports of
        its tasks' allocation, read back as production reads a task's status (:func:`task_request`)."""
        w = self.world.queue
        requests: dict[tuple, Resources] = {}
        out: list[WaitingSegment] = []
        for lo, hi, kind in w.waiting_ids.segs:
            req = requests.get(kind)
            if req is None:
                category, whole, declared = kind
                asked = allocation_request(
                    Resources(cores=declared[0], memory_mb=declared[1]) if declared else None,
                    w.master_learner.model(category), auto=w.model.auto_allocation, exceeded=whole)
                req = requests[kind] = task_request(TaskStatus.model_construct(
                    task_id=lo, state="waiting", category=category, worker=None, started_at=None,
                    **_declared(asked)))
            out.append((lo, hi, kind[0], req))
        return out

    async def snapshot(self, now: float) -> MasterSnapshot:
        # always current: the world costs nothing to read. A real master's task table is
        # read within a budget (MasterStatusClient.read_budget): at 100k tasks a decision
        # may see one 15-100 s old, its counts current (what was submitted since is added from
        # them: table_kept); here it never is
        w, cluster = self.world.queue, self.world.cluster
        tasks: list[TaskStatus] = []
        counts: dict[str, list[int]] = {c: [n, 0] for c, n in w.waiting_by_category.items() if n}
        for tid, r in w.runs.items():
            counts.setdefault(r.task.category, [0, 0])[1] += 1
            if r.status is None:
                whole = r.alloc is r.node.capacity
                r.status = TaskStatus.model_construct(
                    task_id=w.task_id[tid], state="running", category=r.task.category, worker=r.node.address,
                    started_at=r.dispatched_at, **_declared(Resources() if whole else r.alloc))
            tasks.append(r.status)
        tasks.sort(key=lambda t: t.task_id)
        workers = [self._worker(cluster.nodes[i]) for i in cluster.order]
        queue = QueueStatus(tasks_waiting=len(w.waiting), tasks_running=len(w.runs),
                            tasks_done=len(self.world.makeflow.done),
                            workers_connected=len(workers),
                            bytes_sent=w.transferred_mb * 2**20, time_send_s=w.link_busy_s,
                            categories=[CategoryStatus(name=c, waiting=n[0], running=n[1])
                                        for c, n in sorted(counts.items())])
        return SimSnapshot.model_construct(taken_at=now, queue=queue, tasks=tasks, workers=workers,
                                           waiting_segments=self._waiting_segments())

    def _worker(self, n: SimNode) -> WorkerStatus:
        """A worker's status, built again only when what it runs changed."""
        key = (n.free_c, n.free_m, tuple(n.running))
        cached = self._workers.get(n.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        runs = [self.world.queue.runs[t] for t in n.running]
        status = WorkerStatus.model_construct(
            address=n.address, hostname=n.id, cores=n.capacity.cores, memory_mb=n.capacity.memory_mb,
            disk_mb=n.capacity.disk_mb, cores_in_use=n.capacity.cores - n.free_c,
            memory_in_use_mb=n.capacity.memory_mb - n.free_m, disk_in_use_mb=0.0, tasks_running=len(runs),
            task_ids=sorted(self.world.queue.task_id[r.task.id] for r in runs), started_at=n.connected_at)
        self._workers[n.id] = (key, status)
        return status


class SimMonitor:
    """New summaries of completed tasks since the last poll."""

    def __init__(self, world: World):
        self.world = world
        self._seen = 0

    def poll(self) -> list[TaskSummary]:
        new = self.world.queue.summaries[self._seen:]
        self._seen = len(self.world.queue.summaries)
        return new


class SimLookahead:
    """Production's lookahead (:class:`~workqueue_bridge.dag.UpcomingIndex`, what
    ``hta makeflow``'s :class:`~workqueue_bridge.dag.Lookahead` runs) on the workload's DAG,
    each rule with what its task declares (``Resources()``: nothing; the observation builder
    then sizes it by the master's rule), fed the node states makeflow's log would show."""

    def __init__(self, world: World):
        self.world = world
        num = {t.id: i for i, t in enumerate(world.workload.tasks)}
        self.dag = Dag([Rule(i, t.category, world.queue.declared(t) or Resources(), sorted(num[p] for p in t.parents),
                             inputs=[f for f, _ in t.inputs])
                        for i, t in enumerate(world.workload.tasks)])
        self.index = UpcomingIndex(self.dag)
        self._seen = 0

    def shared_input_sizes(self) -> dict[str, dict[str, float]]:
        """:meth:`~workqueue_bridge.dag.Dag.shared_input_sizes` by the workload's file sizes, in
        a world that sends files (none where they cost nothing: there is nothing to cache)."""
        if self.world.model.transfer_mb_per_s <= 0:
            return {}
        return self.dag.shared_input_sizes(self._size_mb())

    def task_input_sizes(self) -> dict[str, float]:
        """:meth:`~workqueue_bridge.dag.Dag.task_input_sizes` by the workload's file sizes, as
        :meth:`shared_input_sizes`."""
        if self.world.model.transfer_mb_per_s <= 0:
            return {}
        return self.dag.task_input_sizes(self._size_mb())

    def _size_mb(self):
        # every file's size, those a task writes too: a sim liberty over production, which
        # knows only the files that exist when it starts (the workflow's own inputs)
        return {f: mb for t in self.world.workload.tasks for f, mb in t.inputs}.get

    def __call__(self, waiting_group_of: Mapping[int, str], running_tasks: set[int]) -> list[UpcomingTasks]:
        log = self.world.makeflow.state_log
        if self._seen < len(log):
            self.index.update({node: (state, job) for node, state, job in log[self._seen:]})
            self._seen = len(log)
        return self.index(waiting_group_of, running_tasks)
