"""The oracle: lower bounds on any policy's runtime, and on the node·s it pays to
finish by a deadline, for a workload on a cluster.

No policy, not even the largest cluster present from t = 0, finishes sooner:

- **Phases between barriers.** A *barrier* is a task every other task either
  precedes or follows (BLAST's split and reduce tasks): everything before it
  must end before it starts, everything after it starts after it ends. The
  workflow is cut at its barriers into phases that run one after the other;
  each barrier is a phase of its own. A phase lasts at least its critical
  path (the longest chain of runtimes inside it) and at least as long as the
  cluster takes to supply its work (Σ runtime × cores, core·s; a task that
  declares nothing may be throttled on a pod smaller than it, and counts only the
  cores it keeps busy, the smallest pod's at least: :func:`held_cores`).
- **Capacity over time.** Until the first bought node can arrive only the
  starting nodes work (``start_nodes`` × ``node_cores`` cores; none at all
  when there are none); after that at most ``max_nodes`` × ``node_cores``.
- **The smallest possible latency, not the mean.** A node connects after
  max(1 s, mean − 4 sd, a normal draw) + pull + pod start (the world clips
  the draw 4 sd below the mean: ``hta.sim.cluster.min_draw_s``), so the bound
  assumes the clip; a fixed latency (``latency_sd_s = 0``) is used as it is.
- **Tasks are whole.** A phase whose tasks cannot all start on the starting
  nodes before the first bought node can arrive (each core holds one task at
  a time, and starts the next only after the last ended) has tasks that start
  no sooner than that arrival: if at most K can start before it, one of the
  K + 1 tasks with the longest *tails* (a task's runtime plus the longest
  chain of its descendants inside the phase) does, and the phase ends at
  least that tail after the arrival. (A policy cannot choose which tasks the
  starting nodes run; the bound lets them run the best: the K longest tails.)
- **Whole tasks come in waves.** At most K of a phase's tasks can start before the
  first bought node can arrive; the rest — at worst its shortest tasks — start after,
  at most ``cores / min_cores`` at a time, so one slot runs k + 1 of any k × slots + 1
  of them one after another: the phase lasts that arrival plus k + 1 times the
  (k × slots + 1)-th longest of them (the last wave of 200 tasks of 130 s on 60 cores).
- **Work waits for its ancestors.** A task starts no sooner than its *head*
  (the longest chain of its ancestors inside the phase) after the phase
  begins; so the tasks with heads of h or more and *afters* (the longest
  chain of descendants) of a or more run all their core·s after h, and the
  last of them to end is followed by a more seconds (the heads as release
  dates and the afters as delivery times of the classic bound for parallel
  machines, r + Σp/m + q, on the capacity over time above).

Each task counts its runtime plus the per-task overhead the world adds. What
the bound leaves out only makes real runs slower (a never-measured category's
first tasks on whole workers, retries, memory, placement), so a simulated
runtime below the bound is a bug (``tests/test_bound.py`` looks for one).

The node·s floor (:func:`node_seconds_floor`) is the companion bound on cost: the fewest
node·s any policy pays to finish by a deadline T. A node connected for t seconds runs at
most ``node_cores`` × t core·s, and a phase's critical path runs one task after another
on some connected node, so each phase holds nodes connected for at least the larger of
its work over ``node_cores`` and its critical path; and every node bought is paid at least
the smallest latency L before it connects. The starting nodes can run at most
``start_nodes`` × ``node_cores`` × T core·s, a bought node ``node_cores`` × (T − L), so
finishing by T takes at least (work − that of the starting nodes) over the latter bought
nodes. The faster a policy, the more nodes it must buy, each paying L: the floor falls as
T grows, to the work itself. What it leaves out (idle cores beside a stage's last tasks,
a never-measured task on a whole worker, teardown) only adds node·s, so a run paying
less than the floor at its own runtime is a bug (``tests/test_bound.py``). It holds as
node time is paid: a node from its request until it goes, the time the node autoscaler
keeps it empty (``empty_node_ttl_s``) included. A worker bought back onto a kept node
pays no latency of its own, but its node was paid all along, so the floor holds there
too (``tests/test_bound.py`` plays random DAGs with kept nodes and transfers).

Everything here walks the DAG iteratively in topological order: a chain of
100k tasks is fine.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import fmean

from hta.sim.cluster import ClusterModel, min_draw_s
from hta.sim.workload import SimTask, Workload, topological_order

#: heads tried per phase by :meth:`Phase.end_by_chains` (each a pass over the phase's tasks)
CHAIN_HEADS = 48


def _durations(w: Workload, cluster: ClusterModel | None) -> dict[str, float]:
    if cluster is None:
        return {t.id: t.runtime_s for t in w.tasks}
    over = cluster.task_overhead_by_category_s
    return {t.id: t.runtime_s + over.get(t.category, cluster.task_overhead_s) for t in w.tasks}


def critical_path_s(w: Workload, cluster: ClusterModel | None = None) -> float:
    """The longest chain of runtimes (plus the cluster's per-task overhead, if given)."""
    dur = _durations(w, cluster)
    finish: dict[str, float] = {}
    for t in topological_order(w):
        finish[t.id] = dur[t.id] + max((finish[p] for p in t.parents), default=0.0)
    return max(finish.values(), default=0.0)


def barriers(order: list[SimTask]) -> list[bool]:
    """For each task of a topological order: is it a barrier (every other task an
    ancestor or a descendant of it)?

    Task i is one iff it is the only task among positions ≤ i with no child there,
    and the only one among positions ≥ i with no parent there (then every earlier
    task reaches it, and it reaches every later one). Both counts come from one
    sweep over the edges: O(tasks + edges)."""
    n = len(order)
    pos = {t.id: i for i, t in enumerate(order)}
    last_child = list(range(n))  # largest position of a child (itself if none... set below)
    first_parent = list(range(n))
    has_child = [False] * n
    for i, t in enumerate(order):
        for p in t.parents:
            j = pos[p]
            has_child[j] = True
            last_child[j] = max(last_child[j], i)
            first_parent[i] = min(first_parent[i], j)
    # sinks(i) = #{j ≤ i : last child of j > i, or j has none}; sources(i) = #{j ≥ i : first parent < i, or none}
    sinks = [0] * (n + 1)
    sources = [0] * (n + 1)
    for j in range(n):
        end = last_child[j] if has_child[j] else n  # j is a sink of prefixes [j, end)
        sinks[j] += 1
        sinks[end] -= 1
        start = first_parent[j] + 1 if first_parent[j] < j else 0  # a source of suffixes starting in [start, j]
        sources[start] += 1
        sources[j + 1] -= 1
    out = []
    s = r = 0
    for i in range(n):
        s += sinks[i]
        r += sources[i]
        out.append(s == 1 and r == 1)
    return out


@dataclass
class Phase:
    tasks: int
    critical_path_s: float
    work_core_s: float
    #: the fewest cores a task of it asks
    min_cores: float = 1.0
    #: (tail, runtime) of each task, longest tail first: a task's tail is its runtime plus
    #: the longest chain of its descendants inside the phase (the phase ends no sooner
    #: than the task starts + its tail)
    by_tail: list[tuple[float, float]] = field(default_factory=list)
    #: (head, after, core·s) of each task, longest ``after`` first: its head is the longest
    #: chain of its ancestors inside the phase (it starts no sooner than that after the
    #: phase begins), ``after`` the longest chain of its descendants (they run after it ends)
    chains: list[tuple[float, float, float]] = field(default_factory=list)

    def slots(self, cores: float) -> int:
        """How many of its tasks ``cores`` cores run at once, at most (each asks ``min_cores``
        or more; tasks that take no core: all of them)."""
        return int(cores / self.min_cores + 1e-9) if self.min_cores > 0 else self.tasks

    def end_by_chains(self, start: float, c0: float, c: float, until: float) -> float:
        """The phase ends no sooner than this (it begins at ``start``; ``c0`` cores until
        ``until``, ``c`` after): for a head h and an after a, the tasks whose heads are h or
        more and whose afters are a or more run no sooner than ``start + h``, all their
        core·s W on the cores there are, and the last of them to end is followed by a
        chain of a seconds at least — so the phase lasts past (the end of W begun at
        start + h) + a. Heads tried: every distinct one, or ``CHAIN_HEADS`` quantiles."""
        if len(self.chains) < 2:
            return start
        heads = sorted({h for h, _, _ in self.chains})
        if len(heads) > CHAIN_HEADS:
            heads = [heads[round(i * (len(heads) - 1) / (CHAIN_HEADS - 1))] for i in range(CHAIN_HEADS)]
        best = start
        for h in heads:
            work = 0.0
            for head, after, core_s in self.chains:  # longest after first
                if head >= h:
                    work += core_s
                    best = max(best, _work_done_by(start + h, work, c0, c, until) + after)
        return best

    def end_in_waves(self, start: float, c0: float, c: float, until: float) -> float:
        """The phase ends no sooner than this (it begins at ``start``; ``c0`` cores until
        ``until``, ``c`` after), counting the tasks that start after ``until`` in waves.

        At most K of its tasks start before ``until`` (as in :meth:`end_after`, over all its
        tasks: a slot starts 1 + m, m the most runtimes that fit in a row), so the rest, R,
        start after it — at worst R is the phase's shortest tasks. At most S = ``c /
        min_cores`` of them run at once, so they can be laid on S tracks, one task after
        another on each (tasks as intervals: S colours suffice); then some track runs k + 1
        of any k·S + 1 of them, and the phase lasts at least ``until`` + (k + 1) × the
        (k·S + 1)-th longest of R. (With nothing before ``until`` the same holds from
        ``start``.) Where the work is whole tasks, not a fluid, this is the last wave."""
        if self.min_cores <= 0:  # tasks that take no core: no limit on how many run at once
            return start
        runtimes = sorted(r for _, r in self.by_tail)  # shortest first
        t0, k_before = start, 0
        if until != float("inf") and start < until:
            used, fit = 0.0, 0
            for r in runtimes:
                if used + r >= until - start:
                    break
                used, fit = used + r, fit + 1
            t0, k_before = until, self.slots(c0) * (1 + fit)
        rest = runtimes[:max(0, len(runtimes) - k_before)][::-1]  # the shortest, longest first
        slots = self.slots(c)
        if not rest or slots <= 0:
            return start
        return max(t0 + (k + 1) * rest[k * slots] for k in range((len(rest) - 1) // slots + 1))

    def end_after(self, start: float, cores: float, until: float) -> float:
        """The phase ends no sooner than this when it begins at ``start`` on ``cores`` cores
        until ``until`` (only the starting nodes work before it).

        Take the X tasks with the longest tails. A slot (one task at a time: ``cores /
        min_cores`` of them) starts one of them before ``until`` only after the ones of
        them it started before have ended, so it starts at most 1 + m of them, m the most
        of their runtimes, shortest first, that fit in ``until − start``. If X > slots ×
        (1 + m), one of the X starts no sooner than ``until`` and the phase lasts its tail
        after that: at least the X-th longest tail. The first such X gives the longest.
        (m for each X: the shortest runtimes that fit, kept in a max-heap.)"""
        if until == float("inf") or start >= until:
            return start
        slots = self.slots(cores)
        budget = until - start
        fit: list[float] = []  # negated runtimes that fit in a row within the budget
        used = 0.0
        for x, (tail, runtime) in enumerate(self.by_tail, start=1):
            heapq.heappush(fit, -runtime)
            used += runtime
            while fit and used >= budget:
                used += heapq.heappop(fit)  # (negated: drops the longest)
            if x > slots * (1 + len(fit)):
                return until + tail
        return start


def held_cores(t: SimTask, declared: bool, smallest_pod: float = 1.0) -> tuple[float, float]:
    """The fewest cores ``t`` holds at once, and the fewest it occupies on average over its
    runtime (its overhead is held at the first, its runtime at the second). Its own cores
    where it declares them; else it may run on a whole worker smaller than it, which only
    the pod's limits hold: throttled to the pod's cores, it holds as few as the smallest
    pod's at a time (HTA cuts a node into at most as many pods as it has whole cores), for
    longer, occupying its busy cores' worth (:func:`hta.sim.cluster.throttled`). A pod under
    a core advertises a whole one (``Resources.advertised``), so a declared task there
    holds only the pod's share of each core it declares, throttled alike."""
    if declared:
        if smallest_pod >= 1.0:
            return t.cores, t.cores
        least = t.cores * smallest_pod
        return least, min(t.cores, max(least, t.cores * t.cpu_util))
    least = min(t.cores, smallest_pod)
    return least, min(t.cores, max(least, t.cores * t.cpu_util))


def phases(w: Workload, cluster: ClusterModel | None = None) -> list[Phase]:
    """The workflow cut at its barriers, in order (each barrier a phase of its own)."""
    order = topological_order(w)
    dur = _durations(w, cluster)
    is_barrier = barriers(order)
    smallest_pod = min(1.0, cluster.node_cores) if cluster is not None else 1.0
    held = {t.id: held_cores(t, w.declared, smallest_pod) for t in order}
    # the fewest core·s each task occupies: its runtime at its busy cores, its overhead
    # (dispatch, transfers: no throttling stretches it) at the fewest it holds
    occupied = {t.id: t.runtime_s * held[t.id][1] + (dur[t.id] - t.runtime_s) * held[t.id][0] for t in order}
    children: dict[str, list[str]] = {}
    for t in order:
        for p in t.parents:
            children.setdefault(p, []).append(t.id)
    out: list[Phase] = []
    finish: dict[str, float] = {}  # within the current phase
    members: list[str] = []
    count, cp, work, min_cores = 0, 0.0, 0.0, float("inf")

    def close() -> None:
        tail: dict[str, float] = {}  # within the phase, from its last task back
        for tid in reversed(members):
            tail[tid] = dur[tid] + max((tail[c] for c in children.get(tid, ()) if c in tail), default=0.0)
        by_tail = sorted(((tail[tid], dur[tid]) for tid in members), reverse=True)
        chains = sorted(((finish[tid] - dur[tid], tail[tid] - dur[tid], occupied[tid]) for tid in members),
                        key=lambda x: -x[1])
        out.append(Phase(count, cp, work, min_cores, by_tail, chains))

    for t, bar in zip(order, is_barrier):
        if bar:
            if count:
                close()
            out.append(Phase(1, dur[t.id], occupied[t.id], held[t.id][0], [(dur[t.id], dur[t.id])]))
            finish, members, count, cp, work, min_cores = {}, [], 0, 0.0, 0.0, float("inf")
            continue
        f = dur[t.id] + max((finish[p] for p in t.parents if p in finish), default=0.0)
        finish[t.id] = f
        members.append(t.id)
        count += 1
        cp = max(cp, f)
        work += occupied[t.id]
        min_cores = min(min_cores, held[t.id][0])
    if count:
        close()
    return out


def min_latency_s(cluster: ClusterModel) -> float:
    """The soonest a bought node can connect (see the module's note)."""
    return min_draw_s(cluster) + cluster.pull_s + cluster.pod_start_s


def _work_done_by(start: float, work: float, c0: float, c: float, until: float) -> float:
    """The earliest end of ``work`` core·s begun at ``start`` on ``c0`` cores until ``until``,
    ``c`` after."""
    if work <= 0:
        return start
    t = start
    if t < until:
        if c0 > 0 and work <= c0 * (until - t):
            return t + work / c0
        work -= c0 * (until - t)
        t = until
    return t + work / c if c > 0 else float("inf")


def oracle_runtime_s(w: Workload, cluster: ClusterModel) -> float:
    c0 = cluster.start_nodes * cluster.node_cores
    c = max(cluster.max_nodes, cluster.start_nodes) * cluster.node_cores
    until = min_latency_s(cluster) if cluster.max_nodes > cluster.start_nodes else float("inf")
    t = 0.0 if c0 > 0 else until  # no worker at all before the first one arrives
    for ph in phases(w, cluster):
        end = max(t + ph.critical_path_s, _work_done_by(t, ph.work_core_s, c0, c, until),
                  ph.end_after(t, c0, until),  # a long-tailed task starts no sooner than ``until``
                  ph.end_by_chains(t, c0, c, until),  # work that waits for its ancestors
                  ph.end_in_waves(t, c0, c, until))  # whole tasks after the first bought node
        t = end
    return t


@dataclass(frozen=True)
class NodeSecondsFloor:
    """The fewest node·s any policy pays to finish one workload on one cluster by a
    deadline (see the module's note): :meth:`at`. Its parts, from :func:`node_seconds_floor`."""

    #: node time the phases hold at least: Σ max(work / node cores, critical path)
    busy_node_s: float
    #: all the work over one node's cores (node·s)
    work_node_s: float
    #: node·s per second they run (a whole number of nodes, but for a floor in other units)
    start_nodes: float
    #: the soonest a bought node connects (inf: none can be bought)
    latency_s: float
    #: no policy finishes sooner (:func:`oracle_runtime_s`)
    runtime_bound_s: float

    def at(self, deadline_s: float) -> float:
        """node·s at least, to finish by ``deadline_s`` (inf if no policy can)."""
        if deadline_s < self.runtime_bound_s * (1 - 1e-9):  # (the bound itself, summed in another order)
            return math.inf
        if math.isinf(deadline_s):
            return self.busy_node_s
        need = self.work_node_s - self.start_nodes * deadline_s  # node·s the bought nodes must run
        if need <= 1e-9 * self.work_node_s:
            return self.busy_node_s
        if deadline_s <= self.latency_s:
            return math.inf
        return self.busy_node_s + self.latency_s * need / (deadline_s - self.latency_s)

    def scaled(self, time_k: float, cost_k: float | None = None) -> NodeSecondsFloor:
        """The same floor in other units: every time × ``time_k``, every node·s × ``cost_k``
        (default ``time_k``), so ``scaled(t, c).at(t × T) == c × at(T)``; the starting
        nodes run c / t as many node·s a second. A mean over runs of unequal size weighs
        each alike when each is scaled to a common size first (``bench/pareto.py``)."""
        c = time_k if cost_k is None else cost_k
        return NodeSecondsFloor(busy_node_s=c * self.busy_node_s, work_node_s=c * self.work_node_s,
                                start_nodes=self.start_nodes * c / time_k, latency_s=time_k * self.latency_s,
                                runtime_bound_s=time_k * self.runtime_bound_s)

    def _cheapest_past(self) -> float:
        """The deadline from which :meth:`at` is the work alone (no node need be bought)."""
        if self.work_node_s <= 0:
            return self.runtime_bound_s
        return max(self.runtime_bound_s, self.work_node_s / self.start_nodes if self.start_nodes else math.inf)

    def _best_deadline(self, price: float) -> float:
        """argmin over T of at(T) + price × T (at is convex and falls with T): a second of
        runtime priced at ``price`` node·s."""
        lo, hi = self.runtime_bound_s, self._cheapest_past()
        if hi <= lo:
            return lo
        left = self.work_node_s - self.start_nodes * self.latency_s  # what bought nodes must run by L
        if left <= 0:  # the starting nodes finish before a bought node could come: at() is inf below hi
            return hi
        # d/dT of L × (B − sT)/(T − L) is −L(B − sL)/(T − L)²: equal to −price at
        return min(max(self.latency_s + math.sqrt(self.latency_s * left / price), lo), hi)


def node_seconds_floor(w: Workload, cluster: ClusterModel) -> NodeSecondsFloor:
    cores = cluster.node_cores
    ph = phases(w, cluster)
    return NodeSecondsFloor(
        busy_node_s=sum(max(p.work_core_s / cores, p.critical_path_s) for p in ph),
        work_node_s=sum(p.work_core_s for p in ph) / cores,
        start_nodes=cluster.start_nodes,
        latency_s=min_latency_s(cluster) if cluster.max_nodes > cluster.start_nodes else math.inf,
        runtime_bound_s=oracle_runtime_s(w, cluster))


def mean_node_seconds_floor(floors: Sequence[NodeSecondsFloor], mean_runtime_s: float) -> float:
    """The fewest node·s, as a mean over runs (one floor each: seeds), any policy pays whose
    mean runtime over them is at most ``mean_runtime_s``: a run may be slower than the
    mean and another faster. Each floor is convex and falls with its deadline, so the
    Lagrangian dual gives it: for a price p of a second, each run's best deadline
    minimises at(T) + pT, and mean(at(T) + pT) − p × mean_runtime_s is a lower bound for
    every p ≥ 0 (weak duality) — the price is searched for the deadlines to average
    ``mean_runtime_s``, but any price found still gives a true floor."""
    if not floors:
        return 0.0
    if fmean([f.runtime_bound_s for f in floors]) > mean_runtime_s:
        return math.inf
    if fmean([f._cheapest_past() for f in floors]) <= mean_runtime_s:
        return fmean([f.busy_node_s for f in floors])

    def mean_deadline(price: float) -> float:
        return fmean([f._best_deadline(price) for f in floors])

    lo, hi = -40.0, 40.0  # log2 of the price: mean_deadline falls as the price rises
    for _ in range(100):
        mid = (lo + hi) / 2
        if mean_deadline(2.0 ** mid) > mean_runtime_s:
            lo = mid
        else:
            hi = mid
    price = 2.0 ** hi
    ts = [f._best_deadline(price) for f in floors]
    dual = fmean([f.at(t) + price * t for f, t in zip(floors, ts)]) - price * mean_runtime_s
    return max(dual, fmean([f.busy_node_s for f in floors]))  # (each run pays its phases' node time)


def least_mean_runtime_s(floors: Sequence[NodeSecondsFloor], node_s: float) -> float:
    """The least mean runtime of any policy whose mean node·s is at most ``node_s`` (inf if
    none: less than the work itself); from :func:`mean_node_seconds_floor`, so a bound too."""
    if not floors or mean_node_seconds_floor(floors, math.inf) > node_s:
        return math.inf
    lo = fmean([f.runtime_bound_s for f in floors])
    if mean_node_seconds_floor(floors, lo) <= node_s:
        return lo
    hi = 2 * lo
    while mean_node_seconds_floor(floors, hi) > node_s:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_node_seconds_floor(floors, mid) > node_s:
            lo = mid
        else:
            hi = mid
    return lo
