"""The control loop: observe → decide → act.

Every ``poll_interval_s`` the controller reads the master, the monitor
summaries and the backend, builds an :class:`~hta.model.Observation` and logs
it (the supply/in-use/demand curve the report draws). When the policy's last
``next_decision_s`` has passed — for HTA one preparation latency, bounded by
``min_interval_s`` and ``max_interval_s`` — it asks the policy and carries the
decision out through the backend. Blocking work (psutil, file reads) is small
and stays on the loop; the master is read with aiohttp.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

import aiohttp

from hta.accounting import CoreSample
from hta.backends.base import WorkerBackend
from hta.model import LatencyStats, Observation, Resources, ScaleDecision
from hta.policies.base import Policy
from hta.scaling_log import CategoriesRecord, DecisionRecord, ObservationRecord, ScalingLogWriter, WorkerRecord
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.monitor_summaries import SummaryDirectory
from workqueue_bridge.observation import UpcomingSource, build_observation
from workqueue_bridge.status import MasterSnapshot, MasterStatusClient

log = logging.getLogger("hta.controller")


@dataclass
class ControllerConfig:
    worker_shape: Resources
    min_workers: int = 0
    max_workers: int = 4
    poll_interval_s: float = 1.0
    min_interval_s: float = 2.0
    max_interval_s: float = 300.0
    latency_prior_s: float = 30.0


class Controller:
    def __init__(
        self,
        *,
        master: MasterStatusClient,
        backend: WorkerBackend,
        policy: Policy,
        learner: CategoryLearner,
        summaries: SummaryDirectory,
        scaling_log: ScalingLogWriter,
        config: ControllerConfig,
        epoch: float,
        upcoming: UpcomingSource | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.master = master
        self.backend = backend
        self.policy = policy
        self.learner = learner
        self.summaries = summaries
        self.log = scaling_log
        self.config = config
        self.epoch = epoch
        self.upcoming = upcoming
        self.clock = clock
        self.latency = LatencyStats(prior_s=config.latency_prior_s)
        self.next_decision_at = 0.0
        self.samples: list[CoreSample] = []
        self.worker_events: list[WorkerRecord] = []
        self.decisions: list[DecisionRecord] = []
        self.last_snapshot: MasterSnapshot | None = None
        self.last_observation: Observation | None = None

    def now(self) -> float:
        return self.clock() - self.epoch

    def _record_workers(self, events: list[WorkerRecord]) -> None:
        for e in events:
            if e.event == "connected" and e.latency_s is not None:
                self.latency.samples.append(e.latency_s)
            self.worker_events.append(e)
            self.log.write(e)

    async def step(self) -> Observation:
        snap = await self.master.snapshot(self.clock())
        self.last_snapshot = snap
        now = snap.taken_at - self.epoch

        for c in snap.queue.categories:
            if c.max_cores or c.max_memory_mb or c.max_disk_mb:
                self.learner.declare(c.name, Resources(cores=c.max_cores or 0, memory_mb=c.max_memory_mb or 0,
                                                       disk_mb=c.max_disk_mb or 0))
        new = self.summaries.poll()
        if new:
            self.learner.add_all(new)
            self.log.write(CategoriesRecord(t=round(now, 3), categories=self.learner.models()))

        self._record_workers(await self.backend.refresh(snap, now))
        obs = build_observation(
            snap,
            epoch=self.epoch,
            worker_shape=self.config.worker_shape,
            categories=self.learner.models(),
            worker_ids=self.backend.worker_ids(),
            pending=self.backend.pending(),
            latency=self.latency.model_copy(deep=True),
            min_workers=self.config.min_workers,
            max_workers=self.config.max_workers,
            upcoming=self.upcoming,
            retired=self.backend.retired(),
        )
        self.last_observation = obs
        sample = CoreSample(now, obs.supply_cores(), obs.in_use_cores(), obs.in_use_cores() + obs.waiting_cores(),
                            obs.idle_cores())
        self.samples.append(sample)
        self.log.write(ObservationRecord(
            t=round(now, 3), supply_cores=sample.supply, in_use_cores=sample.in_use, demand_cores=sample.demand,
            idle_cores=sample.idle,
            waiting=obs.waiting_count, running=len(obs.running), workers=len(obs.workers),
            pending=len(obs.pending), tasks_done=obs.tasks_done, tasks_failed=obs.tasks_failed,
        ))

        if now >= self.next_decision_at:
            decision = self.policy.decide(obs)
            await self.act(decision, obs, snap, now)
        return obs

    async def act(self, decision: ScaleDecision, obs: Observation, snap: MasterSnapshot, now: float) -> None:
        wait = min(max(decision.next_decision_s, self.config.min_interval_s), self.config.max_interval_s)
        self.next_decision_at = now + wait
        have = len(obs.workers) + len(obs.pending)
        add = max(0, min(decision.add, self.config.max_workers - have))
        record = DecisionRecord(
            t=round(now, 3), add=add, drain=decision.drain, remove=decision.remove,
            target=decision.target_workers, latency_s=round(self.latency.estimate(), 3),
            next_decision_s=round(wait, 3), reason=decision.reason,
        )
        self.decisions.append(record)
        self.log.write(record)
        if add:
            await self.backend.request(add, decision.shape or self.config.worker_shape, now)
            self._record_workers(await self.backend.refresh(snap, now))
        if decision.drain:
            self._record_workers(await self.backend.drain(decision.drain, snap, now))
        if decision.remove:
            self._record_workers(await self.backend.remove(decision.remove, snap, now))

    async def run(self, finished: asyncio.Event) -> None:
        """Loop until ``finished`` is set (makeflow exited)."""
        failures = 0
        while not finished.is_set():
            try:
                await self.step()
                failures = 0
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                failures += 1
                if failures in (1, 10) or failures % 60 == 0:
                    log.warning("cannot read the master (%s); retrying", exc)
            try:
                await asyncio.wait_for(finished.wait(), self.config.poll_interval_s)
            except asyncio.TimeoutError:
                pass
