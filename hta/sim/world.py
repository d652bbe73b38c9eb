"""The simulator's ground truth: a simulated cluster, Work Queue master and
Makeflow, played by simpy.

The world knows each task's true runtime and resource use; nobody else does.
The production :class:`~hta.controller.Controller` reads it only through
``SimMaster`` (what the master's status endpoints would answer), ``SimMonitor``
(the resource monitor's summaries of completed tasks) and ``SimBackend`` (the
cluster's answers about workers) — see :mod:`hta.sim.run`.

Rules, as in the real systems:
- cluster: at most ``max_nodes`` nodes; a node asked for arrives after a latency
  drawn from N(mean, sd), never below mean − 4 sd, plus ``pull_s`` (image pull);
  ``start_nodes`` are there at t = 0. Nodes and workers (pods) are apart: a worker
  of a given shape (a whole node by default) goes to the oldest node with room for
  it (one being prepared included), else to a new node; a node leaves with its last
  worker (or ``empty_node_ttl_s`` later); past the cap a worker waits for room;
- Work Queue (the rule in :mod:`workqueue_bridge.dispatch`, shared with the
  estimator): waiting tasks are dispatched newest first (the master puts every task it
  is given, a new one or one sent back, at the head of its ready list), each to the first
  worker (in connection order) with room; a task that declares its
  resources (``Workload.declared``) gets them; one that declares nothing runs
  on a whole worker while its category is unmeasured, then at its measured
  peak (makeflow's ``--allocation=throughput``); nothing in Work Queue or makeflow's
  monitor stops a task that uses more than its worker when it declares nothing (measured
  with CCTools 8.0: 2 cores on a ``--cores 1`` worker, 811 MB on a ``--memory 300`` one,
  both ran to their end), so on a whole worker the pod's limits decide, as Kubernetes
  enforces them: a task needing more cores than its pod is throttled to them (its runtime
  stretched by need / pod, its measured peak the pod's cores: what cpu time over wall
  time reads under a CFS quota), one needing more memory is killed (taken to be halfway)
  and retried on a whole worker; a task that goes over an allocation of its own (measured
  or declared: the monitor's limits) fails halfway and is retried on a whole worker too;
  a worker removed while
  running tasks sends them back to the queue and the work they had done is
  counted as lost;
- workers that run to completion (a policy's ``worker_lifetime``, e.g. KEDA's
  ScaledJob: :class:`~hta.policies.base.WorkerLifetime`): each accepts at most
  ``max_tasks`` tasks and leaves once the last has ended, or leaves after
  ``idle_timeout_s`` without a task; never while it runs one;
- Makeflow: a task is released when all its parents completed; the rules released at
  once are submitted last-in-the-file first (makeflow walks its rules newest-parsed
  first), so the master, newest first, runs them in the file's order; a task's Work
  Queue id is its submission's number, as the master numbers them.

Every change of state succeeds the :attr:`World.changed` event, so whoever
watches the world (the controller's driver) can look at once.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import simpy
from pydantic import BaseModel

from hta.model import Resources
from hta.policies.base import WorkerLifetime
from resource_monitor.incremental import IncrementalCategoryLearner
from hta.sim.workload import SimTask, Workload
from workqueue_bridge.dispatch import allocated, allocation_request, fit_count
from workqueue_bridge.makeflow_log import NodeState
from workqueue_bridge.monitor_summaries import TaskSummary

class _Room(NamedTuple):
    """A node's free resources as :func:`fit_count` reads them (no validated model per look)."""

    cores: float
    memory_mb: float
    disk_mb: float


class WaitQueue:
    """The master's waiting tasks in dispatch order (each new one at the head), kept as runs
    of alike tasks (same ``kind``: category, retried-on-a-whole-worker, what it declares). Alike tasks are
    given the same allocation, so when one does not fit anywhere none of its run does:
    a dispatch skips the rest of the run at once instead of trying 100k tasks one by one."""

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
            left[1] = right[1]
            del segs[i + 1], los[i + 1]
        elif join_left:
            left[1] = x
        elif join_right:
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


class ClusterModel(BaseModel):
    """The simulated cluster (defaults: the thesis's GKE measurement)."""

    max_nodes: int = 20
    start_nodes: int = 1
    node_cores: float = 3.0  # allocatable of a 4-vCPU node
    node_memory_mb: float = 15000.0
    node_disk_mb: float = 100000.0
    latency_mean_s: float = 157.4
    latency_sd_s: float = 4.2
    pull_s: float = 0.0
    min_interval_s: float = 1.0
    max_interval_s: float = 600.0
    horizon_s: float = 48 * 3600.0  # give up after this long (a policy that never scales)
    #: after the workflow ends the cluster keeps running until the policy has scaled it
    #: down (HPA's 300 s window, the factory's idle timeout...) to its starting size, for
    #: at most this long: waste and node time are counted through that teardown, runtime is not
    teardown_s: float = 900.0
    #: workers connected at t = 0 (None: one on each starting node); starting nodes
    #: without one are empty nodes a requested worker lands on after ``pod_start_s``
    start_workers: int | None = None
    #: a worker asked for where an empty node already is: scheduled → connected
    pod_start_s: float = 0.0
    #: a node whose worker left stays this long (the cluster autoscaler's
    #: scale-down-unneeded-time); a worker asked for meanwhile lands on it after
    #: ``pod_start_s`` instead of a whole preparation latency (0: nodes leave with their worker)
    empty_node_ttl_s: float = 0.0
    #: added to each task's run on a worker: dispatch, input transfer, the resource
    #: monitor's start, the result's return (what a real master adds to a runtime)
    task_overhead_s: float = 0.0
    #: the same per category, where measured (overrides ``task_overhead_s``)
    task_overhead_by_category_s: dict[str, float] = {}
    #: Work Queue gives a task of a category it has measured that category's peak, so
    #: several share a worker (what makeflow ``--allocation=throughput`` is documented to
    #: do, and what the simulator assumed until the twenty-fourth session: the "packed"
    #: world). False, the default: a task that declares nothing takes a whole worker,
    #: always, which is what CCTools 8.0 did here under ``makeflow -T wq``, with that option
    #: or without (docs/pareto.md, "What Work Queue packs"), and what production assumes
    auto_allocation: bool = False

    @property
    def node_shape(self) -> Resources:
        return Resources(cores=self.node_cores, memory_mb=self.node_memory_mb, disk_mb=self.node_disk_mb)


def unrunnable(workload: Workload, cluster: ClusterModel) -> str | None:
    """Why some task of ``workload`` can never finish on ``cluster``, in one line naming the
    fix, or None. A task over a node-sized worker's memory is killed there every time (Work
    Queue would return it to Makeflow as resource exhaustion, and the workflow would fail);
    a declared task over the cores a node's worker advertises is never dispatched. Either
    way a run would only go on until its horizon."""
    whole = cluster.node_shape.advertised()
    if not workload.tasks:
        return None
    t = max(workload.tasks, key=lambda t: t.memory_mb)  # (the largest, so the fix named is enough)
    if t.memory_mb > whole.memory_mb + 1e-9:
        return (f"{workload.name}'s task {t.id} ({t.category}) uses {t.memory_mb:,.0f} MB, more than a "
                f"node's worker has ({whole.memory_mb:,.0f} MB): give --node-memory {math.ceil(t.memory_mb)} or more")
    t = max(workload.tasks, key=lambda t: t.cores)
    if workload.declared and t.cores > whole.cores + 1e-9:
        return (f"{workload.name}'s task {t.id} ({t.category}) declares {t.cores:g} cores, more than a node's "
                f"worker advertises ({whole.cores:g}): give --node-cores {math.ceil(t.cores)} or more")
    return None


#: a node is never prepared faster than this many standard deviations below the mean
#: latency: the normal draw is clipped there (a 4-sd draw happens once in 30,000), so the
#: lower bound (:mod:`hta.sim.oracle`) may assume no sooner arrival
LATENCY_FLOOR_SD = 4.0


def min_draw_s(cluster: ClusterModel) -> float:
    """The smallest preparation latency the world draws: max(1 s, mean − 4 sd)."""
    return max(1.0, cluster.latency_mean_s - LATENCY_FLOOR_SD * max(cluster.latency_sd_s, 0.0))


@dataclass
class SimHost:
    """A node of the cluster: its room for workers and the workers on it."""

    id: int
    #: when it is prepared (workers on it can start)
    ready_at: float
    free_c: float
    free_m: float
    workers: set[str] = field(default_factory=set)
    #: when its last worker left (None: it has one)
    empty_since: float | None = None


@dataclass
class SimNode:
    """A worker (a pod) and the node it runs on (``host``).

    ``limits`` is what the pod asks of its node: its room there and its CPU quota (what a
    task's speed and the monitor's reading are held to). ``capacity`` is what its worker
    advertises to the master, as ``hta.node.capacity`` reads it: whole cores and MB, so a
    third of a 4-core node asks 1.33 cores and runs tasks on 1, as in a real pod."""

    id: str
    capacity: Resources
    requested_at: float
    limits: Resources = field(default_factory=Resources)
    connected_at: float | None = None
    free_c: float = 0.0
    free_m: float = 0.0
    #: task ids in start order (a dict, not a set: iteration order must not depend on
    #: string hashing, or runs of the same seed differ between processes)
    running: dict[str, None] = field(default_factory=dict)
    gone: bool = False
    #: the node (host) the worker runs on
    host: int | None = None
    #: tasks it may still accept (None: no limit; a worker that runs to completion)
    tasks_left: int | None = None
    #: when it left by itself (a worker that ran to completion)
    gone_at: float | None = None
    #: bumped whenever the worker starts a task: an idle-exit timer armed before is void
    idle_token: int = 0
    #: when it was bound to a node (later than ``requested_at`` if it waited for room)
    placed_at: float | None = None
    #: how long after it was bound its node was still being prepared (0: one already there)
    node_wait_s: float = 0.0

    @property
    def address(self) -> str:
        """The worker's connection as the master names it (``ip:port``)."""
        return f"{self.id}:9123"

    @property
    def free(self) -> Resources:
        return Resources(cores=self.free_c, memory_mb=self.free_m, disk_mb=self.capacity.disk_mb)


def quota_of(node: "SimNode", alloc: Resources) -> Resources:
    """The CPU limit a task allocated ``alloc`` runs within: its pod's (a task may use what
    its allocation does not say, up to the pod's limit, and the monitor reads that), except
    on a pod whose worker advertises more cores than it may use — one under a core
    advertises a whole one — where the tasks share the limit by their allocated cores: two
    half-core tasks on a pod of half a core run at a quarter core each."""
    if alloc is node.capacity or node.capacity.cores <= node.limits.cores + 1e-9:
        return node.limits
    return Resources(cores=alloc.cores * node.limits.cores / node.capacity.cores)


def throttled(t: SimTask, pod: Resources) -> float:
    """How much longer ``t`` runs in ``pod`` than on what it needs: the cores it keeps busy
    over the pod's, when that is more than 1 (a CFS quota's throttling)."""
    busy = t.cores * t.cpu_util
    return busy / pod.cores if pod.cores > 0 and busy > pod.cores + 1e-9 else 1.0


def reads_cores(t: SimTask, pod: Resources) -> float:
    """The peak cores the resource monitor reads of ``t`` in ``pod``: its own, or the pod's
    where the quota holds it to fewer."""
    return float(min(t.cores, pod.cores)) if pod.cores > 0 else float(t.cores)


@dataclass
class SimRun:
    task: SimTask
    node: SimNode
    start: float
    alloc: Resources
    token: int
    #: what the master reports of it (built once: it does not change while it runs)
    status: object | None = None
    #: the cores its threads keep busy within its quota (what a CPU metric reads of it)
    busy_cores: float = 0.0


class World:
    """Cluster, Work Queue and Makeflow; the policy loop is not here (it is the controller's)."""

    def __init__(self, workload: Workload, cluster: ClusterModel | None = None, seed: int = 0):
        self.workload = workload
        self.cluster = cluster or ClusterModel()
        self.rng = random.Random(seed)
        self.env = simpy.Environment()
        self.tasks = workload.by_id()
        self.children: dict[str, list[str]] = {tid: [] for tid in self.tasks}
        self.parents_left: dict[str, int] = {}
        for t in workload.tasks:
            self.parents_left[t.id] = len(t.parents)
            for p in t.parents:
                self.children[p].append(t.id)
        #: makeflow's node id of each rule (its position in the workflow, from 0)
        self.rule = {t.id: i for i, t in enumerate(workload.tasks)}
        #: Work Queue task id of each submitted task (the master numbers submissions from 1)
        self.task_id: dict[str, int] = {}
        self.check_acyclic()
        self.waiting = WaitQueue()
        self.waiting_ids = WaitingIds()
        #: waiting tasks per category (the master's queue_status counts)
        self.waiting_by_category: dict[str, int] = {}
        #: what makeflow's log says of each released rule (node → (state, job)), and every
        #: change of it in order (the lookahead reads them incrementally)
        self.states: dict[int, tuple[NodeState, int]] = {}
        self.state_log: list[tuple[int, NodeState, int]] = []
        self.whole_worker: set[str] = set()  # tasks to retry on a whole worker
        self.runs: dict[str, SimRun] = {}
        self.done: set[str] = set()
        self.released: set[str] = set()
        self.nodes: dict[str, SimNode] = {}
        self.order: list[str] = []  # connected nodes, in connection order
        #: nodes asked for and not connected yet (not gone), in request order
        self.pending_nodes: dict[str, SimNode] = {}
        #: nodes connected since the backend last looked, and addresses of nodes gone after connecting
        self.newly_connected: list[SimNode] = []
        self.retired_addresses: set[str] = set()
        #: what the master itself has measured of each category (for its allocations)
        self.master_learner = IncrementalCategoryLearner()
        #: summaries of completed tasks, in completion order (the resource monitor's files)
        self.summaries: list[TaskSummary] = []
        self.retries = 0
        self.lost_work = 0.0
        self.finished_at: float | None = None
        self.finished = self.env.event()
        self.changed = self.env.event()
        #: the cluster's nodes (each holds workers up to its shape), oldest first
        self.hosts: dict[int, SimHost] = {}
        #: workers asked for that no node has room for (the node cap reached), in order
        self.unplaced: deque[str] = deque()
        self._seq = 0
        self._host_seq = 0
        self._token = 0
        #: what the workers do on their own (None: they stay until drained or removed)
        self.lifetime: WorkerLifetime | None = None
        #: workers that left on their own since the backend last looked
        self.exited: list[SimNode] = []

    def check_acyclic(self) -> None:
        left = dict(self.parents_left)
        ready = deque(t for t, n in left.items() if n == 0)
        seen = 0
        while ready:
            t = ready.popleft()
            seen += 1
            for c in self.children[t]:
                left[c] -= 1
                if left[c] == 0:
                    ready.append(c)
        if seen != len(self.tasks):
            raise ValueError("the workflow has a dependency cycle")

    def _changed(self) -> None:
        if not self.changed.triggered:
            self.changed.succeed()

    def rearm(self) -> simpy.Event:
        """A fresh :attr:`changed` event (after the watcher has looked)."""
        if self.changed.triggered:
            self.changed = self.env.event()
        return self.changed

    def start(self) -> None:
        """Release the tasks that have no parents (makeflow's first submissions)."""
        self._release_all([t.id for t in self.workload.tasks if not t.parents])
        self._dispatch()

    # -- Makeflow's view ---------------------------------------------------------------
    def node_states(self) -> dict[int, tuple[NodeState, int]]:
        """What makeflow's log would say of each rule: (state, Work Queue task id)."""
        return dict(self.states)

    def _set_state(self, tid: str, state: NodeState) -> None:
        rule, n = self.rule[tid], self.task_id[tid]
        self.states[rule] = (state, n)
        self.state_log.append((rule, state, n))

    # -- cluster --------------------------------------------------------------------------
    def add_empty_nodes(self, n: int) -> None:
        """Starting nodes with no worker yet."""
        for _ in range(n):
            self._empty(self._new_host(0.0))

    def _new_host(self, ready_at: float) -> SimHost:
        self._host_seq += 1
        shape = self.cluster.node_shape
        host = SimHost(self._host_seq, ready_at, shape.cores, shape.memory_mb)
        self.hosts[host.id] = host
        return host

    def _host_with_room(self, shape: Resources) -> SimHost | None:
        """The first node (oldest first) with room for a worker of ``shape`` — as the
        scheduler binds a pod to a node that fits it before the cluster autoscaler adds one."""
        for host in self.hosts.values():
            if host.free_c >= shape.cores - 1e-9 and host.free_m >= shape.memory_mb - 1e-9:
                return host
        return None

    def request_node(self, now: float, provision: bool = True, shape: Resources | None = None) -> SimNode:
        """Ask for a worker of ``shape`` (default: a whole node). It connects at once if not
        ``provision``; on a node with room for it (one being prepared, or one already there:
        an empty node lasts ``empty_node_ttl_s``) once that node is ready, ``pod_start_s``
        later; else on a new node after a preparation latency (``max_nodes`` nodes at most:
        past that it waits for room)."""
        self._seq += 1
        whole = self.cluster.node_shape
        if shape is None:
            shape = whole
        else:  # a pod never outgrows its node: the scheduler could not place it
            shape = Resources(cores=min(shape.cores, whole.cores), memory_mb=min(shape.memory_mb, whole.memory_mb),
                              disk_mb=min(shape.disk_mb, whole.disk_mb))
        node = SimNode(f"n{self._seq}", shape.advertised(), requested_at=now, limits=shape)
        if self.lifetime is not None and self.lifetime.max_tasks is not None:
            node.tasks_left = max(1, self.lifetime.max_tasks)
        self.nodes[node.id] = node
        self.pending_nodes[node.id] = node
        if not provision:
            self._place(node, self._new_host(now))
            self._connect(node)
        else:
            self._schedule(node)
        return node

    def _schedule(self, node: SimNode) -> None:
        """Bind a pending worker to a node (or queue it for room) and start it there."""
        now = self.env.now
        host = self._host_with_room(node.limits)
        if host is None and len(self.hosts) < max(self.cluster.max_nodes, self.cluster.start_nodes):
            draw = max(min_draw_s(self.cluster), self.rng.gauss(self.cluster.latency_mean_s, self.cluster.latency_sd_s))
            host = self._new_host(now + draw + self.cluster.pull_s)
        if host is None:
            self.unplaced.append(node.id)  # unschedulable until a node has room
            return
        self._place(node, host)
        node.node_wait_s = max(host.ready_at, now) - now
        self.env.process(self._provision(node, node.node_wait_s + self.cluster.pod_start_s))

    def _place(self, node: SimNode, host: SimHost) -> None:
        node.host = host.id
        node.placed_at = self.env.now
        host.free_c -= node.limits.cores
        host.free_m -= node.limits.memory_mb
        host.workers.add(node.id)
        host.empty_since = None

    def _node_sized(self, node: SimNode) -> bool:
        whole = self.cluster.node_shape
        return node.limits.cores >= whole.cores - 1e-9 and node.limits.memory_mb >= whole.memory_mb - 1e-9

    def _provision(self, node: SimNode, delay: float):
        yield self.env.timeout(delay)
        self._connect(node)

    def _release_host(self, node: SimNode, now: float) -> None:
        """The worker left its node: the room is free; an empty node stays for
        ``empty_node_ttl_s`` (the cluster autoscaler's scale-down-unneeded-time), then goes.
        A worker waiting for room is placed first."""
        host = self.hosts.get(node.host) if node.host is not None else None
        if host is None:
            return
        host.free_c += node.limits.cores
        host.free_m += node.limits.memory_mb
        host.workers.discard(node.id)
        if not host.workers:
            self._empty(host)
        waiting, self.unplaced = self.unplaced, deque()
        for wid in waiting:
            if not self.nodes[wid].gone:
                self._schedule(self.nodes[wid])

    def _empty(self, host: SimHost) -> None:
        now = self.env.now
        host.empty_since = now

        def remove(_ev, host=host, since=now):
            if host.empty_since == since and not host.workers:
                self.hosts.pop(host.id, None)
        if self.cluster.empty_node_ttl_s > 0:
            self.env.timeout(self.cluster.empty_node_ttl_s).callbacks.append(remove)
        else:
            remove(None)

    @property
    def empty_nodes(self) -> dict[int, float]:
        """Nodes without a worker, with the time they emptied."""
        return {h.id: h.empty_since for h in self.hosts.values() if not h.workers and h.empty_since is not None}

    def _connect(self, node: SimNode) -> None:
        if node.gone:
            return
        node.connected_at = self.env.now
        node.free_c, node.free_m = node.capacity.cores, node.capacity.memory_mb
        self.order.append(node.id)
        del self.pending_nodes[node.id]
        self.newly_connected.append(node)
        self._changed()
        self._dispatch()
        if self.lifetime is not None and not node.running:
            self._arm_idle_exit(node)

    # -- workers that run to completion ---------------------------------------------------
    def _arm_idle_exit(self, node: SimNode) -> None:
        """The worker just fell idle: it leaves after ``idle_timeout_s`` unless a task starts."""
        timeout = self.lifetime.idle_timeout_s if self.lifetime is not None else None
        if timeout is None:
            return
        token = node.idle_token

        def expire(_ev, node=node, token=token):
            if node.idle_token == token and not node.gone and not node.running:
                self._exit(node)
        self.env.timeout(timeout).callbacks.append(expire)

    def _exit(self, node: SimNode) -> None:
        """The worker's job completed: it leaves by itself (idle: nothing is lost)."""
        if self.retire(node.id, busy_ok=False) is not None:
            node.gone_at = self.env.now
            self.exited.append(node)

    def _task_ended_on(self, node: SimNode) -> None:
        if self.lifetime is None or node.gone or node.running:
            return
        if node.tasks_left == 0:
            self._exit(node)
        else:
            self._arm_idle_exit(node)

    def retire(self, node_id: str, busy_ok: bool) -> int | None:
        """Take a node away: None if it is unknown, gone, or busy and not ``busy_ok``;
        else the number of tasks it was running (sent back to the queue, first in line)."""
        node = self.nodes.get(node_id)
        if node is None or node.gone or (node.running and not busy_ok):
            return None
        node.gone = True
        self._release_host(node, self.env.now)
        if node.connected_at is None:  # still on its way: the request is cancelled
            del self.pending_nodes[node.id]
            self._changed()
            return 0
        self.retired_addresses.add(node.address)
        now = self.env.now
        lost = 0
        for tid in reversed(list(node.running)):  # back to the queue's head in their start order
            r = self.runs.pop(tid)
            self.lost_work += (now - r.start) * r.alloc.cores
            lost += 1
            self._wait(tid)
        node.running.clear()
        self.order.remove(node.id)
        self._changed()
        self._dispatch()
        return lost

    # -- Work Queue -------------------------------------------------------------------------
    def declared(self, t: SimTask) -> Resources | None:
        """What the task declares to Work Queue (None: nothing)."""
        return Resources(cores=t.cores, memory_mb=t.memory_mb) if self.workload.declared else None

    def request_of(self, tid: str) -> Resources:
        """What the master will allocate the task (``Resources()``: a whole worker)."""
        t = self.tasks[tid]
        return allocation_request(self.declared(t), self.master_learner.model(t.category),
                                  auto=self.cluster.auto_allocation, exceeded=tid in self.whole_worker)

    def kind(self, tid: str) -> tuple:
        """What decides the master's allocation of a task besides its category's measurements:
        alike tasks (equal kinds) are given alike allocations."""
        t = self.tasks[tid]
        return t.category, tid in self.whole_worker, (t.cores, t.memory_mb) if self.workload.declared else None

    def _wait(self, tid: str) -> None:
        """Into the master's ready list, at its head: the master dispatches newest first
        (a task sent back by a lost worker or retried on a whole worker too)."""
        kind = self.kind(tid)
        self.waiting.appendleft(tid, kind)
        self.waiting_ids.add(self.task_id[tid], kind)
        cat = kind[0]
        self.waiting_by_category[cat] = self.waiting_by_category.get(cat, 0) + 1

    def _release_all(self, tids: list[str]) -> None:
        """Makeflow submits the rules that became ready together (``tids``, in the workflow's
        order) last in the file first: its node list is built newest-parsed first."""
        for tid in reversed(tids):
            self._release(tid)

    def _release(self, tid: str) -> None:
        self.released.add(tid)
        self.task_id[tid] = len(self.task_id) + 1
        self._set_state(tid, NodeState.RUNNING)
        self._wait(tid)
        self._changed()

    def _dispatch(self) -> None:
        """Work Queue's rule: waiting tasks in order, each to the first worker with room.
        A task that fits nowhere is passed over, and with it the rest of its run (alike
        tasks, the same allocation: nothing has been freed meanwhile)."""
        live = [self.nodes[i] for i in self.order]
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
                disk = None
                node = None
                for n in live:
                    if n.tasks_left == 0 or (retry and not self._node_sized(n)):
                        continue
                    disk = n.capacity.disk_mb
                    if fit_count(request, _Room(n.free_c, n.free_m, disk), n.capacity, 1):
                        node = n
                        break
                if node is None:
                    break
                tid = tids.popleft()
                started += 1
                self.waiting_ids.remove(self.task_id[tid])
                self.waiting_by_category[run[0][0]] -= 1
                self._start(self.tasks[tid], node, allocated(request, node.capacity))
            else:
                continue
            if all(n.free_c <= 1e-9 for n in live):
                break
        if started:
            self.waiting.taken(started)

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
        overhead = self.cluster.task_overhead_by_category_s.get(t.category, self.cluster.task_overhead_s)
        duration = t.runtime_s * (0.5 if killed else slow) + overhead
        ev = self.env.timeout(duration)
        ev.callbacks.append(lambda _ev, tid=t.id, tok=run.token, bad=killed: self._finish(tid, tok, bad))
        self._changed()

    def _finish(self, tid: str, token: int, failed: bool) -> None:
        r = self.runs.get(tid)
        if r is None or r.token != token:
            return  # the node was removed meanwhile; the task went back to the queue
        self._complete(tid, r, failed)
        self._task_ended_on(r.node)

    def _complete(self, tid: str, r: SimRun, failed: bool) -> None:
        now = self.env.now
        del self.runs[tid]
        node = r.node
        node.free_c += r.alloc.cores
        node.free_m += r.alloc.memory_mb
        node.running.pop(tid, None)
        self._changed()
        if failed:
            self.retries += 1
            self.lost_work += (now - r.start) * r.alloc.cores
            self.whole_worker.add(tid)
            self._wait(tid)
            self._dispatch()
            return
        self._summarize(r.task, r.start, now, quota_of(r.node, r.alloc))
        self.done.add(tid)
        self._set_state(tid, NodeState.COMPLETE)
        ready = []
        for c in self.children[tid]:
            self.parents_left[c] -= 1
            if self.parents_left[c] == 0:
                ready.append(c)
        self._release_all(ready)
        if len(self.done) == len(self.tasks):
            self.finished_at = now
            self.finished.succeed()
            return
        self._dispatch()

    def _summarize(self, t: SimTask, start: float, end: float, pod: Resources) -> None:
        """The resource monitor's summary of a completed task: its true peak and runtime, or,
        on a pod with fewer cores than it needs, those cores and its stretched runtime."""
        cores = reads_cores(t, pod)
        s = TaskSummary(category=t.category, exit_type="normal", exit_status=0, start=start, end=end,
                        wall_time_s=end - start, cpu_time_s=(end - start) * min(t.cores * t.cpu_util, cores),
                        cores=cores, memory_mb=t.memory_mb)
        self.summaries.append(s)
        self.master_learner.add(s)

    # -- ground truth the backend may measure --------------------------------------------------
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
