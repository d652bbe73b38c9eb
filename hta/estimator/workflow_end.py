"""When the whole remaining workflow ends, and what it costs, on a pool of N nodes.

The queue-drain play (:mod:`hta.estimator.play`) answers what a latency ahead needs, slot by
slot; a deadline or a budget asks about the whole rest of the run, for each pool size tried.
So this is a coarser list schedule of everything left (waiting, running, and every group the
DAG has not released yet), on a pool counted in node shares: a task takes the share of a
node its category's pod takes (``1/k`` for ``k`` of its measured peak in a node; a
never-measured task the probe pod's ``1/probe_split``; a task that declares resources, as
many as fit). Running tasks end at their expected end (:func:`expected_remaining`); a group
is released when everything in its ``after`` is done; ready tasks start first come, first
served while the pool has room. Batches of alike tasks started together are one event, so a
whole-workflow play costs about as many events as the workflow has rounds.

A task of a never-measured category is guessed: the measured categories' geometric mean
runtime, or how long its longest-running task has run (:func:`unmeasured_guess`). With
nothing measured there is no forecast (None): a plan waits for a first task to end.

The cost is what a pool run by HTA pays: the whole pool while any task is still to start
(HTA holds an idle worker for the work ahead: a stage's straggling last round, the gap while
one merge runs), then the node shares still busy, rounded up to whole nodes (what idles then
is drained); plus a latency for each node bought, and the cluster's hold of an empty node
for every node held, on its way or bought (docs/decisions/0031-the-time-cost-dial.md).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from hta.estimator.forecast import expected_remaining
from hta.model import CategoryModel, Observation, Resources

#: a share of a node is counted whole this close to a whole number (float sums)
_EPS = 1e-6


@dataclass(frozen=True)
class WorkflowEnd:
    """One forecast: the pool size it assumed, when the last task ends, and the node·s the
    rest of the run costs from now (not what was spent before)."""

    nodes: int
    end_s: float
    node_s: float


@dataclass
class _Group:
    category: str
    count: int
    share: float
    runtime: float
    left: int  # tasks of it not yet ended (a group is done when this reaches 0)
    after: int = 0  # things it still waits for (an upcoming group)


def unmeasured_guess(obs: Observation) -> dict[str, float] | None:
    """A runtime for each never-measured category the rest of the run has: the geometric
    mean of the measured categories' mean runtimes (one vote each: a workflow's stages differ
    by orders of magnitude, and the one measured most is no better a guess for another), or
    how long its longest-running task has run, if that is longer (a task's age is a lower
    bound of its own runtime; as long again, the play's guess for one task, made every
    waiting task of a stage twice its first's age). A category an earlier run measured
    (``--runtime-prior``) is guessed at that run's mean instead, and then the guesses stand
    even before anything here is measured. None when nothing, here or before, says how long
    anything takes."""
    means = [m.runtime_mean_s for m in obs.categories.values() if m.measured and m.runtime_mean_s]
    if not means:
        means = [m.prior_runtime_s for m in obs.categories.values() if m.prior_runtime_s]
    if not means:
        return None
    prior = math.exp(sum(math.log(max(x, _EPS)) for x in means) / len(means))

    def guess(m: CategoryModel | None) -> float:
        return m.prior_runtime_s if m is not None and m.prior_runtime_s else prior

    out: dict[str, float] = {}
    for t in obs.running:
        m = obs.categories.get(t.category)
        if m is None or not m.measured:
            out[t.category] = max(out.get(t.category, guess(m)), obs.time - t.started_at)
    names = [g.category for g in obs.waiting] + [u.category for u in obs.upcoming]
    for name in names:
        m = obs.categories.get(name)
        if (m is None or not m.measured) and name not in out:
            out[name] = guess(m)
    return out


def node_share(request: Resources, model: CategoryModel | None, node: Resources, probe_split: int) -> float:
    """The share of a node one task of a category holds: ``1/k`` for ``k`` of it in a node
    (its measured peak when it declares nothing, its request when it declares one); a
    never-measured task that declares nothing, the probe pod's ``1/probe_split``."""
    if request.declares_nothing:
        if model is None or not model.measured:
            return 1.0 / max(1, probe_split)
        k = model.peak.count_in(node)
        k = min(k, max(1, int(node.cores + _EPS))) if node.cores > 0 else k
    else:
        k = request.count_in(node)
    return 1.0 / max(1, k)


def forecast_end(obs: Observation, nodes: int, latency_s: float, *, probe_split: int = 3,
                 hold_s: float = 0.0, guesses: dict[str, float] | None = None) -> WorkflowEnd | None:
    """The rest of the workflow played on ``nodes`` nodes of ``obs.worker_shape``: the
    connected workers' shares from now, pending workers one latency after they were asked
    for, the rest bought now and there one ``latency_s`` from now. ``hold_s``: how long the
    cluster keeps a node once its last worker left (charged once for each node).
    None when nothing is measured yet (:func:`unmeasured_guess`)."""
    if guesses is None:
        guesses = unmeasured_guess(obs)
        if guesses is None:
            return None
    node = obs.worker_shape
    now = obs.time

    def runtime(category: str) -> float:
        m = obs.categories.get(category)
        if m is not None and m.measured and m.runtime_mean_s is not None:
            return max(m.runtime_mean_s, _EPS)
        return max(guesses.get(category, 1.0), _EPS)

    def share(category: str, request: Resources) -> float:
        return node_share(request, obs.categories.get(category), node, probe_split)

    # the pool: shares arriving over time, never more than `nodes` in all
    connected = sum(w.capacity.share_of(node) for w in obs.workers)
    arrivals: list[tuple[float, float]] = []
    have = min(float(nodes), connected)
    for p in sorted(obs.pending, key=lambda p: p.requested_at):
        s = min(p.shape.share_of(node), nodes - have - sum(a for _, a in arrivals))
        if s > _EPS:
            arrivals.append((max(now, p.requested_at + latency_s), s))
    bought = max(0.0, nodes - have - sum(a for _, a in arrivals))
    if bought > _EPS:
        arrivals.append((now + latency_s, bought))
    new_nodes = math.ceil(bought - _EPS)  # (those on their way were counted when asked for)

    groups: dict[str, _Group] = {}
    waiters: dict[str, list[str]] = {}  # a ref → the upcoming groups waiting on it
    ready: list[tuple[float, int, str]] = []  # (ready at, order, group id): first come, first served
    # (at, seq, kind, ref, amount): a node share arriving ("arrive", "", share), a running task
    # ending ("task", its ref, its share), a batch of a group ending ("batch", group id, tasks)
    events: list[tuple[float, int, str, str, float]] = []
    seq = 0

    def push(at: float, kind: str, ref: str, amount: float) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, ref, amount))

    for i, wg in enumerate(obs.waiting):
        gid = wg.id if wg.id is not None else f"waiting:{i}"
        groups[gid] = _Group(wg.category, wg.count, share(wg.category, wg.request), runtime(wg.category), wg.count)
        seq += 1
        ready.append((now, seq, gid))
    for u in obs.upcoming:
        groups[u.id] = _Group(u.category, u.count, share(u.category, u.request), runtime(u.category), u.count)
    busy = 0.0
    for rt in obs.running:
        m = obs.categories.get(rt.category)
        elapsed = now - rt.started_at
        left = (expected_remaining(elapsed, m) if m is not None and m.measured
                else max(runtime(rt.category) - elapsed, 0.1 * runtime(rt.category), 1.0))
        s = share(rt.category, Resources() if rt.whole_worker else rt.allocation)
        busy += s
        push(now + left, "task", f"task:{rt.task_id}", s)
    running_refs = {f"task:{rt.task_id}" for rt in obs.running}
    for u in obs.upcoming:
        # (a ref to a task not running any more, or a group gone, is done already)
        pending = [ref for ref in u.after if ref in groups or ref in running_refs]
        groups[u.id].after = len(pending)
        for ref in pending:
            waiters.setdefault(ref, []).append(u.id)
        if not pending:
            seq += 1
            ready.append((now, seq, u.id))
    heapq.heapify(ready)
    for at, s in arrivals:
        push(at, "arrive", "", s)

    capacity = have
    unstarted = sum(g.count for g in groups.values())  # tasks not started yet
    smallest = min((g.share for g in groups.values()), default=1.0)
    end = now
    # node·s of busy shares, each interval's busy shares rounded up to whole nodes
    spent = 0.0
    last_t = now

    def done(ref: str, t: float) -> None:
        for gid in waiters.pop(ref, []):
            g = groups[gid]
            g.after -= 1
            if g.after == 0:
                heapq.heappush(ready, (t, next_order(), gid))

    order = [seq]

    def next_order() -> int:
        order[0] += 1
        return order[0]

    def fill(t: float) -> None:
        nonlocal busy, unstarted
        passed: list[tuple[float, int, str]] = []
        while ready:
            item = heapq.heappop(ready)
            g = groups[item[2]]
            room = capacity - busy
            k = min(g.count, int((room + _EPS) / g.share)) if g.share > 0 else g.count
            if k <= 0:
                passed.append(item)
                if room < smallest - _EPS:
                    break  # (no group's task fits what is left)
                continue
            g.count -= k
            unstarted -= k
            busy += k * g.share
            push(t + g.runtime, "batch", item[2], k)
            if g.count > 0:
                passed.append(item)
        for item in passed:
            heapq.heappush(ready, item)

    fill(now)
    while events:
        t, _, kind, ref, amount = heapq.heappop(events)
        if unstarted > 0:
            spent += math.ceil(capacity - _EPS) * (t - last_t)
        elif busy > _EPS:
            spent += math.ceil(min(busy, capacity) - _EPS) * (t - last_t)
        last_t = t
        if kind == "arrive":
            capacity += amount
        elif kind == "task":
            busy -= amount
            end = max(end, t)
            done(ref, t)
        else:
            g = groups[ref]
            k = int(amount)
            busy -= k * g.share
            g.left -= k
            end = max(end, t)
            if g.left == 0:
                done(ref, t)
        busy = max(busy, 0.0)
        fill(t)
    if any(g.left > 0 for g in groups.values()):
        return WorkflowEnd(nodes, math.inf, math.inf)  # (a pool too small for some task: it never ends)
    # (every node held now, or on its way, or bought, is kept its hold once its last worker leaves)
    held = math.ceil(connected + sum(a for _, a in arrivals) - _EPS)
    return WorkflowEnd(nodes, end, spent + new_nodes * latency_s + held * hold_s)
