"""The simulated Work Queue master: its ready list, where it places each task, and how a
task runs on its worker.

The rule is Work Queue's, written once in :mod:`workqueue_bridge.dispatch` and shared with
the estimator: waiting tasks are dispatched newest first (the master puts every task it is
given, a new one or one sent back, at the head of its ready list), each to the first worker
(in connection order) with room. A task that declares its resources
(``Workload.declared``) gets them; one that declares nothing runs on a whole worker while
its category is unmeasured, then at its measured peak if the master sizes tasks itself
(``ClusterModel.auto_allocation``), else on a whole worker always.

Nothing in Work Queue or makeflow's monitor stops a task that uses more than its worker
when it declares nothing (measured with CCTools 8.0: 2 cores on a ``--cores 1`` worker,
811 MB on a ``--memory 300`` one, both ran to their end), so on a whole worker the pod's
limits decide (:mod:`hta.sim.cluster`): one needing more memory is killed (taken to be
halfway) and retried on a whole worker; a task that goes over an allocation of its own
(measured or declared: the monitor's limits) fails halfway and is retried on a whole worker
too. A worker removed while running tasks sends them back to the queue, and the work they
had done is counted as lost.
"""

from __future__ import annotations

import bisect
import functools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import simpy

from hta.model import Resources
from hta.sim.cluster import ClusterModel, SimCluster, SimNode, quota_of, reads_cores, throttled
from hta.sim.workload import SimTask
from resource_monitor.incremental import IncrementalCategoryLearner
from workqueue_bridge.dispatch import allocated, allocation_request, fit_count
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.status_json import TaskStatus


class _Room(NamedTuple):
    """A node's free resources as :func:`fit_count` reads them (no validated model per look)."""

    cores: float
    memory_mb: float
    disk_mb: float


class WaitQueue:
    """The master's waiting tasks in dispatch order (each new one at the head), kept as runs
    of alike tasks (same ``kind``: category, retried-on-a-whole-worker, what it declares).
    Alike tasks are given the same allocation, so when one does not fit anywhere none of its
    run does: a dispatch skips the rest of the run at once instead of trying 100k tasks one
    by one."""

    def __init__(self) -> None:
        self.runs: deque[list] = deque()  # [kind, deque of task ids]
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[str]:
        for _, tids in self.runs:
            yield from tids

    def appendleft(self, tid: str, kind: tuple) -> None:
        if self.runs and self.runs[0][0] == kind:
            self.runs[0][1].appendleft(tid)
        else:
            self.runs.appendleft([kind, deque([tid])])
        self._len += 1

    def taken(self, n: int) -> None:
        """``n`` tasks were taken out of runs; drop the runs left empty, merge alike neighbours."""
        self._len -= n
        merged: deque[list] = deque()
        for run in self.runs:
            if not run[1]:
                continue
            if merged and merged[-1][0] == run[0]:
                merged[-1][1].extend(run[1])
            else:
                merged.append(run)
        self.runs = merged


class WaitingIds:
    """The waiting tasks' Work Queue ids as runs of consecutive ids of one kind, in id
    order: what the master's task list says of its queue, without one entry per task."""

    def __init__(self) -> None:
        self.segs: list[list] = []  # [first id, last id, kind]
        self._los: list[int] = []

    def add(self, x: int, kind: tuple) -> None:
        segs, los = self.segs, self._los
        i = bisect.bisect_right(los, x) - 1
        left = segs[i] if i >= 0 else None
        right = segs[i + 1] if i + 1 < len(segs) else None
        join_left = left is not None and left[1] == x - 1 and left[2] == kind
        join_right = right is not None and right[0] == x + 1 and right[2] == kind
        if join_left and join_right:
            assert left is not None and right is not None
            left[1] = right[1]
            del segs[i + 1], los[i + 1]
        elif join_left:
            assert left is not None
            left[1] = x
        elif join_right:
            assert right is not None
            right[0] = x
            los[i + 1] = x
        else:
            segs.insert(i + 1, [x, x, kind])
            los.insert(i + 1, x)

    def remove(self, x: int) -> None:
        segs, los = self.segs, self._los
        i = bisect.bisect_right(los, x) - 1
        seg = segs[i]
        lo, hi, kind = seg
        if lo == hi:
            del segs[i], los[i]
        elif x == lo:
            seg[0] = los[i] = x + 1
        elif x == hi:
            seg[1] = x - 1
        else:
            seg[1] = x - 1
            segs.insert(i + 1, [x + 1, hi, kind])
            los.insert(i + 1, x + 1)


@dataclass
class SimRun:
    task: SimTask
    node: SimNode
    start: float
    alloc: Resources
    token: int
    #: what the master reports of it (built once: it does not change while it runs)
    status: TaskStatus | None = None
    #: the cores its threads keep busy within its quota (what a CPU metric reads of it)
    busy_cores: float = 0.0
    #: its outputs are on their way back to the master (its run itself has ended)
    returning: bool = False
    #: the resource monitor's window: from its inputs' arrival to the end of its command
    #: (a real monitor starts once the worker has them, and ends before outputs go back)
    monitored_from: float = 0.0
    #: when the master began sending its inputs (what it reports as the task's start)
    dispatched_at: float = 0.0
    monitored_to: float | None = None
    #: sent to a worker that has run its tasks (``SimNode.held``): it holds its slot, runs
    #: nothing, and goes back to the queue when the worker leaves
    held: bool = False


def _nothing() -> None:
    return None


class SimWorkQueue:
    """The master's ground truth: the ready list, the running tasks and what it has measured.
    :attr:`on_done` is told each task that completed well (the workflow's manager releases
    what waited for it); :attr:`on_change` is called at every change a watcher may want to
    see."""

    def __init__(self, tasks: dict[str, SimTask], declared: bool, model: ClusterModel, env: simpy.Environment,
                 cluster: SimCluster):
        self.tasks = tasks
        self.declares = declared
        self.model = model
        self.env = env
        self.cluster = cluster
        #: Work Queue task id of each submitted task (the master numbers submissions from 1)
        self.task_id: dict[str, int] = {}
        self.waiting = WaitQueue()
        self.waiting_ids = WaitingIds()
        #: waiting tasks per category (the master's queue_status counts)
        self.waiting_by_category: dict[str, int] = {}
        self.whole_worker: set[str] = set()  # tasks to retry on a whole worker
        self.runs: dict[str, SimRun] = {}
        #: what the master itself has measured of each category (for its allocations)
        self.master_learner = IncrementalCategoryLearner()
        #: summaries of completed tasks, in completion order (the resource monitor's files)
        self.summaries: list[TaskSummary] = []
        self.retries = 0
        self.lost_work = 0.0
        #: tasks sent to a worker that had run all its tasks, held and handed back (:meth:`_hold`)
        self.held_back = 0
        self.on_done: Callable[[str], None] = lambda tid: None
        self.on_change: Callable[[], None] = _nothing
        self._token = 0
        #: when the master's one link is free of the transfers it has begun
        self.link_free_at = 0.0
        #: MB sent to workers and brought back
        self.transferred_mb = 0.0
        #: seconds the link spent on them (what a real master counts in ``time_send``)
        self.link_busy_s = 0.0

    # -- what a task is given ----------------------------------------------------------------
    def declared(self, t: SimTask) -> Resources | None:
        """What the task declares to Work Queue (None: nothing)."""
        return Resources(cores=t.cores, memory_mb=t.memory_mb) if self.declares else None

    def request_of(self, tid: str) -> Resources:
        """What the master will allocate the task (``Resources()``: a whole worker)."""
        t = self.tasks[tid]
        return allocation_request(self.declared(t), self.master_learner.model(t.category),
                                  auto=self.model.auto_allocation, exceeded=tid in self.whole_worker)

    def kind(self, tid: str) -> tuple:
        """What decides the master's allocation of a task besides its category's measurements:
        alike tasks (equal kinds) are given alike allocations."""
        t = self.tasks[tid]
        return t.category, tid in self.whole_worker, (t.cores, t.memory_mb) if self.declares else None

    # -- the ready list ----------------------------------------------------------------------
    def submit(self, tid: str) -> int:
        """A task submitted to the master; returns its Work Queue id."""
        self.task_id[tid] = len(self.task_id) + 1
        self._wait(tid)
        return self.task_id[tid]

    def _wait(self, tid: str) -> None:
        """Into the master's ready list, at its head: the master dispatches newest first
        (a task sent back by a lost worker or retried on a whole worker too)."""
        kind = self.kind(tid)
        self.waiting.appendleft(tid, kind)
        self.waiting_ids.add(self.task_id[tid], kind)
        cat = kind[0]
        self.waiting_by_category[cat] = self.waiting_by_category.get(cat, 0) + 1

    def dispatch(self) -> None:
        """Work Queue's rule: waiting tasks in order, each to the first worker with room.
        A task that fits nowhere is passed over, and with it the rest of its run (alike
        tasks, the same allocation: nothing has been freed meanwhile)."""
        live = [self.cluster.nodes[i] for i in self.cluster.order]
        if not live or not self.waiting:
            return
        started = 0
        for run in self.waiting.runs:
            tids = run[1]
            request = self.request_of(tids[0])
            # a task retried after going over its allocation runs on a whole worker: Work
            # Queue's largest allocation, which the simulator takes to be a node (a smaller
            # pod would kill it again, for ever, where it needs more memory than the pod)
            retry = run[0][1]
            while tids:
                if all(n.free_c <= 1e-9 for n in live):
                    break
                node = None
                for n in live:
                    if retry and not self.cluster.node_sized(n):
                        continue
                    if fit_count(request, _Room(n.free_c, n.free_m, n.capacity.disk_mb), n.capacity, 1):
                        node = n
                        break
                if node is None:
                    break
                tid = tids.popleft()
                started += 1
                self.waiting_ids.remove(self.task_id[tid])
                self.waiting_by_category[run[0][0]] -= 1
                if node.tasks_left == 0:
                    self._hold(self.tasks[tid], node, allocated(request, node.capacity))
                else:
                    self._start(self.tasks[tid], node, allocated(request, node.capacity))
            else:
                continue
            if all(n.free_c <= 1e-9 for n in live):
                break
        if started:
            self.waiting.taken(started)

    # -- a task's run ------------------------------------------------------------------------
    def _start(self, t: SimTask, node: SimNode, alloc: Resources) -> None:
        now = self.env.now
        self._token += 1
        node.free_c -= alloc.cores
        node.free_m -= alloc.memory_mb
        node.running[t.id] = None
        node.idle_token += 1
        if node.tasks_left is not None:
            node.tasks_left -= 1
        run = SimRun(t, node, now, alloc, self._token)
        self.runs[t.id] = run
        # the pod's limits (Kubernetes: "cpu limits are enforced by CPU throttling", memory
        # ones by the kernel's OOM kill) hold what a task can use: more cores than the pod
        # runs at the pod's speed, and reads as the pod's cores. The allocation is the
        # monitor's limit, the pod itself on a whole worker: going over it in memory or in
        # the cores it can read fails (halfway)
        quota = quota_of(node, alloc)
        run.busy_cores = min(t.cores * t.cpu_util, quota.cores)
        slow = throttled(t, quota)
        held = node.limits.cores if alloc is node.capacity else alloc.cores  # a whole worker: the pod's quota
        killed = t.memory_mb > alloc.memory_mb + 1e-9 or reads_cores(t, quota) > held + 1e-9
        overhead = self.model.task_overhead_by_category_s.get(t.category, self.model.task_overhead_s)
        sent = sum(mb for f, mb in t.inputs if f not in node.cache)
        inputs_s = self._send(sent)
        run.monitored_from = now + inputs_s
        # a real master sends one task's inputs at a time and dispatches the next after: this
        # task's dispatch, as it reports it, begins when its own transfer does
        bandwidth = self.model.transfer_mb_per_s
        run.dispatched_at = run.monitored_from - (sent / bandwidth if sent > 0 and bandwidth > 0 else 0.0)
        duration = inputs_s + t.runtime_s * (0.5 if killed else slow) + overhead
        node.cache.update(f for f, _ in t.inputs)
        ev = self.env.timeout(duration)
        ev.callbacks.append(functools.partial(self._finished, t.id, run.token, killed))
        self.on_change()

    def _hold(self, t: SimTask, node: SimNode, alloc: Resources) -> None:
        """A task sent to a worker that has run all its tasks: held in its slot until the
        worker leaves (:meth:`evict` hands it back)."""
        self._token += 1
        node.free_c -= alloc.cores
        node.free_m -= alloc.memory_mb
        node.running[t.id] = None
        node.held.add(t.id)
        self.held_back += 1
        self.runs[t.id] = SimRun(t, node, self.env.now, alloc, self._token, held=True)
        self.on_change()

    def _send(self, mb: float) -> float:
        """Seconds from now until ``mb`` sent over the master's link are there: after the
        transfers already begun, one at a time."""
        bandwidth = self.model.transfer_mb_per_s
        if mb <= 0 or bandwidth <= 0:
            return 0.0
        now = self.env.now
        self.link_free_at = max(now, self.link_free_at) + mb / bandwidth
        self.transferred_mb += mb
        self.link_busy_s += mb / bandwidth
        return self.link_free_at - now

    def _finished(self, tid: str, token: int, failed: bool, _event: simpy.Event) -> None:
        """A simpy callback: the run of ``tid`` started with ``token`` ends; a task that wrote
        files holds its worker until the master has them back."""
        r = self.runs.get(tid)
        if r is not None and r.token == token and not failed and not r.returning:
            back = self._send(r.task.output_mb)
            r.monitored_to = self.env.now
            if back > 0:
                r.returning = True
                self.env.timeout(back).callbacks.append(functools.partial(self._finished, tid, token, failed))
                return
        self._finish(tid, token, failed)

    def _finish(self, tid: str, token: int, failed: bool) -> None:
        r = self.runs.get(tid)
        if r is None or r.token != token:
            return  # the node was removed meanwhile; the task went back to the queue
        self._complete(tid, r, failed)
        self.cluster.task_ended_on(r.node)

    def _complete(self, tid: str, r: SimRun, failed: bool) -> None:
        now = self.env.now
        del self.runs[tid]
        node = r.node
        node.free_c += r.alloc.cores
        node.free_m += r.alloc.memory_mb
        node.running.pop(tid, None)
        self.on_change()
        if failed:
            self.retries += 1
            self.lost_work += (now - r.start) * r.alloc.cores
            self.whole_worker.add(tid)
            self._wait(tid)
            self.dispatch()
            return
        self._summarize(r.task, r.monitored_from, r.monitored_to if r.monitored_to is not None else now,
                        quota_of(r.node, r.alloc))
        self.on_done(tid)

    def _summarize(self, t: SimTask, start: float, end: float, pod: Resources) -> None:
        """The resource monitor's summary of a completed task: its true peak and runtime, or,
        on a pod with fewer cores than it needs, those cores and its stretched runtime."""
        cores = reads_cores(t, pod)
        s = TaskSummary(category=t.category, exit_type="normal", exit_status=0, start=start, end=end,
                        wall_time_s=end - start, cpu_time_s=(end - start) * min(t.cores * t.cpu_util, cores),
                        cores=cores, memory_mb=t.memory_mb)
        self.summaries.append(s)
        self.master_learner.add(s)

    def evict(self, node: SimNode) -> int:
        """A worker went away while running tasks: they go back to the head of the queue in
        their start order, and the work they had done is lost. Returns how many."""
        now = self.env.now
        lost = 0
        for tid in reversed(list(node.running)):
            r = self.runs.pop(tid)
            if not r.held:  # (a held task did no work)
                self.lost_work += (now - r.start) * r.alloc.cores
                lost += 1
            self._wait(tid)
        node.running.clear()
        node.held.clear()
        return lost

    # -- ground truth a backend may measure ----------------------------------------------------
    def cpu_busy(self, node: SimNode) -> float:
        """Fraction of the pod's CPU request its tasks keep busy (what a CPU metric reads, as
        an HPA averages it), at most 1. A task keeps busy what its own threads do (its cores
        times its utilisation), whatever it was allocated, up to the quota it runs within:
        a single-threaded task given a whole 3-core worker reads a third, as the kubelet's
        cAdvisor would report that pod."""
        if not node.limits.cores:
            return 0.0
        busy = sum(self.runs[t].busy_cores for t in node.running)  # (each worked out as it started)
        return min(1.0, busy / node.limits.cores)  # (usage over the pod's request: the quota caps it)
