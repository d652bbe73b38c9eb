"""The evaluation simulator: a simulated cluster, Work Queue and Makeflow, run
by simpy, in which any :class:`~hta.policies.base.Policy` — the very objects
production uses — scales workers.

The world keeps the ground truth (each task's true runtime and CPU use); the
policy gets only an :class:`~hta.model.Observation` built from what
production can observe: the queue, the workers, the resource monitor's
learned categories (from completed tasks only) and measured latencies.

Rules, as in the real systems:
- cluster: at most ``max_nodes`` nodes, one worker per node; a node asked for
  arrives after a latency drawn from N(mean, sd) plus ``pull_s`` (image pull);
  ``start_nodes`` are there at t = 0;
- Work Queue: waiting tasks are dispatched in FIFO order, each to the first
  worker (in connection order) with room; a category never measured runs on a
  whole worker until one of its tasks completes, then at its measured peak;
  a task whose true need exceeds its allocation fails halfway and is retried
  on a whole worker; a worker removed while running tasks sends them back to
  the queue and the work they had done is counted as lost;
- Makeflow: a task is released when all its parents completed.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

import simpy
from pydantic import BaseModel

from hta.model import (
    CategoryModel,
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    ScaleDecision,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)
from hta.policies.base import Policy
from hta.scaling_log import (
    CategoriesRecord,
    DecisionRecord,
    EndRecord,
    ObservationRecord,
    RunRecord,
    ScalingLogWriter,
    WorkerRecord,
)
from hta.sim.workload import SimTask, Workload
from hta.summary import RunSummary, summarize
from resource_monitor.categories import runtime_model


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

    @property
    def node_shape(self) -> Resources:
        return Resources(cores=self.node_cores, memory_mb=self.node_memory_mb, disk_mb=self.node_disk_mb)


@dataclass
class _Worker:
    id: str
    capacity: Resources
    requested_at: float
    connected_at: float | None = None
    free_c: float = 0.0
    free_m: float = 0.0
    #: task ids in start order (a dict, not a set: iteration order must not depend on
    #: string hashing, or runs of the same seed differ between processes)
    running: dict[str, None] = field(default_factory=dict)
    idle_since: float | None = None
    gone: bool = False


@dataclass
class _Run:
    task: SimTask
    worker: _Worker
    start: float
    alloc: Resources
    token: int


class _Learned:
    def __init__(self) -> None:
        self.runtimes: dict[str, list[float]] = {}
        self.peak: dict[str, Resources] = {}

    def add(self, t: SimTask, runtime: float) -> None:
        self.runtimes.setdefault(t.category, []).append(runtime)
        p = self.peak.get(t.category, Resources())
        self.peak[t.category] = Resources(cores=max(p.cores, float(math.ceil(t.cores))),
                                          memory_mb=max(p.memory_mb, t.memory_mb))

    def model(self, cat: str) -> CategoryModel:
        rt = self.runtimes.get(cat)
        if not rt:
            return CategoryModel(name=cat)
        return runtime_model(cat, rt, self.peak[cat])


class SimWorld:
    def __init__(self, workload: Workload, policy: Policy, cluster: ClusterModel | None = None, seed: int = 0,
                 log: ScalingLogWriter | None = None):
        self.workload = workload
        self.policy = policy
        self.cluster = cluster or ClusterModel()
        self.seed = seed
        self.rng = random.Random(seed)
        self.env = simpy.Environment()
        self.log = log or ScalingLogWriter()
        self.tasks = workload.by_id()
        self.children: dict[str, list[str]] = {tid: [] for tid in self.tasks}
        self.parents_left: dict[str, int] = {}
        for t in workload.tasks:
            self.parents_left[t.id] = len(t.parents)
            for p in t.parents:
                self.children[p].append(t.id)
        self.num = {t.id: i for i, t in enumerate(workload.tasks)}
        self.topo = self._topological_order()
        self.waiting: deque[str] = deque()
        self.whole_worker: set[str] = set()  # tasks to retry on a whole worker
        self.runs: dict[str, _Run] = {}
        self.done: set[str] = set()
        self.workers: dict[str, _Worker] = {}
        self.order: list[str] = []  # connection order
        self.learned = _Learned()
        self.latencies: list[float] = []
        self.retries = 0
        self.lost_work = 0.0
        self.finished_at: float | None = None
        self._seq = 0
        self._token = 0
        self._last_obs: tuple | None = None
        self._finished = self.env.event()

    def _topological_order(self) -> list[str]:
        left = dict(self.parents_left)
        ready = deque(t for t, n in left.items() if n == 0)
        order = []
        while ready:
            t = ready.popleft()
            order.append(t)
            for c in self.children[t]:
                left[c] -= 1
                if left[c] == 0:
                    ready.append(c)
        if len(order) != len(self.tasks):
            raise ValueError("the workflow has a dependency cycle")
        return order

    # -- cluster ----------------------------------------------------------------
    def _new_worker(self, now: float) -> _Worker:
        self._seq += 1
        w = _Worker(f"n{self._seq}", self.cluster.node_shape, requested_at=now)
        self.workers[w.id] = w
        self.log.write(WorkerRecord(t=round(now, 3), worker=w.id, event="requested", cores=w.capacity.cores))
        return w

    def _connect(self, w: _Worker) -> None:
        if w.gone:
            return
        now = self.env.now
        w.connected_at, w.idle_since = now, now
        w.free_c, w.free_m = w.capacity.cores, w.capacity.memory_mb
        self.order.append(w.id)
        lat = now - w.requested_at
        if lat > 0:
            self.latencies.append(lat)
        self.log.write(WorkerRecord(t=round(now, 3), worker=w.id, event="connected", cores=w.capacity.cores,
                                    latency_s=round(lat, 3),
                                    phases={"node": round(lat - self.cluster.pull_s, 3), "pull": self.cluster.pull_s}
                                    if lat > 0 else {}))
        self._dispatch()

    def _provision(self, w: _Worker):
        delay = max(1.0, self.rng.gauss(self.cluster.latency_mean_s, self.cluster.latency_sd_s)) + self.cluster.pull_s
        yield self.env.timeout(delay)
        self._connect(w)

    def _remove(self, w: _Worker, event: str) -> None:
        now = self.env.now
        lost = 0
        for tid in reversed(list(w.running)):  # back to the queue in their start order
            r = self.runs.pop(tid)
            self.lost_work += (now - r.start) * r.alloc.cores
            lost += 1
            self.waiting.appendleft(tid)  # back to the queue, first in line
        w.running.clear()
        w.gone = True
        if w.id in self.order:
            self.order.remove(w.id)
        self.log.write(WorkerRecord(t=round(now, 3), worker=w.id, event=event, cores=w.capacity.cores,
                                    tasks_lost=lost))
        self._dispatch()

    # -- Work Queue -------------------------------------------------------------
    def _allocation(self, t: SimTask, w: _Worker) -> Resources:
        m = self.learned.model(t.category)
        if t.id in self.whole_worker or not m.measured:
            return w.capacity
        return Resources(cores=m.peak.cores, memory_mb=m.peak.memory_mb)

    def _release(self, tid: str) -> None:
        self.waiting.append(tid)

    def _dispatch(self) -> None:
        now = self.env.now
        live = [self.workers[i] for i in self.order]
        if not live or not self.waiting:
            self._record()
            return
        keep: deque[str] = deque()
        while self.waiting:
            if all(w.free_c <= 1e-9 for w in live):
                keep.extend(self.waiting)
                self.waiting.clear()
                break
            tid = self.waiting.popleft()
            t = self.tasks[tid]
            placed = False
            for w in live:
                alloc = self._allocation(t, w)
                whole = alloc is w.capacity
                if whole and w.running:
                    continue
                if alloc.cores <= w.free_c + 1e-9 and alloc.memory_mb <= w.free_m + 1e-9:
                    self._start(t, w, alloc, now)
                    placed = True
                    break
            if not placed:
                keep.append(tid)
        self.waiting = keep
        self._record()

    def _start(self, t: SimTask, w: _Worker, alloc: Resources, now: float) -> None:
        self._token += 1
        w.free_c -= alloc.cores
        w.free_m -= alloc.memory_mb
        w.running[t.id] = None
        w.idle_since = None
        run = _Run(t, w, now, alloc, self._token)
        self.runs[t.id] = run
        exceeds = t.cores > alloc.cores + 1e-9 or t.memory_mb > alloc.memory_mb + 1e-9
        duration = t.runtime_s * (0.5 if exceeds else 1.0)
        ev = self.env.timeout(duration)
        ev.callbacks.append(lambda _ev, tid=t.id, tok=run.token, bad=exceeds: self._finish(tid, tok, bad))

    def _finish(self, tid: str, token: int, failed: bool) -> None:
        r = self.runs.get(tid)
        if r is None or r.token != token:
            return  # the worker was removed meanwhile; the task went back to the queue
        now = self.env.now
        del self.runs[tid]
        w = r.worker
        w.free_c += r.alloc.cores
        w.free_m += r.alloc.memory_mb
        w.running.pop(tid, None)
        if not w.running:
            w.idle_since = now
        if failed:
            self.retries += 1
            self.lost_work += (now - r.start) * r.alloc.cores
            self.whole_worker.add(tid)
            self.waiting.appendleft(tid)
            self._dispatch()
            return
        self.learned.add(r.task, now - r.start)
        self.done.add(tid)
        for c in self.children[tid]:
            self.parents_left[c] -= 1
            if self.parents_left[c] == 0:
                self._release(c)
        if len(self.done) == len(self.tasks):
            self.finished_at = now
            self._record(force=True)
            self._finished.succeed()
            return
        self._dispatch()

    # -- what production can observe ---------------------------------------------
    def observe(self) -> Observation:
        now = self.env.now
        groups: list[TaskGroup] = []
        group_of: dict[str, str] = {}
        for tid in self.waiting:
            t = self.tasks[tid]
            m = self.learned.model(t.category)
            req = Resources() if (tid in self.whole_worker or not m.measured) else \
                Resources(cores=m.peak.cores, memory_mb=m.peak.memory_mb)
            if groups and groups[-1].category == t.category and groups[-1].request == req:
                groups[-1].count += 1
            else:
                groups.append(TaskGroup(category=t.category, count=1, request=req, id=f"g{len(groups)}"))
            group_of[tid] = groups[-1].id
        upcoming = self._upcoming(group_of)
        running = [RunningTask(task_id=self.num[tid], category=r.task.category, allocation=r.alloc,
                               started_at=r.start, worker=r.worker.id) for tid, r in self.runs.items()]
        workers = []
        for wid in self.order:
            w = self.workers[wid]
            used_c = w.capacity.cores - w.free_c
            busy_cpu = sum(self.runs[t].alloc.cores * self.runs[t].task.cpu_util for t in w.running)
            workers.append(WorkerInfo(
                id=w.id, capacity=w.capacity,
                in_use=Resources(cores=used_c, memory_mb=w.capacity.memory_mb - w.free_m),
                running=len(w.running), connected_at=w.connected_at, idle_since=w.idle_since,
                cpu_utilization=busy_cpu / w.capacity.cores if w.capacity.cores else 0.0,
            ))
        pending = [PendingWorker(id=w.id, requested_at=w.requested_at, shape=w.capacity)
                   for w in self.workers.values() if w.connected_at is None and not w.gone]
        cats = {c: self.learned.model(c) for c in sorted({t.category for t in self.workload.tasks})}
        return Observation(
            time=now, waiting=groups, running=running, workers=workers, pending=pending, categories=cats,
            upcoming=upcoming,
            latency=LatencyStats(samples=list(self.latencies), prior_s=self.cluster.latency_mean_s),
            worker_shape=self.cluster.node_shape, min_workers=0, max_workers=self.cluster.max_nodes,
            tasks_done=len(self.done),
        )

    def _upcoming(self, group_of: dict[str, str]) -> list[UpcomingTasks]:
        """Unreleased tasks, grouped by category and by what they wait for
        (the DAG is known to production too: Makeflow's file, imported ahead)."""
        ref: dict[str, str] = {}
        groups: dict[tuple, UpcomingTasks] = {}
        for tid in self.topo:
            if tid in self.done:
                continue
            if tid in self.runs:
                ref[tid] = f"task:{self.num[tid]}"
                continue
            if tid in group_of:
                ref[tid] = group_of[tid]
                continue
            t = self.tasks[tid]
            after = tuple(sorted({ref[p] for p in t.parents if p not in self.done}))
            m = self.learned.model(t.category)
            req = Resources(cores=m.peak.cores, memory_mb=m.peak.memory_mb) if m.measured else Resources()
            key = (t.category, after, req)
            g = groups.get(key)
            if g is None:
                g = groups[key] = UpcomingTasks(id=f"u{len(groups)}", category=t.category, count=0,
                                                request=req, after=list(after))
            g.count += 1
            ref[tid] = g.id
        return list(groups.values())

    def _cores(self) -> tuple[float, float, float, float, int, int, int, int]:
        supply = in_use = idle = 0.0
        for wid in self.order:
            w = self.workers[wid]
            supply += w.capacity.cores
            in_use += w.capacity.cores - w.free_c
            if not w.running:
                idle += w.capacity.cores
        # demand counts what each waiting task declares (WfFormat coreCount), as in
        # production (Makeflow's CORES), not the whole worker Work Queue may give it
        want = sum(self.tasks[tid].cores for tid in self.waiting)
        pending = sum(1 for w in self.workers.values() if w.connected_at is None and not w.gone)
        return supply, in_use, in_use + want, idle, len(self.waiting), len(self.runs), len(self.order), pending

    def _record(self, force: bool = False) -> None:
        state = self._cores()
        if state == self._last_obs and not force:
            return
        self._last_obs = state
        s, u, d, idle, wt, rn, wk, pd = state
        self.log.write(ObservationRecord(t=round(self.env.now, 3), supply_cores=s, in_use_cores=u, demand_cores=d,
                                         idle_cores=idle,
                                         waiting=wt, running=rn, workers=wk, pending=pd,
                                         tasks_done=len(self.done)))

    # -- the policy loop ------------------------------------------------------------
    def _apply(self, d: ScaleDecision) -> int:
        now = self.env.now
        have = sum(1 for w in self.workers.values() if not w.gone)
        add = max(0, min(d.add, self.cluster.max_nodes - have))
        for _ in range(add):
            w = self._new_worker(now)
            self.env.process(self._provision(w))
        for wid in d.drain:  # idle workers only
            self._retire(wid, "drained", busy_ok=False)
        for wid in d.remove:  # busy or not (rivals that delete pods)
            self._retire(wid, "removed", busy_ok=True)
        return add

    def _retire(self, wid: str, event: str, busy_ok: bool) -> None:
        w = self.workers.get(wid)
        if w is None or w.gone or (w.running and not busy_ok):
            return
        if w.connected_at is None:  # still on its way: the request is cancelled
            w.gone = True
            self.log.write(WorkerRecord(t=round(self.env.now, 3), worker=w.id, event=event, cores=w.capacity.cores))
        else:
            self._remove(w, event)

    def _control(self):
        while self.finished_at is None or (
            self.env.now < self.finished_at + self.cluster.teardown_s
            and sum(1 for w in self.workers.values() if not w.gone) > self.cluster.start_nodes
        ):
            obs = self.observe()
            d = self.policy.decide(obs)
            add = self._apply(d)
            wait = min(max(d.next_decision_s, self.cluster.min_interval_s), self.cluster.max_interval_s)
            self.log.write(DecisionRecord(t=round(self.env.now, 3), add=add, drain=d.drain, remove=d.remove,
                                          target=d.target_workers, latency_s=round(obs.latency.estimate(), 3),
                                          next_decision_s=round(wait, 3), reason=d.reason))
            if self.finished_at is None:
                yield self.env.timeout(wait) | self._finished
            else:
                yield self.env.timeout(wait)

    def run(self, workload_name: str | None = None) -> RunSummary:
        self.log.write(RunRecord(started_at=0.0, workload=workload_name or self.workload.name,
                                 policy=self.policy.name, backend="simulated", seed=self.seed, simulated=True,
                                 worker_shape=self.cluster.node_shape, max_workers=self.cluster.max_nodes))
        for _ in range(self.cluster.start_nodes):
            w = self._new_worker(0.0)
            self._connect(w)
        for t in self.workload.tasks:
            if not t.parents:
                self._release(t.id)
        self._dispatch()
        control = self.env.process(self._control())
        self.env.run(until=self._finished | self.env.timeout(self.cluster.horizon_s))
        if self.finished_at is not None:
            self.env.run(until=control | self.env.timeout(self.cluster.teardown_s))
        end = self.env.now
        for w in self.workers.values():
            if not w.gone:
                w.gone = True
                self.log.write(WorkerRecord(t=round(end, 3), worker=w.id, event="stopped", cores=w.capacity.cores))
        self.log.write(CategoriesRecord(t=round(end, 3), categories={
            c: self.learned.model(c) for c in sorted({t.category for t in self.workload.tasks})}))
        complete = self.finished_at is not None
        self.log.write(EndRecord(t=round(end, 3), exit_code=0 if complete else 1,
                                 runtime_s=round(self.finished_at if complete else end, 3),
                                 tasks_done=len(self.done), tasks_failed=0 if complete else len(self.tasks) - len(self.done),
                                 tasks_retried=self.retries, lost_work_core_s=round(self.lost_work, 3)))
        self.log.close()
        return summarize(self.log.records, str(self.log.path) if self.log.path else None)
