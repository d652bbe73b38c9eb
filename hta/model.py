"""The domain model of the control loop: what a policy observes and what it decides.

An :class:`Observation` is everything a policy may know at one instant: the same fields in
production (filled from the Work Queue master, the resource monitor and the backend) and in
the simulator (filled from the simulated world, never from its ground truth). A
:class:`ScaleDecision` is what a policy answers. Times are seconds on one clock chosen by
whoever builds the observation (the controller uses seconds since the run started).

The queue's vocabulary (:class:`Resources`, waiting groups, running tasks, workers,
upcoming tasks) is Work Queue's, defined in :mod:`workqueue_bridge`; what a category
measured is the resource monitor's (:class:`CategoryModel`). They are named here too, so
the control loop speaks one vocabulary.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from resource_monitor.model import CategoryModel
from workqueue_bridge.queue import RunningTask, TaskGroup, UpcomingTasks, WorkerInfo
from workqueue_bridge.resources import Resources
from workqueue_bridge.status_json import QueueStatus

__all__ = ["CategoryModel", "LatencyStats", "LinkStats", "Observation", "PendingWorker", "Resources", "RunningTask",
           "ScaleDecision", "TaskGroup", "UpcomingTasks", "WorkerInfo"]


class PendingWorker(BaseModel):
    """A worker asked of the backend that has not connected yet."""

    id: str
    requested_at: float
    shape: Resources
    #: when its pod started running, where the backend tells (its worker still starting and
    #: connecting): KEDA counts a Job whose pod runs as no longer pending
    started_at: float | None = None


#: without an ``unschedulable`` phase, a worker bound to a node within this long of its
#: request found room on a node already there (see :class:`LatencyStats`)
FOUND_ROOM_S = 2.0


class LatencyStats(BaseModel):
    """Resource preparation latency L: request → worker connected, for a worker that waited
    for a node (``samples``).

    A worker bound at once to a node that had room (pods smaller than a node, or a node the
    cluster autoscaler keeps a while after its last pod left) connects in seconds; that is
    not how long new capacity takes, so it goes to ``room_samples``, read only while no
    worker has waited for a node (a cluster of fixed size, where that is how every worker
    comes). Mixed in, such samples shrink L towards zero, and a horizon of zero drains the
    workers a purchase just brought (docs/decisions/0006-preparation-latency.md)."""

    samples: list[float] = Field(default_factory=list)
    room_samples: list[float] = Field(default_factory=list)
    prior_s: float = 60.0
    #: how long the oldest worker still on its way has waited (an observation's copy: see
    #: :meth:`frozen`); a lower bound on L until a worker that waited for a node connects
    waiting_s: float = 0.0

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

    def frozen(self, waiting_s: float = 0.0) -> LatencyStats:
        """A copy that later :meth:`add` calls leave alone (what an observation carries): the
        sample lists copied, not deep-copied float by float; ``waiting_s``, how long the
        oldest worker still on its way has waited."""
        return self.model_copy(update={"samples": list(self.samples), "room_samples": list(self.room_samples),
                                       "waiting_s": waiting_s})

    @property
    def measured(self) -> list[float]:
        """The samples :meth:`estimate` reads: those that waited for a node, else the others."""
        return self.samples or self.room_samples

    def estimate(self, statistic: Literal["last", "median"] = "median", window: int = 10) -> float:
        samples = self.measured
        if not samples:
            return max(self.prior_s, self.waiting_s)
        if statistic == "last":
            found = samples[-1]
        else:
            recent = sorted(samples[-window:])
            n = len(recent)
            mid = n // 2
            found = recent[mid] if n % 2 else (recent[mid - 1] + recent[mid]) / 2
        if not self.samples and self.waiting_s > max(samples):
            # only workers that found room have connected, and one still on its way has
            # waited longer than any of them took: it waits for a node, which takes at least
            # that (a Slurm job on a static node starts in seconds while a cloud node boots)
            return max(self.prior_s, self.waiting_s)
        return found


#: MB/s assumed for the master's link until it has moved ``LinkStats.LEARNED_AFTER_MB``: what
#: ``bench/world_costs.py`` measured for a Work Queue input transfer on this machine
#: (:data:`hta.sim.costs.MEASURED`), a figure for a master and workers on one fast network
LINK_PRIOR_MB_PER_S = 450.0


class LinkStats(BaseModel):
    """The master's one link: what it moved and how long that took, by its own counters
    (``/queue_status``'s bytes and ``time_send``/``time_receive``). Work Queue sends a task's
    inputs before it goes on to the next, so the link is a serial server: its bandwidth sets
    how many tasks a second the master can start, however many workers wait."""

    #: learned from the master once it has moved this much (a few small files measure their
    #: per-file latency, not the link)
    LEARNED_AFTER_MB: ClassVar[float] = 32.0

    mb: float = 0.0
    busy_s: float = 0.0
    prior_mb_per_s: float = LINK_PRIOR_MB_PER_S

    @classmethod
    def of(cls, queue: QueueStatus, prior_mb_per_s: float = LINK_PRIOR_MB_PER_S) -> LinkStats:
        """The link by a read of the master's counters, in and out together (one link, one thread)."""
        return cls(mb=(queue.bytes_sent + queue.bytes_received) / 2**20,
                   busy_s=queue.time_send_s + queue.time_receive_s, prior_mb_per_s=prior_mb_per_s)

    @property
    def learned(self) -> bool:
        return self.mb >= self.LEARNED_AFTER_MB and self.busy_s > 0

    @property
    def mb_per_s(self) -> float:
        """The bandwidth: measured where the master has moved enough, else the prior."""
        return self.mb / self.busy_s if self.learned else self.prior_mb_per_s


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
    #: category → the files every task of it reads → their MB (known sizes only; see
    #: :attr:`WorkerInfo.cached_inputs`)
    shared_inputs: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: category → the mean MB a task of it reads beyond ``shared_inputs`` (known sizes only):
    #: what the master sends for each of its tasks, cached or not
    task_inputs_mb: dict[str, float] = Field(default_factory=dict)
    link: LinkStats = Field(default_factory=LinkStats)
    #: how long a node stays once its last worker left, as the backend has seen it (None:
    #: it cannot tell, or none has emptied yet): shorter than a latency, a drained worker
    #: bought back pays a whole latency (:meth:`hta.backends.base.WorkerBackend.node_hold_s`)
    node_hold_s: float | None = None
    #: the node each connected worker runs on, by worker id, where the backend knows it
    worker_nodes: dict[str, str] = Field(default_factory=dict)
    #: when each connected worker whose job ends at a time limit stops taking tasks (its
    #: last call), by worker id, where the backend knows it
    worker_ends: dict[str, float] = Field(default_factory=dict)
    #: the longest a worker's job may live (a batch system's time limit), where it has one
    job_ceiling_s: float | None = None

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
        1/k of it counts 1/k (:meth:`Resources.share_of`); one :meth:`leaving` does not."""
        whole = self.worker_shape
        staying = [w for w in self.workers if w.id not in self.leaving()]
        used = sum(w.capacity.share_of(whole) for w in staying) + sum(p.shape.share_of(whole) for p in self.pending)
        return max(0, math.floor((self.max_workers - used) / shape.share_of(whole) + 1e-6))

    def leaving(self) -> set[str]:
        """Workers whose job's last call comes within a latency (:attr:`worker_ends`): their
        replacements, bought now, connect as they leave, and the cap counts those instead."""
        if not self.worker_ends:
            return set()
        horizon = self.time + self.latency.estimate()
        return {w for w, t in self.worker_ends.items() if t <= horizon}

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

    def cached_for_work_mb(self, worker: WorkerInfo, categories: set[str]) -> float:
        """MB of what ``worker`` holds in its cache that tasks of ``categories`` read: what a
        new worker in its place would fetch again from the master for them, over the one
        link every transfer shares (0 for a workflow without shared inputs)."""
        if not worker.cached_inputs or not self.shared_inputs:
            return 0.0
        read: dict[str, float] = {}
        for category in categories:
            read.update(self.shared_inputs.get(category, {}))
        return sum(mb for f, mb in read.items() if f in worker.cached_inputs)

    def idle_cores(self) -> float:
        """Cores of workers that run no task (what draining could give back)."""
        return sum(w.capacity.cores for w in self.workers if w.idle)


class DialPlan(BaseModel):
    """What the time–cost dial planned at a decision (``--deadline`` or ``--budget``): the
    pool it allows, the end and spend the whole-workflow forecast sees with it, and the one
    line that says an ask cannot be kept (:mod:`hta.policies.dial`). Times are seconds from
    the run's start; node·s count nodes of the configured worker shape."""

    deadline_s: float | None = None
    budget_node_s: float | None = None
    #: nodes the plan lets the policy hold (None: no forecast yet, the cap alone)
    nodes: int | None = None
    #: when the forecast sees the last task end with ``nodes`` (None: no forecast yet)
    projected_end_s: float | None = None
    #: node·s paid so far, by the policy's own count (workers and pending ones, by share)
    spent_node_s: float = 0.0
    #: spent plus what the forecast sees the rest of the run costing with ``nodes``
    forecast_node_s: float | None = None
    #: the ask cannot be kept (a deadline before the earliest end, a budget below the cheapest
    #: pace); the run goes as fast (or as cheaply) as it can
    feasible: bool = True
    #: the budget is spent, but for the work already running: nothing more is bought
    exhausted: bool = False
    #: why, in a user's words (said once, when it first holds)
    note: str | None = None


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
    #: workers the policy would add were there no cap (None: ``add``); what the cap (or the
    #: backend) does not give is reported as held back, not as the policy's choice
    wanted: int | None = None
    #: the time–cost dial's plan, when a deadline or a budget was given
    plan: DialPlan | None = None
    #: how long the new workers' jobs should live, where jobs have a time limit: long enough
    #: for the work the forecast sees, within the limit (None: the backend's default)
    job_time_s: float | None = None

    @property
    def acts(self) -> bool:
        return bool(self.add or self.drain or self.remove)
