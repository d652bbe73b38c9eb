"""The control loop: observe → decide → act. The only one.

Production (``hta makeflow``) and the evaluation simulator run this same
:class:`Controller`; they differ only in what it talks to:

============  ======================================  ======================================
dependency    production                              simulator (``hta.sim``)
============  ======================================  ======================================
master        :class:`MasterStatusClient` (HTTP)      ``SimMaster`` (the simulated queue)
backend       a ``WorkerPool`` over a provider        ``SimBackend`` (simulated nodes)
summaries     ``makeflow --monitor`` directory        ``SimMonitor`` (completed tasks)
upcoming      the DAG from ``makeflow_viz``           the same code on the workload's DAG
clock         ``time.time``                           ``simpy`` time
============  ======================================  ======================================

Each :meth:`Controller.step` reads the master, the monitor summaries and the
backend, builds an :class:`~hta.model.Observation` (one builder), logs it
(the supply / in-use / demand curve the report integrates), and — when the
policy's last ``next_decision_s`` has passed, clamped to
[``min_interval_s``, ``max_interval_s``] — asks the policy and carries the
decision out through the backend, clamped to ``max_workers``. Latency
samples come from the backend's ``connected`` events, whoever the backend is.

Production calls :meth:`run`, which polls every ``poll_interval_s`` and
survives any error of a dependency (it reports it and tries again);
the simulator calls :meth:`step` whenever its world changes and at
:meth:`next_wake`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from hta.accounting import CoreSample
from hta.backends.base import CPU_UTILIZATION, WorkerBackend
from hta.live import LiveSettings, Refused, SettingChange, changes_between, merged
from hta.model import LINK_PRIOR_MB_PER_S, DialPlan, LatencyStats, Observation, Resources, ScaleDecision
from hta.observation import ObservationBuilder, UpcomingSource
from hta.policies.base import PluginPolicy, Policy, as_policy
from hta.scaling_log import CategoriesRecord, DecisionRecord, ObservationRecord, ScalingLogWriter, WorkerRecord
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.snapshot import MasterSnapshot

log = logging.getLogger("hta.controller")
#: what HTA learned of the world it runs in (apart: the live view silences the controller's own lines)
world_log = logging.getLogger("hta.world")
#: what the time–cost dial says once (an ask it cannot keep): a warning the live view does not repeat
dial_log = logging.getLogger("hta.dial")


class MasterSource(Protocol):
    """Reads the Work Queue master: :class:`~workqueue_bridge.status.MasterStatusClient`
    in production, ``hta.sim.master.SimMaster`` in the simulator."""

    async def snapshot(self, now: float) -> MasterSnapshot:
        """The master now. A reader whose full read is costly may answer with the task
        table of its last read, within a budget (see ``MasterStatusClient``)."""
        ...


class SummarySource(Protocol):
    """New resource-monitor summaries since the last call (each once)."""

    def poll(self) -> list[TaskSummary]: ...


@dataclass
class ControllerConfig:
    worker_shape: Resources
    min_workers: int = 0
    max_workers: int = 4
    poll_interval_s: float = 1.0
    min_interval_s: float = 2.0
    max_interval_s: float = 300.0
    latency_prior_s: float = 30.0
    #: the master gives a task that declares nothing its category's measured peak
    #: (makeflow --allocation=throughput) rather than a whole worker
    auto_allocation: bool = False
    #: category → file → MB: the files every task of a category reads (what a worker keeps in
    #: its cache for the next task of it; :attr:`hta.model.Observation.shared_inputs`)
    shared_inputs: dict[str, dict[str, float]] = field(default_factory=dict)
    #: category → mean MB a task of it reads beyond those (:attr:`hta.model.Observation.task_inputs_mb`)
    task_inputs_mb: dict[str, float] = field(default_factory=dict)
    #: the master link's bandwidth until it has moved enough to measure (:class:`hta.model.LinkStats`)
    link_prior_mb_per_s: float = LINK_PRIOR_MB_PER_S
    #: category → an earlier run's mean runtime (``hta makeflow --runtime-prior``): the
    #: forecast's until this run measures the category (recorded with the rest, so a replay
    #: decides as the run did)
    runtime_prior: dict[str, float] = field(default_factory=dict)


class Controller:
    def __init__(
        self,
        *,
        master: MasterSource,
        backend: WorkerBackend,
        policy: Policy,
        learner: CategoryLearner,
        summaries: SummarySource,
        scaling_log: ScalingLogWriter,
        config: ControllerConfig,
        epoch: float,
        upcoming: UpcomingSource | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.master = master
        self.backend = backend
        self.policy = as_policy(policy)
        self.learner = learner
        learner.take_prior(config.runtime_prior)
        self.summaries = summaries
        self.log = scaling_log
        self.config = config
        self.epoch = epoch
        self.upcoming = upcoming
        self.clock = clock
        #: the workers' CPU is read only for a policy that needs it (an HPA): measuring every
        #: worker's process tree, or asking the metrics API, at every step costs what it saves
        self.reads_cpu = CPU_UTILIZATION in self.policy.needs
        backend.configure_shape(config.worker_shape)  # (what a refused worker's line names)
        self.builder = ObservationBuilder(epoch=epoch, worker_shape=config.worker_shape,
                                          min_workers=config.min_workers, max_workers=config.max_workers,
                                          auto_allocation=config.auto_allocation,
                                          shared_inputs=config.shared_inputs,
                                          task_inputs_mb=config.task_inputs_mb,
                                          link_prior_mb_per_s=config.link_prior_mb_per_s)
        self.latency = LatencyStats(prior_s=config.latency_prior_s)
        self.next_decision_at = 0.0
        self.samples: list[CoreSample] = []
        self.worker_events: list[WorkerRecord] = []
        self.decisions: list[DecisionRecord] = []
        #: the time–cost dial's latest plan (None: no --deadline or --budget)
        self.plan: DialPlan | None = None
        self.last_snapshot: MasterSnapshot | None = None
        self.last_observation: Observation | None = None
        #: the last error of a dependency, while it lasts (None once a step succeeds)
        self.last_error: str | None = None
        #: steps that failed since the run started (the status server's API-error count)
        self.step_failures = 0
        self._last_record: tuple | None = None
        self._told_hold: float | None = None
        self._told_link = False
        #: settings changed while the run goes (``hta set``, SIGHUP), not applied yet, and
        #: the changes they make (:meth:`change`)
        self._pending: LiveSettings | None = None
        self._pending_changes: list[SettingChange] = []
        #: changes applied whose decision is not written yet (a step that failed to observe
        #: leaves them for the next one)
        self._unwritten: list[SettingChange] = []
        #: every change applied, with when (seconds since the epoch), oldest first
        self.changes: list[tuple[float, SettingChange]] = []
        #: a change lowered the cap: idle workers above it are drained (:meth:`_over_cap`)
        self._cap_lowered = False

    def now(self) -> float:
        """Seconds since the run started, for observers (status page, panel): read past a
        recording clock (:class:`hta.replay.RecordingClock`), which writes down the control
        path's reads only."""
        return getattr(self.clock, "unrecorded", self.clock)() - self.epoch

    def next_wake(self) -> float:
        """When (seconds since the epoch) the next decision is due."""
        return self.next_decision_at

    # -- settings changed while the run goes -------------------------------------------
    def _dial_holder(self) -> Policy | None:
        """The policy, if it takes the time–cost dial (HTA's: ``deadline_s`` and
        ``budget_node_s`` settings), else None. Read by name: the controller knows no policy."""
        p = self.policy.inner if isinstance(self.policy, PluginPolicy) else self.policy
        return p if isinstance(getattr(p, "deadline_s", None), float | int) and \
            isinstance(getattr(p, "budget_node_s", None), float | int) else None  # type: ignore[return-value]

    def live_settings(self) -> LiveSettings:
        """The cap and the dial as the next decision will have them (a change asked for and
        not applied yet included)."""
        if self._pending is not None:
            return self._pending
        holder = self._dial_holder()
        deadline = float(getattr(holder, "deadline_s", 0.0)) or None
        budget = float(getattr(holder, "budget_node_s", 0.0)) or None
        return LiveSettings(self.config.max_workers, deadline_s=deadline, budget_node_s=budget)

    def change(self, new: LiveSettings, source: str) -> list[SettingChange]:
        """Ask for ``new`` settings, applied at the next step, which then decides at once
        (a raised cap may buy now, a lowered one drain idle workers above it). Returns what
        changes (nothing: already so). Raises :class:`~hta.live.Refused` (one line) for
        what this run cannot do: a cap below ``min_workers``, a dial for a policy that
        takes none, a deadline and a budget at once."""
        if new.max_workers < max(1, self.config.min_workers):
            raise Refused(f"a cap of {new.max_workers} workers is below the run's --min-workers "
                          f"{self.config.min_workers}: give at least {max(1, self.config.min_workers)}")
        if new.deadline_s is not None and new.budget_node_s is not None:
            raise Refused("a deadline and a budget at once: the dial takes one (give --deadline or --budget)")
        if (new.deadline_s is not None or new.budget_node_s is not None) and self._dial_holder() is None:
            what = "deadline" if new.deadline_s is not None else "budget"
            raise Refused(f"the run's policy ({self.policy.name}) takes no {what}: the time–cost dial needs HTA's "
                          f"policy (hta, hta-time or hta-cost), chosen when the run starts")
        current = self.live_settings()
        if new.deadline_s is not None and new.deadline_s != current.deadline_s and new.deadline_s <= self.now():
            raise Refused(f"a deadline {new.deadline_s:.0f} s into the run has passed (the run is "
                          f"{self.now():.0f} s in): give a later one")
        changes = changes_between(current, new, source)
        if changes:
            self._pending_changes = merged(self._pending_changes, changes)
            self._pending = new
        return changes

    def _apply_changes(self) -> None:
        """Put the settings asked for in force: the cap where the observation is built, the
        dial on the policy (which plans again at once). Said when the decision is written."""
        new, changes = self._pending, self._pending_changes
        if new is None:
            return
        self._pending, self._pending_changes = None, []
        if new.max_workers != self.config.max_workers:
            self._cap_lowered = self._cap_lowered or new.max_workers < self.config.max_workers
            self.config = dataclasses.replace(self.config, max_workers=new.max_workers)
            self.builder.max_workers = new.max_workers
        holder = self._dial_holder()
        if holder is not None:
            holder.deadline_s = new.deadline_s or 0.0  # type: ignore[attr-defined]
            holder.budget_node_s = new.budget_node_s or 0.0  # type: ignore[attr-defined]
            if new.deadline_s is None and new.budget_node_s is None:
                self.plan = None  # (no dial: no plan to show)
        t = self.now()
        for c in changes:
            log.info("%s", c.words())
            self.changes.append((t, c))
        self._unwritten = merged(self._unwritten, changes)

    def _over_cap(self, obs: Observation, decision: ScaleDecision) -> list[str]:
        """Idle workers to drain because a change lowered the cap below the pool: the newest
        first, until what stays fits under it. Busy ones finish their tasks and are drained
        once idle, at a later decision. (Only after a lowered cap: otherwise a policy's pool
        is its own business.)"""
        if not self._cap_lowered:
            return []
        whole = obs.worker_shape
        leaving = obs.leaving() | set(decision.drain) | set(decision.remove)
        staying = [w for w in obs.workers if w.id not in leaving]
        excess = (sum(w.capacity.share_of(whole) for w in staying) + sum(p.shape.share_of(whole) for p in obs.pending)
                  - obs.max_workers)
        out = []
        for w in sorted((w for w in staying if w.idle), key=lambda w: w.connected_at or 0.0, reverse=True):
            if excess <= 1e-6:
                break
            out.append(w.id)
            excess -= w.capacity.share_of(whole)
        return out

    # -- observe -------------------------------------------------------------------
    def _record_workers(self, events: list[WorkerRecord]) -> None:
        for e in events:
            if e.event == "connected" and e.latency_s is not None:
                self.latency.add(e.latency_s, e.phases)
            self.worker_events.append(e)
            self.log.write(e)

    def _learn(self, snap: MasterSnapshot, now: float) -> None:
        for c in snap.queue.categories:
            self.learner.know(c.name)
            if c.max_cores or c.max_memory_mb or c.max_disk_mb:
                self.learner.declare(c.name, Resources(cores=c.max_cores or 0, memory_mb=c.max_memory_mb or 0,
                                                       disk_mb=c.max_disk_mb or 0))
        new = self.summaries.poll()
        if new:
            self.learner.add_all(new)
            self.log.write(CategoriesRecord(t=round(now, 3), categories=self.learner.models()))

    async def observe(self) -> tuple[MasterSnapshot, Observation]:
        snap = await self.master.snapshot(self.clock())
        self.last_snapshot = snap
        now = snap.taken_at - self.epoch
        self._learn(snap, now)
        self._record_workers(await self.backend.refresh(snap, now))
        pending = self.backend.pending()
        waiting = max((now - p.requested_at for p in pending), default=0.0)
        obs = self.builder.build(
            snap, categories=self.learner.models(with_prior=True), worker_ids=self.backend.worker_ids(),
            pending=pending, latency=self.latency.frozen(waiting), upcoming=self.upcoming,
            cpu_utilization=await self.backend.cpu_utilization() if self.reads_cpu else None,
            retired=self.backend.retired(), node_hold_s=self.backend.node_hold_s(),
            worker_nodes=self.backend.worker_nodes(),
        )
        ceiling = self.backend.job_ceiling()
        if ceiling is not None:  # (workers under a time limit: the policy sizes their jobs, replaces them ahead)
            obs = obs.model_copy(update={"worker_ends": self.backend.worker_ends(), "job_ceiling_s": ceiling[0]})
        self.last_observation = obs
        self._record_observation(obs)
        self._tell_world(obs)
        return snap, obs

    def _tell_world(self, obs: Observation) -> None:
        """Say once what the world HTA learned is: how long the cluster keeps an empty node
        (again if that moves by half), and the master's link once it is measured."""
        hold, told = obs.node_hold_s, self._told_hold
        if hold is not None and (told is None or abs(hold - told) > 0.5 * max(told, 1.0)):
            self._told_hold = hold
            back = "waits for a new node" if hold < obs.latency.estimate() else "lands on its node in seconds"
            world_log.info("the cluster keeps an empty node %.0f s after its last worker left (seen as nodes "
                           "went): a drained worker bought back %s", hold, back)
        if obs.link.learned and not self._told_link:
            self._told_link = True
            world_log.info("the master's link: %.0f MB/s (%.0f MB moved in %.1f s of transfers)",
                           obs.link.mb_per_s, obs.link.mb, obs.link.busy_s)

    def _record_observation(self, obs: Observation, force: bool = False) -> None:
        """Log the curve the report integrates; a sample equal to the last one adds nothing
        to a step function, so it is not written again."""
        in_use = obs.in_use_cores()
        sample = CoreSample(obs.time, obs.supply_cores(), in_use, in_use + obs.waiting_cores(), obs.idle_cores())
        state = (sample.supply, sample.in_use, sample.demand, sample.idle, obs.waiting_count, len(obs.running),
                 len(obs.workers), len(obs.pending), obs.tasks_done, obs.tasks_failed)
        if state == self._last_record and not force:
            return
        self._last_record = state
        self.samples.append(sample)
        self.log.write(ObservationRecord(
            t=round(obs.time, 3), supply_cores=sample.supply, in_use_cores=sample.in_use,
            demand_cores=sample.demand, idle_cores=sample.idle, waiting=obs.waiting_count,
            running=len(obs.running), workers=len(obs.workers), pending=len(obs.pending),
            tasks_done=obs.tasks_done, tasks_failed=obs.tasks_failed,
        ))

    # -- decide and act ------------------------------------------------------------
    async def step(self) -> Observation:
        """Observe, and decide when a decision is due, or at once after a change of the
        settings (:meth:`change`)."""
        self._apply_changes()
        snap, obs = await self.observe()
        self.backend.expect_tasks({c: m.runtime_quantile(1.0) or 0.0 for c, m in obs.categories.items()
                                   if m.measured})
        if obs.time >= self.next_decision_at or self._unwritten:
            await self.act(self.policy.decide(obs), obs, snap, obs.time)
        return obs

    def clamp(self, decision: ScaleDecision, obs: Observation) -> tuple[int, float]:
        """Workers to add (never past ``max_workers``) and seconds to the next decision
        (within [``min_interval_s``, ``max_interval_s``])."""
        wait = min(max(decision.next_decision_s, self.config.min_interval_s), self.config.max_interval_s)
        # the observation carries the configured shape and max_workers (the builder's)
        add = max(0, min(decision.add, obs.room_for(decision.shape or self.config.worker_shape)))
        return add, wait

    async def act(self, decision: ScaleDecision, obs: Observation, snap: MasterSnapshot, now: float) -> None:
        said = [c.words() for c in self._unwritten]  # (a change of the settings: said first)
        self._unwritten = []
        over = self._over_cap(obs, decision)
        if over:
            said.append(f"drain {len(over)} idle worker{'s' if len(over) != 1 else ''} above the cap of "
                        f"{obs.max_workers}")
            decision = decision.model_copy(update={"drain": [*decision.drain, *over]})
        if said:
            decision = decision.model_copy(update={"reason": "; ".join([*said, decision.reason])})
        add, wait = self.clamp(decision, obs)
        self.next_decision_at = now + wait
        wanted = decision.add if decision.wanted is None else max(decision.wanted, decision.add)
        held_back = max(0, wanted - add)
        held_by = f"--max-workers {obs.max_workers}" if held_back else None
        asked = []
        if add:
            if obs.job_ceiling_s is not None:  # (a backend whose jobs have a time limit)
                self.backend.ask_job_time(decision.job_time_s)
            asked = await self.backend.request(add, decision.shape or self.config.worker_shape, now)
            if len(asked) < add:  # the backend gave fewer: a quota, pods that cannot be scheduled
                held_back += add - len(asked)
                held_by = self.backend.holding_back() or f"the {self.backend.name} backend"
        record = DecisionRecord(
            t=round(now, 3), add=len(asked), drain=decision.drain, remove=decision.remove,
            target=decision.target_workers, latency_s=round(obs.latency.estimate(), 3),
            next_decision_s=round(wait, 3), reason=decision.reason, held_back=held_back, held_by=held_by,
            waiting=obs.waiting_count, plan=decision.plan,
        )
        if decision.plan is not None:
            self.plan = decision.plan
            if decision.plan.note:  # (an ask the forecast cannot keep: said once, as it first shows)
                dial_log.warning("%s", decision.plan.note)
        self.decisions.append(record)
        self.log.write(record)
        log.info("t=%.1f add=%d drain=%s remove=%s: %s", now, len(asked), decision.drain, decision.remove,
                 decision.reason)
        if add:
            self._record_workers(await self.backend.refresh(snap, now))
        if decision.drain:
            self._record_workers(await self.backend.drain(decision.drain, snap, now))
        if decision.remove:
            self._record_workers(await self.backend.remove(decision.remove, snap, now))

    # -- production's loop -----------------------------------------------------------
    async def run(self, finished: asyncio.Event) -> None:
        """Step every ``poll_interval_s`` until ``finished`` is set (makeflow exited).

        An error of any dependency (master unreachable, an API error of the backend, a
        log that cannot be written) does not end the loop: it is logged when it starts,
        when its message changes, and every minute while it lasts, and the next step
        tries again."""
        failures = 0
        while not finished.is_set():
            failed: Exception | None = None
            try:
                await self.step()
                if failures:
                    log.warning("recovered after %d failed steps", failures)
                failures, self.last_error = 0, None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — a controller outlives its dependencies' errors
                failures += 1
                self.step_failures += 1
                failed = exc
            try:
                await asyncio.wait_for(finished.wait(), self.config.poll_interval_s)
            except TimeoutError:
                pass
            if failed is not None and not finished.is_set():
                # (said once the run goes on: a master gone because makeflow ended is no error)
                message = f"{type(failed).__name__}: {failed}" if str(failed) else type(failed).__name__
                if message != self.last_error or failures % 60 == 0:
                    log.warning("step failed (%s); retrying every %gs", message, self.config.poll_interval_s)
                    log.debug("step failure", exc_info=failed)
                self.last_error = message
