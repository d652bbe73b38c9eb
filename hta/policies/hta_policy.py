"""HTA's policy: buy what the queue-drain estimate says will still wait after
one preparation latency; drain what it says will sit idle.

Scale-up happens at most once per preparation cycle L (the thesis's adaptive
stabilisation: workers bought now are still on their way for L seconds) —
unless the workflow released work that the last estimate did not foresee,
which is answered at once. Idle workers are checked every ``check_s``
seconds: draining involves no latency, and a worker idle for a whole cycle is
pure waste. A worker is drained only when it is idle now and the estimate
(with DAG lookahead) never needs it within the horizon, on ``drain_after``
checks in a row (hysteresis, as Dask's ``wait_count``), and never below
``min_workers``; nor while a play run ``hold_latencies`` past the horizon still
gives it work that no never-measured task comes before, or any work that reads the
inputs it holds in its cache (buying it back would cost a latency of runtime, and
fetching those again). Workers on their way count as capacity arriving one L after they were
asked for, so a decision never buys the same shortage twice. What the estimator sees of the
world beyond cores (the master's link, work behind never-measured tasks, the node hold) is in
docs/decisions/0030-the-link-and-the-node-hold.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

from hta.estimator import EstimatorOptions, QueueDrainEstimator
from hta.estimator.workflow_end import forecast_end
from hta.model import DialPlan, Observation, Resources, ScaleDecision
from hta.plural import counted
from hta.policies.base import Policy
from hta.policies.dial import Dial, plan_words
from hta.policies.pod_split import learned_split, pods_too_small
from hta.policies.settings import configure

#: HTA's two named presets beside its default, as settings in the ``hta:key=value`` form
#: (estimator options and the policy's own fields):
#:
#: - ``hta-time`` favours runtime: no tail awareness, so it buys for everything that
#:   still waits at the horizon, even workers that come when a stage's tail is running,
#:   and it holds idle workers for work that never-measured tasks release too
#:   (``hold_for_unmeasured=true``);
#: - ``hta-cost`` favours node-seconds: a worker is bought only if the backlog keeps it
#:   busy for 4 task runtimes or 2 latencies, whichever is less but at least one runtime,
#:   its rounds counted in the tasks' 90th-percentile runtime (never-measured tasks: one
#:   worker per 4 of them); workers are cut to what the waiting tasks measured
#:   (``worker_shape=learned``), a third of a node for a never-measured task
#:   (``probe_split=3``); no idle worker is held for later work (``hold_latencies=0``); and
#:   work behind a never-measured task is bought for ahead, on the play's guess of its end
#:   (``buy_for_gated=true``: with purchases already held to 4 runtimes, waiting for the
#:   release cost it 11–12 % of the runtime on BLAST, SoyKB and Epigenomics at 200 nodes
#:   for no fewer node·s).
#:
#: Both were chosen among settings by the goal lines and rivals they leave in
#: ``bench/pareto.py`` (docs/decisions/0014-presets.md).
PRESETS: dict[str, str] = {
    "hta-time": "tail_aware=false,hold_for_unmeasured=true",
    "hta-cost": ("busy_runtimes=4,busy_latencies=2,busy_latencies_runtime=p90,worker_shape=learned,probe_split=3,"
                 "hold_latencies=0,buy_for_gated=true"),
}

#: under a budget, the latencies never-measured tasks wait for a first one of theirs to end
#: (``first_finish_latencies``): as long as it takes
BUDGET_FIRST_FINISH = 1e6


def make_hta(spec: str = "hta") -> HTAPolicy:
    """``hta`` or one of its :data:`PRESETS`; any other ``hta-…`` is a one-line ValueError."""
    if spec == "hta":
        return HTAPolicy()
    if spec not in PRESETS:
        raise ValueError(f"policy {spec!r}: HTA's presets are {', '.join(PRESETS)}; "
                         f"settings go after a colon, e.g. hta:busy_runtimes=5")
    return configure(HTAPolicy(), spec, PRESETS[spec])  # type: ignore[return-value]


def _as_advertised(obs: Observation) -> Observation:
    """``obs`` with its pending workers as their workers will advertise them: a pending pod's
    shape is what it asks of its node (a third of a 4-core node: 1.33 cores), and it will
    hold the tasks its worker's whole cores hold (1), as a connected one does. (A shape of no
    cores, a pod adopted before its shape was known, is left as it is.)"""
    def told(r: Resources) -> bool:  # already what its worker will advertise, or unknown
        return r.cores <= 0 or r.advertised() == r

    if all(told(p.shape) for p in obs.pending):
        return obs
    pending = [p if told(p.shape) else p.model_copy(update={"shape": p.shape.advertised()}) for p in obs.pending]
    return obs.model_copy(update={"pending": pending})


#: where jobs have a time limit, a new worker's job lives the rest of the run the forecast
#: sees, times this (runtimes vary; the last call hands back what would not fit) ...
JOB_TIME_MARGIN = 1.25
#: ... and at least this many of the longest task learned (a job that fits one task would
#: spend a latency for each)
JOB_TASKS = 2

@dataclass
class HTAPolicy(Policy):
    name: str = "hta"
    options: EstimatorOptions = field(default_factory=EstimatorOptions)
    latency_statistic: Literal["last", "median"] = "median"
    drain_after: int = 1
    #: how often idle workers are checked (and surprises noticed)
    check_s: float = 5.0
    #: scale up at most once per latency cycle (the thesis's stabilisation)
    stabilize: bool = True
    #: the workers' shape: ``node`` (one worker as large as the configured shape, a node) or
    #: ``learned`` (per decision, the smallest 1/k of a node that holds one of each task still
    #: waiting at the horizon, by their measured peaks; see ``probe_split`` while any is
    #: unmeasured). Learned by default: ``hta makeflow`` runs ``makeflow -T wq`` without
    #: ``--allocation``, where a task that declares nothing takes a whole worker however
    #: often its category was measured (CCTools 8.0, measured), so a whole-node worker runs
    #: one 1-core task at a time (docs/decisions/0011-learned-worker-shape.md)
    worker_shape: str = "learned"
    #: learned shapes only: pods bought for never-measured tasks are 1/probe_split of a node
    #: (1: a whole node). Such a task takes a whole worker, whatever its size, and nothing
    #: in Work Queue stops one that needs more; the pod's limits do: more memory is killed
    #: and retried on a node-sized worker, more cores is throttled to the pod's, runs
    #: longer and reads as them (a category's peak is the largest it measured). Where that
    #: guess is wrong it costs: BLAST with 2-core aligns runs 1.7 × as long as on whole nodes
    #: uncapped, at 0.85 × the node·s (``bench/worker_shape.py``)
    probe_split: int = 3
    #: an idle worker is kept while the play, run this many latencies past the one-latency
    #: horizon, gives it work (0: drain whatever the horizon does not need). Draining it
    #: saves its idle seconds; buying it back costs a latency of runtime when the work
    #: comes. The gaps where that matters are a stage waiting on a straggler; one that runs
    #: past about k+1 latencies is held for k and drained anyway
    #: (docs/decisions/0008-drain-and-hold.md)
    hold_latencies: float = 30.0
    #: hold also for work released only after a never-measured task ends (off: a worker is
    #: held only for work no never-measured task comes before). When such a task ends, the
    #: play guesses from how long it has run, and what it gates is a workflow's first stage
    #: of its kind: holding for it paid idle workers for little runtime
    #: (docs/decisions/0008-drain-and-hold.md). ``hta-time`` holds for it; no effect with
    #: hold_latencies=0
    hold_for_unmeasured: bool = False
    #: ... or only where the backend has seen an empty node go within a latency
    #: (Karpenter's consolidation, :attr:`hta.model.Observation.node_hold_s`): there a drained
    #: worker bought back pays a whole latency of runtime, where the cluster autoscaler's
    #: 10-minute hold lands it on its old node in seconds. Off by default: in the Karpenter
    #: world it buys back 3–10 % of the runtime for 2.2–2.5 × the node·s
    #: (docs/decisions/0030-the-link-and-the-node-hold.md)
    hold_where_nodes_go: bool = False
    #: where nodes go so, the hold in latencies past the horizon (at most ``hold_latencies``)
    hold_latencies_where_nodes_go: float = 30.0
    #: ... but hold a worker for such work where that work reads at least this many MB of
    #: inputs the worker already holds in its cache (0: never). Drained, the worker's place is
    #: taken by a new one that fetches them again over the master's one link, one worker after
    #: another: BLAST's 500 MB database to each of 600 pods is ~11 min at 450 MB/s. Only a
    #: workflow whose category reads the same files in every task has such inputs
    #: (docs/decisions/0008-drain-and-hold.md)
    hold_cached_mb: float = 100.0
    #: the time–cost dial (:mod:`hta.policies.dial`): finish by this many seconds from the
    #: run's start, paying the fewest node·s the forecast allows (0: no deadline) …
    deadline_s: float = 0.0
    #: … or finish as early as this many node·s allow (nodes of the configured worker
    #: shape; 0: no budget). One of the two, or neither
    budget_node_s: float = 0.0
    _dial: Dial | None = None
    _budget_estimator: QueueDrainEstimator | None = None
    _proposed: dict[str, int] = field(default_factory=dict)
    #: workers leaving at their job's end that a replacement was bought for
    _replaced: set[str] = field(default_factory=set)
    _next_up_at: float = float("-inf")
    #: the run's cap at the last scale-up
    _cap_at_up: int = 0
    _expected: tuple[int, list[tuple[float, int]]] | None = None
    #: categories whose whole-worker tasks waited while pods smaller than a node sat idle:
    #: a pod is too small for them, whatever ``probe_split`` says
    _needs_node: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.estimator = QueueDrainEstimator(self.options)
        self.validate()

    def validate(self) -> None:
        """Settings that would make no sense are refused in one line (called again after
        ``POLICY:key=value`` settings are applied)."""
        if not (self.options.busy_runtimes > 0 and math.isfinite(self.options.busy_runtimes)):
            raise ValueError("busy_runtimes must be a number > 0 (1 is the default; "
                             "for no cap on the workers bought, set tail_aware=false)")
        if not (self.options.busy_latencies >= 0 and math.isfinite(self.options.busy_latencies)):
            raise ValueError("busy_latencies must be a number ≥ 0 (0: no such rule)")
        if self.options.busy_latencies_runtime not in ("mean", "p90"):
            raise ValueError(f"busy_latencies_runtime must be mean or p90, not {self.options.busy_latencies_runtime!r}")
        if not (self.options.unmeasured_per_worker >= 1 and math.isfinite(self.options.unmeasured_per_worker)):
            raise ValueError("unmeasured_per_worker must be a number ≥ 1 (1: a worker for each "
                             "never-measured task)")
        if self.worker_shape not in ("node", "learned"):
            raise ValueError(f"worker_shape must be node or learned, not {self.worker_shape!r}")
        if self.drain_after < 1:  # (0 or less drained as 1 does, silently)
            raise ValueError(f"drain_after must be a whole number ≥ 1 (how many idle checks in a row find a worker "
                             f"unneeded before it is drained), not {self.drain_after}")
        if self.probe_split < 1:
            raise ValueError(f"probe_split must be a whole number ≥ 1, not {self.probe_split}")
        if self.latency_statistic not in ("last", "median"):
            raise ValueError(f"latency_statistic must be last or median, not {self.latency_statistic!r}")
        if not (self.hold_latencies >= 0 and math.isfinite(self.hold_latencies)):
            raise ValueError("hold_latencies must be a number ≥ 0 (0: no hold)")
        if not (self.options.first_finish_latencies >= 0 and math.isfinite(self.options.first_finish_latencies)):
            raise ValueError("first_finish_latencies must be a number ≥ 0 (0: buy for never-measured tasks at once)")
        if not (self.hold_latencies_where_nodes_go >= 0 and math.isfinite(self.hold_latencies_where_nodes_go)):
            raise ValueError("hold_latencies_where_nodes_go must be a number ≥ 0 (0: no hold where nodes go)")
        if not (self.hold_cached_mb >= 0 and math.isfinite(self.hold_cached_mb)):
            raise ValueError("hold_cached_mb must be a number ≥ 0 (0: no hold for cached inputs)")
        if not (self.check_s > 0 and math.isfinite(self.check_s)):
            raise ValueError("check_s must be > 0 seconds")
        if not (self.deadline_s >= 0 and math.isfinite(self.deadline_s)):
            raise ValueError("deadline_s must be a number of seconds ≥ 0 (0: no deadline)")
        if not (self.budget_node_s >= 0 and math.isfinite(self.budget_node_s)):
            raise ValueError("budget_node_s must be a number of node·s ≥ 0 (0: no budget)")
        if self.deadline_s > 0 and self.budget_node_s > 0:
            raise ValueError("give deadline_s or budget_node_s, not both")

    @staticmethod
    def _known(obs: Observation) -> int:
        return obs.waiting_count + len(obs.running) + obs.tasks_done

    def _surprised(self, obs: Observation) -> bool:
        """More tasks released since the last scale-up than its estimate foresaw."""
        if self._expected is None:
            return True
        known, releases = self._expected
        foreseen = known + sum(n for t, n in releases if t <= obs.time)
        return self._known(obs) > foreseen

    def _split(self, obs: Observation, left: list, too_small: list[str]) -> int:
        """Into how many equal workers a node is cut for this purchase (1: a whole node):
        :func:`~hta.policies.pod_split.learned_split` over what still waits at the horizon."""
        if self.worker_shape != "learned" or not left or too_small:
            return 1  # (pods idle while tasks wait: what waits needs more than a pod)
        return learned_split(obs, left, self.probe_split, self._needs_node)

    def _too_small(self, obs: Observation, latency: float) -> list[str]:
        """Learned shapes only: :func:`~hta.policies.pod_split.pods_too_small`."""
        if self.worker_shape != "learned":
            return []
        return pods_too_small(obs, latency, self.check_s)

    def _not_held(self, obs: Observation, latency: float, candidates: set[str]) -> set[str]:
        """The idle ``candidates`` that a play ``hold_latencies`` past the horizon never gives
        work: work no never-measured task comes before (any work with
        ``hold_for_unmeasured``), or work that reads ``hold_cached_mb`` of what the worker
        holds in its cache."""
        nodes_go = self._nodes_go(obs, latency)
        horizon = latency * (1 + (min(self.hold_latencies, self.hold_latencies_where_nodes_go) if nodes_go
                                  else self.hold_latencies))
        hold_all = self.hold_for_unmeasured or nodes_go
        unused, given = self.estimator.idle_work(obs, latency, horizon, measured_only=not hold_all)
        out = candidates & set(unused)
        if not out or hold_all or self.hold_cached_mb <= 0 or not obs.shared_inputs:
            return out
        by_id = {w.id: w for w in obs.workers}
        return {w for w in out if w not in given or w not in by_id
                or obs.cached_for_work_mb(by_id[w], given[w]) < self.hold_cached_mb}

    def _nodes_go(self, obs: Observation, latency: float) -> bool:
        """A drained worker's node goes before a latency passes, as the backend has seen."""
        return self.hold_where_nodes_go and obs.node_hold_s is not None and obs.node_hold_s < latency

    def _plan(self, obs: Observation, latency: float) -> DialPlan | None:
        """The dial's plan for this decision (None: neither a deadline nor a budget). The
        spend is counted from the first decision, dial or not, and kept when the dial
        changes while the run goes (``hta set``, SIGHUP): a budget set or raised then counts
        what the run has spent already (docs/decisions/0033-changing-a-running-run.md)."""
        asked = (self.deadline_s, self.budget_node_s)
        if self._dial is None:
            self._dial = Dial(*asked)
        elif (self._dial.deadline_s, self._dial.budget_node_s) != asked:
            self._dial = self._dial.retargeted(*asked)
        if self.deadline_s <= 0 and self.budget_node_s <= 0:
            self._dial.account(obs, Dial.hold_of(obs))
            return None
        return self._dial.decide_nodes(obs, latency, self.probe_split if self.worker_shape == "learned" else 1)

    def _estimator_for(self, plan: DialPlan | None) -> QueueDrainEstimator:
        """The estimator this decision buys by. Under a budget, never-measured tasks whose
        first tasks already run get no worker until one of those ends: a stage's cost is
        unknown until then, and the workers bought on a guess were the budget's overrun
        (docs/decisions/0031-the-time-cost-dial.md)."""
        if plan is None or plan.budget_node_s is None:
            return self.estimator
        if self._budget_estimator is None:
            self._budget_estimator = QueueDrainEstimator(dataclasses.replace(
                self.options, first_finish_latencies=max(self.options.first_finish_latencies, BUDGET_FIRST_FINISH)))
        return self._budget_estimator

    def _replacements(self, obs: Observation) -> list[str]:
        """Workers whose job's last call comes within a latency while work remains: one new
        worker each, bought now so that it connects as the old one leaves (HyperQueue
        refreshes its allocations before they expire so). Once per worker: those a purchase
        covered are remembered (:meth:`decide`)."""
        self._replaced &= set(obs.worker_ends)
        soon = obs.leaving() - self._replaced
        if not soon or not (obs.waiting_count or obs.upcoming):
            return []
        return sorted(soon, key=lambda w: obs.worker_ends[w])

    def _job_time(self, obs: Observation, nodes: int, latency: float) -> float | None:
        """How long a new worker's job should live, where jobs have a time limit: the rest of
        the run as the forecast sees it with ``nodes``, plus a latency, × :data:`JOB_TIME_MARGIN`,
        and at least :data:`JOB_TASKS` of the longest task learned; within the limit. None
        (the backend's default, the longest) while this run has measured nothing (an earlier
        run's mean runtimes say nothing of this run's longest task: a job cut short loses it)."""
        assert obs.job_ceiling_s is not None
        if not any(m.measured for m in obs.categories.values()):
            return None
        end = forecast_end(obs, max(1, nodes), latency,
                           probe_split=self.probe_split if self.worker_shape == "learned" else 1)
        if end is None:
            return None
        longest = max((m.runtime_quantile(1.0) or 0.0 for m in obs.categories.values() if m.measured), default=0.0)
        want = max((end.end_s - obs.time + latency) * JOB_TIME_MARGIN, JOB_TASKS * longest)
        return min(obs.job_ceiling_s, want)

    def decide(self, obs: Observation) -> ScaleDecision:
        latency = obs.latency.estimate(self.latency_statistic)
        cap = obs.max_workers  # (the run's, before the dial's pool: raised while the run goes, it buys at once)
        plan = self._plan(obs, latency)
        capped = plan is not None and plan.nodes is not None and plan.nodes < obs.max_workers
        if capped:  # the dial's pool is the cap the policy buys within
            assert plan is not None and plan.nodes is not None
            obs = obs.model_copy(update={"max_workers": max(obs.min_workers, plan.nodes)})
        sized = _as_advertised(obs)  # (the cap still counts what pods ask of their nodes: obs)
        estimator = self._estimator_for(plan)
        est = estimator.estimate(sized, latency)
        too_small = self._too_small(obs, latency)
        shape, split = obs.worker_shape, self._split(obs, est.left_waiting, too_small)
        if split > 1:  # size the purchase in workers of 1/split of a node, as their workers advertise them
            shape = obs.worker_shape.split(split)
            est = estimator.estimate(sized.model_copy(update={"worker_shape": shape.advertised()}), latency)
        have = len(obs.workers) + len(obs.pending)

        leaving = self._replacements(obs)
        replace = len(leaving)
        wanted = max(est.workers_needed, obs.min_workers - have, 0) + replace
        add = min(wanted, obs.room_for(shape))
        if capped:  # (what the dial holds back is the policy's choice, not the cap's)
            wanted = add
        # a cap raised since the last scale-up (hta set, SIGHUP) frees what it held back: that
        # part is not on its way, and there is nothing to stabilise on
        may_scale_up = (not self.stabilize or obs.time >= self._next_up_at or self._surprised(obs)
                        or cap > self._cap_at_up)
        if not may_scale_up:  # (a hold for stabilisation, not one the cap makes)
            add = wanted = 0
        if add:
            self._next_up_at = obs.time + latency
            self._cap_at_up = cap
            self._expected = (self._known(obs), est.releases)
            self._replaced.update(leaving[:add])  # (the first to leave first; a purchase held back asks again)

        self._needs_node.update(g.category for g in obs.waiting if too_small and g.whole_worker)
        drain: list[str] = []
        if est.workers_needed == 0 and est.left_count == 0:
            candidates = set(est.unused_idle)
            room = max(0, have - obs.min_workers)
            if candidates and room and self.hold_latencies > 0:  # (the whole shape: split is 1 here)
                candidates = self._not_held(obs, latency, candidates)
            self._proposed = {w: self._proposed.get(w, 0) + 1 for w in candidates}
            ready = sorted(w for w, n in self._proposed.items() if n >= self.drain_after)
            drain = sorted(set(ready) | set(too_small))[:room]
        else:
            self._proposed.clear()
            drain = too_small[:max(0, have - obs.min_workers)]
        for w in drain:
            self._proposed.pop(w, None)

        reason = (
            f"L={latency:.1f}s: {counted(est.left_count, 'task')} still waiting at the horizon "
            f"(pack into {est.packed_need}, tail-aware {est.workers_needed}); "
            f"{counted(len(est.unused_idle), 'idle worker')} unneeded"
        )
        if est.gated_count:
            reason += f"; {counted(est.gated_count, 'task')} behind a never-measured one, bought for once released"
        if est.awaiting_first:
            reason += f"; waiting for a first {' or '.join(est.awaiting_first)} task to end"
        if est.limit:
            reason += f"; {est.limit}"
        if split > 1:
            reason += f"; workers of 1/{split} node"
        if replace and add:
            reason += f"; {counted(min(add, replace), 'worker')} near their job's end, replaced ahead"
        job_time = self._job_time(obs, have + add, latency) if add and obs.job_ceiling_s else None
        if job_time is not None:  # (Slurm's unit: whole minutes)
            reason += f"; jobs of {math.ceil(job_time / 60)} min"
        if plan is not None:
            reason += f"; {plan_words(plan)}"
        return ScaleDecision(
            add=add,
            wanted=wanted,
            shape=shape,
            drain=drain,
            next_decision_s=min(latency, self.check_s),
            target_workers=have + add - len(drain),
            reason=reason,
            plan=plan,
            job_time_s=job_time,
        )
