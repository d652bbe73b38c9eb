"""One simulated run: the production controller, driven by simpy.

:class:`Simulation` wires production's :class:`~hta.controller.Controller`
(and with it the policy, the observation builder, the category learner, the
latency measurement, decision clamping and the scaling log) to the simulated
world through :class:`~hta.sim.master.SimMaster`,
:class:`~hta.sim.backend.SimBackend`, :class:`~hta.sim.master.SimMonitor`,
:class:`~hta.sim.master.SimLookahead` and simpy's clock — as the
cluster-autoscaler's simulator calls the production scheduler's predicates.

The controller steps whenever the world changes (so the supply / in-use /
demand curve is exact, as if production polled infinitely fast) and whenever
its next decision is due. After the workflow ends, the cluster keeps running
until the policy has scaled it down to its starting size, for at most
``teardown_s``: waste and node time count through that teardown, runtime does
not.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from hta.controller import Controller, ControllerConfig
from hta.model import LINK_PRIOR_MB_PER_S
from hta.policies.base import Policy, as_policy
from hta.policies.dial import budget_spent
from hta.scaling_log import EndRecord, RunRecord, ScalingLogWriter
from hta.sim.backend import SimBackend
from hta.sim.cluster import ClusterModel
from hta.sim.master import SimLookahead, SimMaster, SimMonitor
from hta.sim.workload import Workload
from hta.sim.world import World
from hta.summary import RunSummary, end_run
from resource_monitor.incremental import IncrementalCategoryLearner

T = TypeVar("T")


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits for anything real (all its awaits on simulated
    objects return at once) to its end, outside any event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a simulated dependency awaited real I/O")


class Simulation:
    def __init__(self, workload: Workload, policy: Policy, cluster: ClusterModel | None = None, seed: int = 0,
                 log: ScalingLogWriter | None = None, runtime_prior: dict[str, float] | None = None,
                 latency_prior_s: float | None = None):
        """``runtime_prior``: an earlier run's mean runtime per category (``hta makeflow
        --runtime-prior``); ``latency_prior_s``: the latency the controller assumes until it
        measures one (``hta makeflow --latency-prior``; default: the world's mean, what a
        user who measured it would set; a replay gives the real run's)."""
        self.runtime_prior = dict(runtime_prior or {})
        self.latency_prior_s = latency_prior_s
        self.workload = workload
        self.policy = policy
        self.cluster = cluster or ClusterModel()
        self.seed = seed
        self.log = log or ScalingLogWriter()
        self.world = World(workload, self.cluster, seed)
        # workers that run to completion (KEDA's ScaledJob) leave by themselves in the world
        self.world.cluster.lifetime = as_policy(policy).worker_lifetime
        self.world.cluster.spread = not as_policy(policy).packs_pods
        self.backend = SimBackend(self.world)
        #: the run ended as a real one would, short of the workflow's end (a spent budget)
        self.gave_up = self.world.env.event()
        lookahead = SimLookahead(self.world)
        self.controller = Controller(
            master=SimMaster(self.world), backend=self.backend, policy=policy, learner=IncrementalCategoryLearner(),
            summaries=SimMonitor(self.world), scaling_log=self.log,
            config=self.config(lookahead.shared_input_sizes(), lookahead.task_input_sizes()), epoch=0.0,
            upcoming=lookahead,
            clock=lambda: self.world.env.now,
        )

    def config(self, shared_inputs: dict[str, dict[str, float]] | None = None,
               task_inputs_mb: dict[str, float] | None = None) -> ControllerConfig:
        c = self.cluster
        return ControllerConfig(worker_shape=c.node_shape, min_workers=0, max_workers=c.max_nodes,
                                min_interval_s=c.min_interval_s, max_interval_s=c.max_interval_s,
                                latency_prior_s=self.latency_prior_s or c.latency_mean_s,
                                auto_allocation=c.auto_allocation,
                                shared_inputs=shared_inputs or {}, task_inputs_mb=task_inputs_mb or {},
                                # (the world's link, as its latency: what a user who measured it would set)
                                link_prior_mb_per_s=c.transfer_mb_per_s or LINK_PRIOR_MB_PER_S,
                                runtime_prior=self.runtime_prior)

    def _tearing_down(self) -> bool:
        w = self.world
        assert w.finished_at is not None  # (asked only once the workflow has ended)
        return (w.env.now < w.finished_at + self.cluster.teardown_s
                and self.backend.live() > self.cluster.start_nodes)

    def _drive(self):
        """The controller's clock: step at every change of the world and when a decision is due."""
        env, world = self.world.env, self.world
        while True:
            changed = world.rearm()
            run_now(self.controller.step())
            if world.finished_at is not None and not self._tearing_down():
                return
            why = budget_spent(self.controller.plan, self.controller.last_observation)
            if why is not None:  # (as a real run ends: nothing would ever run what waits)
                self.gave_up.succeed(why)
                return
            due = max(self.controller.next_wake() - env.now, 0.0)
            if world.finished_at is None:
                yield env.timeout(due) | changed | world.finished
                if world.finished.triggered and self.controller.next_wake() > env.now:
                    # the workflow just ended: that is news the policy hears at once
                    self.controller.next_decision_at = env.now
            else:
                yield env.timeout(due) | changed

    def run(self, workload_name: str | None = None) -> RunSummary:
        env, world = self.world.env, self.world
        self.log.write(RunRecord(started_at=0.0, workload=workload_name or self.workload.name,
                                 policy=self.policy.name, backend="simulated", seed=self.seed, simulated=True,
                                 worker_shape=self.cluster.node_shape, max_workers=self.cluster.max_nodes))
        self.backend.start_nodes(self.cluster.start_nodes, self.cluster.start_workers)
        world.start()
        driver = env.process(self._drive())
        env.run(until=world.finished | self.gave_up | env.timeout(self.cluster.horizon_s))
        if world.finished_at is not None:
            env.run(until=driver | env.timeout(self.cluster.teardown_s))
        return self._end()

    def _end(self) -> RunSummary:
        world, end = self.world, self.world.env.now
        finished_at = world.finished_at
        complete = finished_at is not None
        stopped = run_now(self.backend.stop_all(end))  # (first: the nodes it empties are held)
        for record in self.backend.nodes_held():
            self.log.write(record)
        return end_run(self.log, t=end, stopped=stopped,
                       categories=self.controller.learner.models(), end=EndRecord(
                           t=round(end, 3), exit_code=0 if complete else 1,
                           runtime_s=round(finished_at if finished_at is not None else end, 3),
                           tasks_done=len(world.makeflow.done),
                           tasks_failed=0 if complete else len(world.queue.tasks) - len(world.makeflow.done),
                           tasks_retried=world.queue.retries, lost_work_core_s=round(world.queue.lost_work, 3)),
                       source=str(self.log.path) if self.log.path else None)
