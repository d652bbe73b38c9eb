"""The simulated cluster: nodes, the worker pods on them, and how a pod's limits hold the
tasks it runs.

- At most ``max_nodes`` nodes; a node asked for arrives after a latency drawn from
  N(mean, sd), never below mean − 4 sd, plus ``pull_s`` (image pull); ``start_nodes`` are
  there at t = 0.
- Nodes and workers (pods) are apart: a worker of a given shape (a whole node by default)
  goes to the oldest node with room for it (one being prepared included), else to a new
  node; a node leaves with its last worker (or ``empty_node_ttl_s`` later, the cluster
  autoscaler's scale-down-unneeded-time); past the cap a worker waits for room.
- Workers that run to completion (a policy's ``worker_lifetime``, e.g. KEDA's ScaledJob:
  :class:`~hta.policies.base.WorkerLifetime`) accept at most ``max_tasks`` tasks and leave
  once the last has ended, or after ``idle_timeout_s`` without a task; never while they run
  one.
- A pod's limits hold its tasks as Kubernetes enforces them: more cores than the pod runs
  throttled to the pod's (its runtime stretched, its measured peak the pod's cores), more
  memory is killed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import simpy
from pydantic import BaseModel, Field

from hta.model import Resources
from hta.policies.base import WorkerLifetime
from hta.sim.workload import SimTask, Workload


class EmptinessPass(BaseModel):
    """How Karpenter removes empty nodes (``consolidationPolicy: WhenEmpty``), as its
    disruption controller does it (sigs.k8s.io/karpenter v1.6, pkg/controllers/disruption:
    controller.go, emptiness.go): one loop, which looks for nodes empty for
    ``consolidateAfter``; finding none it looks again after ``poll_s``; finding some, it
    waits ``validate_s``, keeps those still empty, taints them (no pod lands there from
    then) and deletes them together, then looks again at once. So nodes emptied at
    different moments go at one moment, and a node emptied while a batch is being
    validated waits for that batch and its own: a hold that depends on what else emptied,
    which no single per-node hold reproduces."""

    #: the loop's ``pollingPeriod`` while it finds nothing to do
    poll_s: float = Field(10.0, gt=0)
    #: ``consolidationTTL``: how long it waits before it re-checks what it found
    validate_s: float = Field(15.0, ge=0)
    #: the NodePool's ``consolidateAfter``: a node is a candidate this long after it emptied
    consolidate_after_s: float = Field(0.0, ge=0)
    #: tainted → gone: the drain, the cloud's delete, the finalizers (paid)
    delete_s: float = Field(5.0, ge=0)


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
    #: Karpenter's disruption loop removes emptied nodes in batches (None: each emptied node
    #: goes after its own ``empty_node_ttl_s``, as the cluster-autoscaler and Slurm's power
    #: saving remove them); ``empty_node_ttl_s`` is then not used
    emptiness_pass: EmptinessPass | None = None
    #: the starting nodes never go, empty or not (Slurm's static nodes, a node group's
    #: minimum); paid only while a worker holds one, as a cloud node is
    static_start_nodes: bool = False
    #: the end of ``pod_start_s``, from the pod running to its worker's first task (``hta
    #: worker``'s start, the worker's connection): KEDA counts such a Job as no longer pending
    pod_connect_s: float = 0.0
    #: a worker that leaves on its own (its Job done) holds its room on its node this long
    #: after it left the master: its exit, its container's, the kubelet's report (a pod's
    #: requests are freed once it has terminated)
    pod_exit_s: float = 0.0
    #: added to each task's run on a worker: dispatch, input transfer, the resource
    #: monitor's start, the result's return (what a real master adds to a runtime)
    task_overhead_s: float = 0.0
    #: MB/s the master sends files to workers and brings outputs back at, one transfer at a
    #: time (its one thread sends a task's inputs before it goes on); an input a worker has
    #: cached is not sent again (0: files cost nothing; :data:`hta.sim.costs.MEASURED`)
    transfer_mb_per_s: float = 0.0
    #: the same per category, where measured (overrides ``task_overhead_s``)
    task_overhead_by_category_s: dict[str, float] = {}
    #: Work Queue gives a task of a category it has measured that category's peak, so
    #: several share a worker (what makeflow ``--allocation=throughput`` is documented to
    #: do: the "packed" world). False, the default: a task that declares nothing takes a
    #: whole worker, always, which is what CCTools 8.0 does under ``makeflow -T wq``, with
    #: that option or without (docs/decisions/0010-whole-worker-tasks.md), and what
    #: production assumes
    auto_allocation: bool = False

    @property
    def keeps_empty_nodes(self) -> bool:
        """Whether a node outlives its last worker (else it leaves with it)."""
        return self.empty_node_ttl_s > 0 or self.emptiness_pass is not None

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
    #: the files its worker has cached (Work Queue sends an input to a worker once)
    cache: set[str] = field(default_factory=set)
    gone: bool = False
    #: the node (host) the worker runs on
    host: int | None = None
    #: tasks it may still accept (None: no limit; a worker that runs to completion)
    tasks_left: int | None = None
    #: tasks it holds without running them: sent once its ``tasks_left`` reached 0, handed
    #: back when it leaves (``hta worker --tasks N``: the master sends the next task as soon
    #: as a slot frees, and the worker holds it until its other tasks end)
    held: set[str] = field(default_factory=set)
    #: when it left by itself (a worker that ran to completion)
    gone_at: float | None = None
    #: bumped whenever the worker starts a task: an idle-exit timer armed before is void
    idle_token: int = 0
    #: when it was bound to a node (later than ``requested_at`` if it waited for room)
    placed_at: float | None = None
    #: how long after it was bound its node was still being prepared (0: one already there)
    node_wait_s: float = 0.0
    #: when its pod runs (``pod_connect_s`` before it connects; None: not placed yet)
    started_at: float | None = None

    @property
    def address(self) -> str:
        """The worker's connection as the master names it (``ip:port``)."""
        return f"{self.id}:9123"

    @property
    def free(self) -> Resources:
        return Resources(cores=self.free_c, memory_mb=self.free_m, disk_mb=self.capacity.disk_mb)


def quota_of(node: SimNode, alloc: Resources) -> Resources:
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


def _nothing() -> None:
    return None


class SimCluster:
    """The nodes and worker pods of the world. What the master does with a worker is not
    here: :attr:`dispatch` is called when a worker connects or leaves (the master may place
    tasks), :attr:`evict` takes a retired worker's running tasks back (it returns how many),
    and :attr:`on_change` is called at every change a watcher may want to see."""

    def __init__(self, model: ClusterModel, env: simpy.Environment, rng: random.Random):
        self.model = model
        self.env = env
        self.rng = rng
        self.nodes: dict[str, SimNode] = {}
        self.order: list[str] = []  # connected nodes, in connection order
        #: nodes asked for and not connected yet (not gone), in request order
        self.pending_nodes: dict[str, SimNode] = {}
        #: nodes connected since the backend last looked, and addresses of nodes gone after connecting
        self.newly_connected: list[SimNode] = []
        self.retired_addresses: set[str] = set()
        #: the cluster's nodes (each holds workers up to its shape), oldest first
        self.hosts: dict[int, SimHost] = {}
        #: workers asked for that no node has room for (the node cap reached), in order
        self.unplaced: deque[str] = deque()
        #: what the workers do on their own (None: they stay until drained or removed)
        self.lifetime: WorkerLifetime | None = None
        #: the workers' pods have no affinity for each other: the scheduler spreads them
        self.spread = False
        #: workers that left on their own since the backend last looked
        self.exited: list[SimNode] = []
        #: when each node kept empty went, or will go (``empty_node_ttl_s``): paid until then
        self.held_until: dict[int, float] = {}
        #: how long each node that went had stayed empty first (what a node watch sees)
        self.empty_holds: list[float] = []
        self.dispatch: Callable[[], None] = _nothing
        self.evict: Callable[[SimNode], int] = lambda node: 0
        self.on_change: Callable[[], None] = _nothing
        self._seq = 0
        self._host_seq = 0
        #: each node Karpenter deleted: (emptied, tainted, gone), as a node watch would see it
        self.disruptions: list[tuple[float, float, float]] = []
        #: nodes Karpenter has tainted to delete; the batch it is validating; when it looks next
        self._disrupted: set[int] = set()
        self._validating: list[SimHost] = []
        self._next_look = 0.0
        self._ended = False
        if model.emptiness_pass is not None:
            env.process(self._emptiness_loop(model.emptiness_pass))

    # -- nodes ---------------------------------------------------------------------------
    def add_empty_nodes(self, n: int) -> None:
        """Starting nodes with no worker yet."""
        for _ in range(n):
            self._empty(self._new_host(0.0))

    def _new_host(self, ready_at: float) -> SimHost:
        self._host_seq += 1
        shape = self.model.node_shape
        host = SimHost(self._host_seq, ready_at, shape.cores, shape.memory_mb)
        self.hosts[host.id] = host
        return host

    def _host_with_room(self, shape: Resources) -> SimHost | None:
        """A node with room for a worker of ``shape``, as the scheduler binds a pod to a node
        that fits it before the node autoscaler adds one: the oldest, for pods that prefer
        the nodes holding the run's workers (they fill nodes one by one); for pods that do
        not (:attr:`spread`), the least allocated, oldest first among equals, as the default
        scheduler's ``NodeResourcesFit`` scores them."""
        fits = [h for h in self.hosts.values()
                if h.free_c >= shape.cores - 1e-9 and h.free_m >= shape.memory_mb - 1e-9 and not self._closed(h)]
        if not fits or not self.spread:
            return fits[0] if fits else None
        whole = self.model.node_shape
        return max(fits, key=lambda h: (round(h.free_c / whole.cores + h.free_m / whole.memory_mb, 9), -h.id))

    def _closed(self, host: SimHost) -> bool:
        """An emptied node its autoscaler has marked for deletion: no new pod lands there."""
        return host.id in self._disrupted

    def node_sized(self, node: SimNode) -> bool:
        whole = self.model.node_shape
        return node.limits.cores >= whole.cores - 1e-9 and node.limits.memory_mb >= whole.memory_mb - 1e-9

    @property
    def empty_nodes(self) -> dict[int, float]:
        """Nodes without a worker, with the time they emptied."""
        return {h.id: h.empty_since for h in self.hosts.values() if not h.workers and h.empty_since is not None}

    def node_hold_s(self) -> float | None:
        """How long an empty node stays, as someone watching the nodes would tell: the
        median hold of the last ten that went after emptying; None before one has."""
        return statistics.median(self.empty_holds[-10:]) if self.empty_holds else None

    def _empty(self, host: SimHost) -> None:
        now = self.env.now
        host.empty_since = now

        def remove(_ev: object, host: SimHost = host, since: float = now) -> None:
            if host.empty_since == since and not host.workers:
                self._remove_host(host)
        if self._static(host) or self.model.emptiness_pass is not None:
            return  # (Karpenter's loop finds it)
        if self.model.empty_node_ttl_s > 0:
            until = self._hold_end(host, now)
            self.held_until[host.id] = until  # (a worker placed on it meanwhile
            self.env.timeout(until - now).callbacks.append(remove)  # moves it on)
        else:
            remove(None)

    def _remove_host(self, host: SimHost) -> None:
        self.hosts.pop(host.id, None)
        if host.empty_since is not None:
            self.empty_holds.append(self.env.now - host.empty_since)
        if self.unplaced and host.id in self._disrupted:
            self._place_waiting()  # (a closed node went: a new one fits under the cap)

    def end_of_run(self, now: float) -> None:
        """The run's end stops every worker still up: each node that held one empties then
        and stays its hold, as a node emptied before the end does (a node still being
        prepared comes up first). Real clusters bill it so: Karpenter's ``consolidateAfter``
        and Slurm's ``SuspendTime`` start when the last job or pod on a node goes, whoever
        ended it."""
        if self.model.emptiness_pass is not None:
            self._ended = True
            self._last_passes(self.model.emptiness_pass, now)
            return
        if self.model.empty_node_ttl_s <= 0:
            return
        for host in self.hosts.values():
            if host.workers and not self._static(host):
                self.held_until[host.id] = self._hold_end(host, now)

    # -- Karpenter's emptiness pass --------------------------------------------------------
    def _candidates(self, p: EmptinessPass, now: float) -> list[SimHost]:
        """Nodes empty (and ready) for ``consolidateAfter``, not yet tainted."""
        return [h for h in self.hosts.values()
                if not h.workers and h.empty_since is not None and h.id not in self._disrupted
                and not self._static(h) and now >= max(h.empty_since, h.ready_at) + p.consolidate_after_s]

    def _emptiness_loop(self, p: EmptinessPass) -> Generator[simpy.Event, object, None]:
        """A simpy process: Karpenter's disruption loop, as far as empty nodes go."""
        while not self._ended:
            found = self._candidates(p, self.env.now)
            if not found:
                self._next_look = self.env.now + p.poll_s
                yield self.env.timeout(p.poll_s)
                continue
            self._validating, self._next_look = found, self.env.now + p.validate_s
            yield self.env.timeout(p.validate_s)
            if self._ended:
                return
            still = {h.id for h in self._candidates(p, self.env.now)}
            batch = [h for h in found if h.id in still]
            self._validating = []
            for host in batch:
                self._disrupt(host, self.env.now + p.delete_s)
            if not batch:  # (every one took a pod meanwhile: Karpenter waits a poll)
                self._next_look = self.env.now + p.poll_s
                yield self.env.timeout(p.poll_s)

    def _disrupt(self, host: SimHost, until: float) -> None:
        self._disrupted.add(host.id)
        self.held_until[host.id] = until
        self.disruptions.append((max(host.empty_since or 0.0, host.ready_at), self.env.now, until))

        def remove(_ev: object) -> None:
            self._remove_host(host)
        self.env.timeout(until - self.env.now).callbacks.append(remove)

    def _last_passes(self, p: EmptinessPass, now: float) -> None:
        """When the loop deletes what is left at the run's end, every node then empty: the
        batch it is validating at ``_next_look``, then the others as they become candidates
        (a node still being prepared once it is up), a batch a pass."""
        look = max(now, self._next_look)
        for host in self._validating:
            self.held_until[host.id] = look + p.delete_s
            self.disruptions.append((max(host.empty_since or now, host.ready_at), look, look + p.delete_s))
        done = {h.id for h in self._validating} | self._disrupted
        empty = {h.id: max(now if h.workers else (h.empty_since or now), h.ready_at)
                 for h in self.hosts.values() if h.id not in done and not self._static(h)}
        due = {i: t + p.consolidate_after_s for i, t in empty.items()}
        while due:
            batch = [i for i, t in due.items() if t <= look + 1e-9]
            if not batch:
                look += p.poll_s * max(1, math.ceil((min(due.values()) - look) / p.poll_s - 1e-9))
                continue
            look += p.validate_s
            for i in batch:
                self.held_until[i] = look + p.delete_s
                self.disruptions.append((empty[i], look, look + p.delete_s))
                del due[i]

    def _hold_end(self, host: SimHost, emptied_at: float) -> float:
        """When a node emptied at ``emptied_at`` goes: its hold from then, or from when it is
        ready if it is still being prepared (a cancelled pod does not cancel its node)."""
        return max(emptied_at, host.ready_at) + self.model.empty_node_ttl_s

    def _static(self, host: SimHost) -> bool:
        return self.model.static_start_nodes and host.id <= self.model.start_nodes

    # -- workers ---------------------------------------------------------------------------
    def request_node(self, now: float, provision: bool = True, shape: Resources | None = None) -> SimNode:
        """Ask for a worker of ``shape`` (default: a whole node). It connects at once if not
        ``provision``; on a node with room for it (one being prepared, or one already there:
        an empty node lasts ``empty_node_ttl_s``) once that node is ready, ``pod_start_s``
        later; else on a new node after a preparation latency (``max_nodes`` nodes at most:
        past that it waits for room)."""
        self._seq += 1
        whole = self.model.node_shape
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
        if host is None and len(self.hosts) < max(self.model.max_nodes, self.model.start_nodes):
            draw = max(min_draw_s(self.model), self.rng.gauss(self.model.latency_mean_s, self.model.latency_sd_s))
            host = self._new_host(now + draw + self.model.pull_s)
        if host is None:
            self.unplaced.append(node.id)  # unschedulable until a node has room
            return
        self._place(node, host)
        node.node_wait_s = max(host.ready_at, now) - now
        delay = node.node_wait_s + self.model.pod_start_s
        node.started_at = now + max(node.node_wait_s, delay - self.model.pod_connect_s)
        self.env.process(self._provision(node, delay))

    def _place(self, node: SimNode, host: SimHost) -> None:
        node.host = host.id
        node.placed_at = self.env.now
        host.free_c -= node.limits.cores
        host.free_m -= node.limits.memory_mb
        host.workers.add(node.id)
        host.empty_since = None
        self.held_until.pop(host.id, None)  # (paid with its workers again)

    def _provision(self, node: SimNode, delay: float) -> Generator[simpy.Event, object, None]:
        """A simpy process: the worker connects ``delay`` from now."""
        yield self.env.timeout(delay)
        self._connect(node)

    def _release_host(self, node: SimNode) -> None:
        """The worker left its node: the room is free; an empty node stays for
        ``empty_node_ttl_s``, then goes. A worker waiting for room is placed first."""
        host = self.hosts.get(node.host) if node.host is not None else None
        if host is None:
            return
        host.free_c += node.limits.cores
        host.free_m += node.limits.memory_mb
        host.workers.discard(node.id)
        if not host.workers:
            self._empty(host)
        self._place_waiting()

    def _place_waiting(self) -> None:
        """Room freed (a worker left, or a node went under the cap): the pods that wait for it."""
        waiting, self.unplaced = self.unplaced, deque()
        for wid in waiting:
            if not self.nodes[wid].gone:
                self._schedule(self.nodes[wid])

    def _connect(self, node: SimNode) -> None:
        if node.gone:
            return
        node.connected_at = self.env.now
        node.free_c, node.free_m = node.capacity.cores, node.capacity.memory_mb
        self.order.append(node.id)
        del self.pending_nodes[node.id]
        self.newly_connected.append(node)
        self.on_change()
        self.dispatch()
        if self.lifetime is not None and not node.running:
            self._arm_idle_exit(node)

    def retire(self, node_id: str, busy_ok: bool, exiting_s: float = 0.0) -> int | None:
        """Take a worker away: None if it is unknown, gone, or busy and not ``busy_ok``;
        else the number of tasks it was running (taken back by :attr:`evict`). Its pod
        keeps its room ``exiting_s`` longer."""
        node = self.nodes.get(node_id)
        if node is None or node.gone or (node.running and not busy_ok):
            return None
        node.gone = True
        if exiting_s > 0 and node.connected_at is not None:
            self.env.timeout(exiting_s).callbacks.append(lambda _ev: self._release_host(node))
        else:
            self._release_host(node)
        if node.connected_at is None:  # still on its way: the request is cancelled
            del self.pending_nodes[node.id]
            self.on_change()
            return 0
        self.retired_addresses.add(node.address)
        lost = self.evict(node)
        self.order.remove(node.id)
        self.on_change()
        self.dispatch()
        return lost

    # -- workers that run to completion ---------------------------------------------------
    def _arm_idle_exit(self, node: SimNode) -> None:
        """The worker just fell idle: it leaves after ``idle_timeout_s`` unless a task starts."""
        timeout = self.lifetime.idle_timeout_s if self.lifetime is not None else None
        if timeout is None:
            return
        token = node.idle_token

        def expire(_ev: object, node: SimNode = node, token: int = token) -> None:
            if node.idle_token == token and not node.gone and not node.running:
                self._exit(node)
        self.env.timeout(timeout).callbacks.append(expire)

    def _exit(self, node: SimNode) -> None:
        """The worker's job completed: it leaves by itself (nothing is lost: it runs no task;
        the tasks it held go back to the queue)."""
        if self.retire(node.id, busy_ok=not set(node.running) - node.held, exiting_s=self.model.pod_exit_s) is not None:
            node.gone_at = self.env.now
            self.exited.append(node)

    def task_ended_on(self, node: SimNode) -> None:
        """A task ended on ``node``: a worker that runs to completion may leave now."""
        if self.lifetime is None or node.gone or set(node.running) - node.held:
            return
        if node.tasks_left == 0:
            self._exit(node)
        else:
            self._arm_idle_exit(node)
