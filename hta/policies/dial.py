"""The time–cost dial: how many nodes HTA may hold to finish by a deadline, or within a budget.

The plan is the provisioning half of deadline- and budget-constrained workflow scheduling
(Malawski et al., SC'12; Mao & Humphrey, SC'11; Rodriguez & Buyya, ICPP 2015): forecast the
whole remaining workflow on pools of several sizes (:func:`forecast_end`, the learned
runtimes and the DAG ahead), and choose

- with a **deadline**: the smallest pool whose forecast ends by the deadline less a margin,
  so the run pays the fewest node·s the deadline allows (a smaller pool idles less, pays
  fewer latencies and node holds);
- with a **budget**: the largest pool whose forecast spend (what was spent, plus the rest's
  cost) stays within the budget less a margin, so the run ends as early as it allows.

The pool becomes the cap of HTA's queue-drain policy, which still decides what to buy and
drain within it. The plan is made again every latency, as tasks are measured; the margin
is a share of the time (or spend) still ahead, larger where the learned runtimes spread more
(their p90 against their mean) and where any category is still unmeasured, plus the
latency's own spread. An ask the forecast cannot keep is said once, in one line, and the run
goes as fast (deadline) or as cheaply (budget) as it can. A budget is a ceiling on buying:
once what was spent and the work already running reach it, nothing more is bought and
nothing busy is stopped (docs/decisions/0031-the-time-cost-dial.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hta.estimator.forecast import expected_remaining
from hta.estimator.workflow_end import WorkflowEnd, forecast_end, unmeasured_guess
from hta.model import DialPlan, Observation
from hta.plural import counted, node_hours, span

#: how long a node is assumed to stay once its last worker left, until the backend has seen
#: one go (:attr:`~hta.model.Observation.node_hold_s`), where workers run on nodes the
#: backend names: the cluster-autoscaler's default ``--scale-down-unneeded-time`` (10 min,
#: its FAQ). Assumed short, a budget would be planned without the hold every node bought
#: pays at the end; where workers are processes or batch jobs, their "node" goes with them
ASSUMED_NODE_HOLD_S = 600.0

#: the margin's share of what is ahead, at the least and at the most
MARGIN_MIN = 0.05
MARGIN_MAX = 0.3
#: … added for a spread of the runtimes (p90 / mean − 1, weighted by the tasks ahead)
MARGIN_PER_SPREAD = 0.25
#: … and while any category ahead is still unmeasured (its runtime is a guess)
MARGIN_UNMEASURED = 0.05


@dataclass
class Dial:
    """A deadline (seconds from the run's start) or a budget (node·s), never both; 0: none."""

    deadline_s: float = 0.0
    budget_node_s: float = 0.0
    spent_node_s: float = 0.0
    plan: DialPlan | None = None
    _last_t: float | None = None
    _nodes: set[str] = field(default_factory=set)
    _next_plan_at: float = -math.inf
    _planned_on: tuple[frozenset[str], int] | None = None
    _said: set[str] = field(default_factory=set)

    def retargeted(self, deadline_s: float, budget_node_s: float) -> Dial:
        """This dial with another ask, its spend so far kept (the pool paid for what it held,
        whatever was asked of it), planned again at its next decision."""
        return Dial(deadline_s, budget_node_s, spent_node_s=self.spent_node_s, _last_t=self._last_t,
                    _nodes=set(self._nodes))

    def account(self, obs: Observation, hold_s: float) -> None:
        """Count what the pool has cost since the last observation. Where the backend names
        each worker's node, as the cluster bills: every node that runs a worker, whole, and
        its hold once its last worker left (a node with one pod of a third is paid whole, and
        kept whole); elsewhere each worker by its share of a node. A worker on its way counts
        its share (its node is being made for it)."""
        node = obs.worker_shape
        pending = sum(p.shape.share_of(node) for p in obs.pending)
        if obs.worker_nodes:
            nodes = {obs.worker_nodes.get(w.id, w.id) for w in obs.workers}
            held = len(nodes) + pending
            self.spent_node_s += hold_s * len(self._nodes - nodes)
            self._nodes = nodes
        else:
            held = sum(w.capacity.share_of(node) for w in obs.workers) + pending
        if self._last_t is not None and obs.time > self._last_t:
            self.spent_node_s += held * (obs.time - self._last_t)
        self._last_t = obs.time

    @staticmethod
    def hold_of(obs: Observation) -> float:
        """The node hold to plan with: as the backend saw it, else :data:`ASSUMED_NODE_HOLD_S`
        where workers run on nodes, else none."""
        if obs.node_hold_s is not None:
            return obs.node_hold_s
        return ASSUMED_NODE_HOLD_S if obs.worker_nodes else 0.0

    def decide_nodes(self, obs: Observation, latency_s: float, probe_split: int) -> DialPlan:
        """The plan for this decision (made again once a latency has passed, a category is
        first measured, or the DAG released work)."""
        hold_s = self.hold_of(obs)
        self.account(obs, hold_s)
        # (again at once when a category is first measured, or the DAG released work)
        basis = (frozenset(n for n, m in obs.categories.items() if m.measured), len(obs.waiting))
        if (self.plan is not None and self.plan.nodes is not None and obs.time < self._next_plan_at
                and basis[0] == self._planned_on[0] and basis[1] <= self._planned_on[1]):  # type: ignore[index]
            self.plan = self.plan.model_copy(update={"spent_node_s": self.spent_node_s, "note": None})
            return self.plan
        self._next_plan_at = obs.time + latency_s
        self._planned_on = basis
        lo = max(1, obs.min_workers)
        hi = max(lo, obs.max_workers)
        guesses = unmeasured_guess(obs)
        base = DialPlan(deadline_s=self.deadline_s or None, budget_node_s=self.budget_node_s or None,
                        spent_node_s=self.spent_node_s)
        if guesses is None:
            # nothing measured, here or in an earlier run (--runtime-prior): a deadline has the
            # cap until a first task ends (it cannot tell a loose one from a tight one); a
            # budget the smallest pool, since what it buys on
            # nothing was its overrun (io-bound at 20 nodes bought the cap at once and paid
            # 24.5k node·s of a 14.4k budget)
            self.plan = base if self.deadline_s > 0 else base.model_copy(update={"nodes": lo})
            return self.plan
        rel = self._margin_share(obs, guesses)
        spread_l = self._latency_spread(obs)
        memo: dict[int, WorkflowEnd] = {}

        def at(n: int) -> WorkflowEnd:
            if n not in memo:
                f = forecast_end(obs, n, latency_s, probe_split=probe_split, hold_s=hold_s, guesses=guesses)
                assert f is not None
                memo[n] = f
            return memo[n]

        if self.deadline_s > 0:
            self.plan = self._for_deadline(obs, base, at, lo, hi, rel, spread_l, latency_s, probe_split, hold_s)
        else:
            self.plan = self._for_budget(obs, base, at, lo, hi, rel)
        return self.plan

    def _could_end_by(self, obs: Observation, hi: int, latency_s: float, probe_split: int, hold_s: float) -> bool:
        """The cap might still meet the deadline if every never-measured task ran no longer than
        its category's longest-running one has (a second for one not started): the guess, not
        the forecast, says it cannot. (Montage's 1,263 s mProject, its one category measured,
        made its 47 s mDiffFits as long, and a deadline it met by half was called impossible.)
        Such an ask is not said to fail until the categories are measured."""
        ages: dict[str, float] = {}
        for t in obs.running:
            m = obs.categories.get(t.category)
            if m is None or not m.measured:
                ages[t.category] = max(ages.get(t.category, 1.0), obs.time - t.started_at)
        least = {c: ages.get(c, 1.0) for c in (unmeasured_guess(obs) or {})}
        f = forecast_end(obs, hi, latency_s, probe_split=probe_split, hold_s=hold_s, guesses=least)
        return f is not None and f.end_s <= self.deadline_s

    def _for_deadline(self, obs: Observation, base: DialPlan, at: Callable[[int], WorkflowEnd], lo: int, hi: int,
                      rel: float, spread_l: float, latency_s: float, probe_split: int, hold_s: float) -> DialPlan:
        def keeps(n: int) -> bool:
            f = at(n)
            return f.end_s + rel * (f.end_s - obs.time) + spread_l <= self.deadline_s

        fastest = at(hi)
        if not keeps(hi):
            note = None
            if ("deadline" not in self._said and math.isfinite(fastest.end_s)
                    and not self._could_end_by(obs, hi, latency_s, probe_split, hold_s)):
                self._said.add("deadline")
                note = (f"deadline {span(self.deadline_s)} cannot be met: the earliest end is "
                        f"{span(fastest.end_s)} at {hi} workers; running as fast as it can")
            return self._on(base, fastest, feasible=False, note=note)
        return self._on(base, at(_first_true(lo, hi, keeps)))

    def _for_budget(self, obs: Observation, base: DialPlan, at: Callable[[int], WorkflowEnd], lo: int, hi: int,
                    rel: float) -> DialPlan:
        left = self.budget_node_s - self.spent_node_s
        have = math.ceil(sum(w.capacity.share_of(obs.worker_shape) for w in obs.workers)
                         + sum(p.shape.share_of(obs.worker_shape) for p in obs.pending) - 1e-6)
        running_left = self._running_node_s(obs)
        if left <= running_left:  # spent, but for the work already running: buy nothing more
            note = None
            if "spent" not in self._said:
                self._said.add("spent")
                note = (f"budget {node_hours(self.budget_node_s)} is spent by the work now running "
                        f"({node_hours(self.spent_node_s)} so far); buying nothing more")
            return base.model_copy(update={"nodes": max(have, 0), "feasible": False, "exhausted": True,
                                           "note": note, "forecast_node_s": self.spent_node_s + running_left})

        def keeps(n: int) -> bool:
            return at(n).node_s * (1 + rel) <= left

        if not keeps(lo):
            cheapest = min((at(n) for n in _few(lo, hi)), key=lambda f: f.node_s)
            note = None
            if "budget" not in self._said:
                self._said.add("budget")
                note = (f"budget {node_hours(self.budget_node_s)} cannot be kept: {node_hours(max(0.0, left))} is left "
                        f"and the rest needs {node_hours(cheapest.node_s)} at {cheapest.nodes} "
                        f"worker{'s' if cheapest.nodes != 1 else ''}, {rel:.0%} more for what is not known yet; "
                        f"running as cheaply as it can")
            return self._on(base, cheapest, feasible=False, note=note)
        return self._on(base, at(_last_true(lo, hi, keeps)))

    def _on(self, base: DialPlan, f: WorkflowEnd, **more: object) -> DialPlan:
        """``base`` planned on forecast ``f``: its pool, its end, the spend so far and ahead."""
        return base.model_copy(update={"nodes": f.nodes, "projected_end_s": f.end_s,
                                       "forecast_node_s": self.spent_node_s + f.node_s, **more})

    @staticmethod
    def _running_node_s(obs: Observation) -> float:
        """Node·s the workers now busy will still cost until their tasks end (a lower bound:
        the remaining runtime of the longest task on each, by its share)."""
        node = obs.worker_shape
        until: dict[str, float] = {}
        for t in obs.running:
            m = obs.categories.get(t.category)
            elapsed = obs.time - t.started_at
            rest = expected_remaining(elapsed, m) if m is not None and m.measured else elapsed
            if t.worker is not None:
                until[t.worker] = max(until.get(t.worker, 0.0), rest)
        return sum(w.capacity.share_of(node) * until.get(w.id, 0.0) for w in obs.workers)

    @staticmethod
    def _margin_share(obs: Observation, guesses: dict[str, float]) -> float:
        """The margin's share of what is ahead: the runtimes' spread over the tasks ahead,
        more while a category ahead is unmeasured."""
        weight = spread = 0.0
        counts: dict[str, int] = {}
        for category, count in [*((g.category, g.count) for g in obs.waiting),
                                *((u.category, u.count) for u in obs.upcoming)]:
            counts[category] = counts.get(category, 0) + count
        for name, n in counts.items():
            m = obs.categories.get(name)
            if m is not None and m.measured and m.runtime_mean_s and m.runtime_p90_s:
                spread += n * max(0.0, m.runtime_p90_s / m.runtime_mean_s - 1)
                weight += n
        rel = MARGIN_MIN + (MARGIN_PER_SPREAD * spread / weight if weight else 0.0)
        if any(name in guesses for name in counts):
            rel += MARGIN_UNMEASURED
        return min(MARGIN_MAX, rel)

    @staticmethod
    def _latency_spread(obs: Observation) -> float:
        """How much later than its median a worker may come: the latency samples' p90 less
        their median (0 with fewer than 3)."""
        xs = sorted(obs.latency.measured[-20:])
        if len(xs) < 3:
            return 0.0
        return max(0.0, xs[min(len(xs) - 1, int(0.9 * len(xs)))] - xs[len(xs) // 2])


def _first_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The smallest n in [lo, hi] with ok(n), for ok false then true (ok(hi) holds)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest n in [lo, hi] with ok(n), for ok true then false (ok(lo) holds)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _few(lo: int, hi: int) -> list[int]:
    """A handful of pool sizes from ``lo``: where the cheapest pace is looked for."""
    return sorted({min(hi, lo + d) for d in (0, 1, 2, 4, 8)})


def plan_words(plan: DialPlan) -> str:
    """The plan in a decision's reason: ``deadline 2h: 12 workers end by 1h41m``."""
    ask = (f"deadline {span(plan.deadline_s)}" if plan.deadline_s is not None
           else f"budget {node_hours(plan.budget_node_s or 0.0)}")
    if plan.exhausted:
        return f"{ask}: spent ({node_hours(plan.spent_node_s)}), buying nothing more"
    if plan.projected_end_s is None:
        pool = f", {plan.nodes} worker{'s' if plan.nodes != 1 else ''} until then" if plan.nodes is not None else ""
        return f"{ask}: no forecast until a first task ends{pool}"
    spend = f", spending {node_hours(plan.forecast_node_s)}" if plan.forecast_node_s is not None else ""
    late = "" if plan.feasible else " (cannot be kept)"
    return f"{ask}{late}: {plan.nodes} worker{'s' if plan.nodes != 1 else ''} end by {span(plan.projected_end_s)}{spend}"


def budget_spent(plan: DialPlan | None, obs: Observation | None) -> str | None:
    """The line that ends a run whose ``--budget`` is spent with tasks still waiting and no
    worker left to run them (None while it can still end well)."""
    if plan is None or not plan.exhausted or obs is None or plan.budget_node_s is None:
        return None
    if obs.workers or obs.pending or obs.running or not obs.waiting_count:
        return None
    return (f"the budget of {node_hours(plan.budget_node_s)} is spent ({node_hours(plan.spent_node_s)} by HTA's "
            f"count) with {counted(obs.waiting_count, 'task')} waiting and no worker left: give a larger --budget "
            f"and run again (makeflow resumes where it stopped)")
