"""The domain model every layer speaks: what HTA observes and what it decides.

An :class:`Observation` is everything a policy may know at one instant — the
same fields in production (filled from the Work Queue master, the resource
monitor and the backend) and in the simulator (filled from the simulated
world, never from its ground truth). A :class:`ScaleDecision` is what a policy
answers. Times are seconds on one clock chosen by whoever builds the
observation (the controller uses seconds since the run started).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hta.node.capacity import whole_cores


class Resources(BaseModel):
    """Cores, memory (MB) and disk (MB); a bundle Work Queue allocates as one."""

    model_config = ConfigDict(frozen=True)

    cores: float = 0.0
    memory_mb: float = 0.0
    disk_mb: float = 0.0

    def fits_in(self, free: "Resources") -> bool:
        eps = 1e-9
        return (
            self.cores <= free.cores + eps
            and self.memory_mb <= free.memory_mb + eps
            and self.disk_mb <= free.disk_mb + eps
        )

    @property
    def declares_nothing(self) -> bool:
        """A request of all zeros: Work Queue gives such a task a whole worker."""
        return self.cores <= 0 and self.memory_mb <= 0 and self.disk_mb <= 0

    def count_in(self, free: "Resources") -> int:
        """How many of these fit in ``free`` (dimensions asked as 0 do not limit)."""
        counts = []
        for want, have in (
            (self.cores, free.cores),
            (self.memory_mb, free.memory_mb),
            (self.disk_mb, free.disk_mb),
        ):
            if want > 0:
                counts.append(math.floor(have / want + 1e-9))
        return max(0, min(counts)) if counts else 0

    def split(self, k: int) -> "Resources":
        """One of ``k`` equal parts (a worker pod of which ``k`` fill a node)."""
        return Resources(cores=self.cores / k, memory_mb=self.memory_mb / k, disk_mb=self.disk_mb / k)

    def advertised(self) -> "Resources":
        """What a worker in a pod of these limits advertises to the master: whole cores (at
        least 1) and whole MB (``hta.node.capacity``). A third of a 4-core node asks 1.33
        cores and runs tasks on 1; the simulator's workers advertise the same."""
        return Resources(cores=whole_cores(self.cores), memory_mb=int(self.memory_mb + 1e-6), disk_mb=self.disk_mb)

    def share_of(self, whole: "Resources") -> float:
        """What part of ``whole`` a worker of this shape counts as against a cap of whole
        workers: 1/k for one of k equal parts (:meth:`split`, k ≥ 2), else 1 — a worker that
        reports a little less than it was asked for (whole cores, a cgroup's limit) still
        counts whole, so the cap is never passed.

        A part is known by its memory, within a MB: a pod's limit is whole MiB (``k8s.pods``),
        so a third of 16,000 MB connects as 5,333. Its cores are 1/k of the node's, or the
        whole cores its worker advertises of them (``hta.node.capacity``): a third of a
        4-core node asks 1.33 cores and connects with 1. (A pod that asked cores between
        those, e.g. 1.9 of a 4-core node with a third of its memory, would count a third: HTA
        asks only for exact parts, and a pending pod reports what it asked.)"""
        return _share_of(self.cores, self.memory_mb, whole.cores, whole.memory_mb)

    def plus(self, other: "Resources") -> "Resources":
        return Resources(
            cores=self.cores + other.cores,
            memory_mb=self.memory_mb + other.memory_mb,
            disk_mb=self.disk_mb + other.disk_mb,
        )

    def minus(self, other: "Resources") -> "Resources":
        return Resources(
            cores=self.cores - other.cores,
            memory_mb=self.memory_mb - other.memory_mb,
            disk_mb=self.disk_mb - other.disk_mb,
        )

    def times(self, k: float) -> "Resources":
        return Resources(cores=self.cores * k, memory_mb=self.memory_mb * k, disk_mb=self.disk_mb * k)


@functools.lru_cache(maxsize=256)
def _share_of(cores: float, memory_mb: float, node_cores: float, node_memory_mb: float) -> float:
    """:meth:`Resources.share_of` on plain numbers, cached: a cap check counts every worker's
    share, and a run's workers come in a few shapes."""
    if node_cores <= 0 or cores <= 0 or memory_mb <= 0 or node_memory_mb <= 0:
        return 1.0
    k = round(node_memory_mb / memory_mb)
    if k < 2 or abs(node_memory_mb / k - memory_mb) >= 1.0:
        return 1.0
    part = node_cores / k
    if abs(part - cores) > 1e-6 and cores != math.floor(part + 1e-9):
        return 1.0
    return 1.0 / k


class CategoryModel(BaseModel):
    """What completed tasks of one category really used (resource monitor).

    ``samples == 0`` means never measured: Work Queue then gives such a task a
    whole worker, and so does every estimate made from this model.
    """

    name: str
    samples: int = 0
    peak: Resources = Resources()
    runtime_mean_s: float | None = None
    runtime_median_s: float | None = None
    runtime_p90_s: float | None = None
    runtime_min_s: float | None = None
    runtime_max_s: float | None = None
    declared: Resources | None = None

    @property
    def measured(self) -> bool:
        return self.samples > 0

    def runtime_knots(self) -> list[tuple[float, float]]:
        """(quantile, runtime) points of the measured runtime distribution:
        min at 0, median at 0.5, p90 at 0.9, max at 1 (those kept), linear in
        between. Empty when never measured."""
        if not self.measured or self.runtime_mean_s is None:
            return []
        med = self.runtime_median_s if self.runtime_median_s is not None else self.runtime_mean_s
        pts = [(0.0, self.runtime_min_s if self.runtime_min_s is not None else med), (0.5, med)]
        if self.runtime_p90_s is not None:
            pts.append((0.9, self.runtime_p90_s))
        pts.append((1.0, self.runtime_max_s if self.runtime_max_s is not None else pts[-1][1]))
        out: list[tuple[float, float]] = []
        for q, x in pts:  # keep it monotone whatever the inputs
            out.append((q, max(x, out[-1][1]) if out else x))
        return out

    def runtime_quantile(self, q: float) -> float | None:
        """The q-quantile of the runtime, interpolated between the knots."""
        pts = self.runtime_knots()
        if not pts:
            return None
        q = min(max(q, 0.0), 1.0)
        for (q0, x0), (q1, x1) in zip(pts, pts[1:]):
            if q <= q1:
                return x0 + (x1 - x0) * (q - q0) / (q1 - q0)
        return pts[-1][1]


class TaskGroup(BaseModel):
    """``count`` waiting tasks of one category, each asking ``request``.

    Groups are kept in task-id order: the master's submission order, oldest first. The
    master dispatches the newest first, and the estimator plays them so
    (:mod:`workqueue_bridge.dispatch`). A request of zero
    cores, memory and disk means "a whole worker" (Work Queue's answer for a
    task that declares nothing).
    """

    category: str
    count: int
    request: Resources = Resources()
    #: names the group for DAG lookahead (an upcoming group may wait for it)
    id: str | None = None

    @property
    def whole_worker(self) -> bool:
        return self.request.declares_nothing


class RunningTask(BaseModel):
    task_id: int
    category: str
    allocation: Resources
    started_at: float
    worker: str | None = None
    #: it declared nothing, so Work Queue gave it a whole worker: ``allocation`` is the
    #: worker's size, not what the task uses (see :meth:`Observation.in_use_cores`)
    whole_worker: bool = False


class WorkerInfo(BaseModel):
    """A worker connected to the master."""

    id: str
    capacity: Resources
    in_use: Resources = Resources()
    running: int = 0
    connected_at: float | None = None
    #: since when the worker has run nothing (None: busy, or unknown)
    idle_since: float | None = None
    #: fraction of the worker's cores its processes keep busy (for CPU-based rivals)
    cpu_utilization: float | None = None

    @property
    def idle(self) -> bool:
        return self.running == 0

    @property
    def free(self) -> Resources:
        return self.capacity.minus(self.in_use)


class PendingWorker(BaseModel):
    """A worker asked of the backend that has not connected yet."""

    id: str
    requested_at: float
    shape: Resources


class UpcomingTasks(BaseModel):
    """Tasks the workflow DAG has not released yet (Makeflow releases a task
    when all its parents completed).

    ``after`` names what they wait for: ids of waiting groups or of other
    upcoming groups, or ``"task:<id>"`` for a running task. The estimator
    releases the group when all of them complete within its horizon.
    """

    id: str
    category: str
    count: int
    request: Resources = Resources()
    after: list[str] = Field(default_factory=list)

    @property
    def whole_worker(self) -> bool:
        return self.request.declares_nothing


#: without an ``unschedulable`` phase, a worker bound to a node within this long of its
#: request found room on a node already there (see :class:`LatencyStats`)
FOUND_ROOM_S = 2.0


class LatencyStats(BaseModel):
    """Resource preparation latency L: request → worker connected, for a worker that waited
    for a node (``samples``).

    A worker the scheduler bound at once to a node that had room (pods smaller than a node,
    or a node the cluster autoscaler keeps a while after its last pod left) connects in
    seconds; what it measured is not how long new capacity takes, so it goes to
    ``room_samples``, used only while no worker has waited for a node (a cluster of fixed
    size, where that is how every worker comes). Mixed in, a purchase of 130 small pods, 51
    of which landed beside others, made L 0 s: HTA's horizon shrank to nothing and it
    drained the 51 a second later, as idle workers no task needed within it — while the
    room they had found went with the last pods beside them (BLAST, 200 nodes, 1/3-node
    pods: 1,634 s instead of 1,346). See :meth:`waited_for_node`."""

    samples: list[float] = Field(default_factory=list)
    room_samples: list[float] = Field(default_factory=list)
    prior_s: float = 60.0

    @staticmethod
    def waited_for_node(phases: dict[str, float] | None) -> bool:
        """Did this worker wait for a node, by the phases its backend measured? Kubernetes
        (and the simulator) say it: ``unschedulable`` > 0, the pod was unschedulable until
        a node had room. Else a ``node`` phase (request → bound) of ``FOUND_ROOM_S`` or
        more; a backend that tells neither (local processes): yes."""
        phases = phases or {}
        if "unschedulable" in phases:
            return phases["unschedulable"] > 0
        return phases.get("node", FOUND_ROOM_S) >= FOUND_ROOM_S

    def add(self, latency_s: float, phases: dict[str, float] | None = None) -> None:
        """One connected worker's latency; ``phases`` as its backend measured them."""
        (self.samples if self.waited_for_node(phases) else self.room_samples).append(latency_s)

    def frozen(self) -> "LatencyStats":
        """A copy that later :meth:`add` calls leave alone (what an observation carries): the
        sample lists copied, not deep-copied float by float (that was 3 % of a simulation)."""
        return self.model_copy(update={"samples": list(self.samples), "room_samples": list(self.room_samples)})

    @property
    def measured(self) -> list[float]:
        """The samples :meth:`estimate` reads: those that waited for a node, else the others."""
        return self.samples or self.room_samples

    def estimate(self, statistic: Literal["last", "median"] = "median", window: int = 10) -> float:
        samples = self.measured
        if not samples:
            return self.prior_s
        if statistic == "last":
            return samples[-1]
        recent = sorted(samples[-window:])
        n = len(recent)
        mid = n // 2
        return recent[mid] if n % 2 else (recent[mid - 1] + recent[mid]) / 2


class Observation(BaseModel):
    """Everything a policy may see at one instant."""

    time: float
    waiting: list[TaskGroup] = Field(default_factory=list)
    running: list[RunningTask] = Field(default_factory=list)
    workers: list[WorkerInfo] = Field(default_factory=list)
    pending: list[PendingWorker] = Field(default_factory=list)
    categories: dict[str, CategoryModel] = Field(default_factory=dict)
    upcoming: list[UpcomingTasks] = Field(default_factory=list)
    latency: LatencyStats = Field(default_factory=LatencyStats)
    worker_shape: Resources
    min_workers: int = 0
    max_workers: int = 1
    tasks_done: int = 0
    tasks_failed: int = 0
    #: whether the master gives a task that declares nothing its category's measured peak
    #: (makeflow ``--allocation``); if not, every such task takes a whole worker, measured
    #: or not, and only the worker's own size can fit it to what it uses
    auto_allocation: bool = False

    @property
    def waiting_count(self) -> int:
        return sum(g.count for g in self.waiting)

    def measured_cores(self, category: str) -> float | None:
        """The whole cores a task of ``category`` that declares nothing uses, by its measured
        peak (at least one: Work Queue allocates whole cores). None where that is not what it
        holds: a category never measured, or a master that allocates measured peaks itself
        (``auto_allocation``), where such a task holds a whole worker only as a retry after
        going over its peak."""
        m = self.categories.get(category)
        if self.auto_allocation or m is None or not m.measured:
            return None
        return float(max(1, math.ceil(m.peak.cores - 1e-6)))

    def waiting_cores(self) -> float:
        """Cores the waiting tasks want: what they declare; a task that declares nothing, its
        category's measured cores (:meth:`measured_cores`), or a whole worker's if never
        measured. It waits for a whole worker, but wants only what it uses: counting the
        worker's cores would make a 1-core task on 3-core nodes look three cores short."""
        total = 0.0
        for g in self.waiting:
            if g.whole_worker:
                measured = self.measured_cores(g.category)
                each = self.worker_shape.cores if measured is None else min(measured, self.worker_shape.cores)
            else:
                each = g.request.cores
            total += g.count * each
        return total

    def supply_cores(self) -> float:
        return sum(w.capacity.cores for w in self.workers)

    def room_for(self, shape: Resources) -> int:
        """Workers of ``shape`` that still fit under ``max_workers``, which counts whole
        workers of ``worker_shape``: a worker (connected or on its way) that is exactly
        1/k of it counts 1/k (:meth:`Resources.share_of`)."""
        whole = self.worker_shape
        used = sum(w.capacity.share_of(whole) for w in self.workers) + sum(p.shape.share_of(whole)
                                                                          for p in self.pending)
        return max(0, math.floor((self.max_workers - used) / shape.share_of(whole) + 1e-6))

    def in_use_cores(self) -> float:
        """Cores the running tasks use: the sum of :meth:`in_use_by_worker`."""
        return sum(self.in_use_by_worker().values())

    def in_use_by_worker(self) -> dict[str, float]:
        """Each connected worker's cores in use: what it has allocated, except that a worker
        running one task that declared nothing (given the whole worker) uses only that task's
        :meth:`measured_cores`. The rest of that worker is paid for and unused — waste, as
        much as an idle worker's cores (:mod:`hta.accounting`); counted as in use, a policy
        whose node-sized workers run one 1-core task each would show none. Only where the
        worker's own read says it runs one task: the task table may be read less often than
        the workers (``MasterStatusClient.read_budget``), and a task that has ended must not
        take cores off a worker that runs others now."""
        measured_on: dict[str, float] = {}
        by_category: dict[str, float | None] = {}
        for t in self.running:
            if t.whole_worker and t.worker is not None:
                if t.category not in by_category:
                    by_category[t.category] = self.measured_cores(t.category)
                measured = by_category[t.category]
                if measured is not None:
                    measured_on[t.worker] = measured
        out: dict[str, float] = {}
        for w in self.workers:
            measured = measured_on.get(w.id)
            out[w.id] = w.in_use.cores if measured is None or w.running != 1 else min(w.in_use.cores, measured)
        return out

    def idle_cores(self) -> float:
        """Cores of workers that run no task (what draining could give back)."""
        return sum(w.capacity.cores for w in self.workers if w.idle)


class ScaleDecision(BaseModel):
    """A policy's answer.

    ``add``: new workers of ``shape`` to ask for. ``drain``: idle workers to
    remove (the mechanism re-checks that they are idle). ``remove``: workers
    to delete whether busy or not — only the rivals that really do that
    (Kubernetes HPA) use it; HTA never does. ``next_decision_s``: when the
    policy wants to be asked again (HTA: one preparation latency).
    """

    add: int = 0
    shape: Resources | None = None
    drain: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    next_decision_s: float = 15.0
    target_workers: int | None = None
    reason: str = ""

    @property
    def acts(self) -> bool:
        return bool(self.add or self.drain or self.remove)
