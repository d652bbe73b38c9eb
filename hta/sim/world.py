"""The simulator's ground truth: a simulated cluster, Work Queue master and Makeflow, played
by simpy.

The world knows each task's true runtime and resource use; nobody else does. The
production :class:`~hta.controller.Controller` reads it only through ``SimMaster`` (what
the master's status endpoints would answer), ``SimMonitor`` (the resource monitor's
summaries of completed tasks) and ``SimBackend`` (the cluster's answers about workers):
see :mod:`hta.sim.run`.

Its three roles, each a module with the rules of the real system it plays:

- :mod:`hta.sim.cluster`: nodes and worker pods (:class:`~hta.sim.cluster.SimCluster`);
- :mod:`hta.sim.work_queue`: the master's ready list, dispatch and task runs
  (:class:`~hta.sim.work_queue.SimWorkQueue`);
- :mod:`hta.sim.makeflow`: releases and the makeflow log
  (:class:`~hta.sim.makeflow.SimMakeflow`).

Every change of state succeeds the :attr:`World.changed` event, so whoever watches the
world (the controller's driver) can look at once.
"""

from __future__ import annotations

import random

import simpy

from hta.sim.cluster import ClusterModel, SimCluster
from hta.sim.makeflow import SimMakeflow
from hta.sim.work_queue import SimWorkQueue
from hta.sim.workload import Workload


class World:
    """Cluster, Work Queue and Makeflow, wired together; the policy loop is not here (it is
    the controller's)."""

    def __init__(self, workload: Workload, cluster: ClusterModel | None = None, seed: int = 0):
        self.workload = workload
        self.model = cluster or ClusterModel()
        self.rng = random.Random(seed)
        self.env = simpy.Environment()
        self.changed = self.env.event()
        tasks = workload.by_id()
        self.cluster = SimCluster(self.model, self.env, self.rng)
        self.queue = SimWorkQueue(tasks, workload.declared, self.model, self.env, self.cluster)
        self.makeflow = SimMakeflow(workload, tasks, self.env, self.queue)
        for role in (self.cluster, self.queue):
            role.on_change = self._changed
        self.cluster.dispatch = self.queue.dispatch
        self.cluster.evict = self.queue.evict
        self.queue.on_done = self.makeflow.complete

    def _changed(self) -> None:
        if not self.changed.triggered:
            self.changed.succeed()

    def rearm(self) -> simpy.Event:
        """A fresh :attr:`changed` event (after the watcher has looked)."""
        if self.changed.triggered:
            self.changed = self.env.event()
        return self.changed

    def start(self) -> None:
        """Makeflow's first submissions."""
        self.makeflow.start()

    @property
    def finished(self) -> simpy.Event:
        return self.makeflow.finished

    @property
    def finished_at(self) -> float | None:
        return self.makeflow.finished_at
