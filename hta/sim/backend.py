"""The simulated cluster behind production's :class:`~hta.backends.base.WorkerBackend`.

It does what the local and Kubernetes backends do — asks for workers,
reports each one's life (requested → connected → drained/removed/stopped;
"drained" too for a worker that ran to completion and left by itself)
with the preparation latency it measured, drains only workers the master
shows idle — against the simulated world's nodes. Its CPU utilisation is the
nodes' true busy fraction, as a metrics API would read it.
"""

from __future__ import annotations

from hta.backends.base import CPU_UTILIZATION, WorkerBackend
from hta.model import PendingWorker, Resources
from hta.scaling_log import NodeRecord, WorkerRecord
from hta.sim.cluster import SimNode
from hta.sim.world import World
from workqueue_bridge.snapshot import MasterSnapshot


class SimBackend(WorkerBackend):
    name = "simulated"
    signals = frozenset({CPU_UTILIZATION})

    def __init__(self, world: World):
        self.world = world
        self._events: list[WorkerRecord] = []
        #: nodes whose "connected" was reported (their latency measured)
        self._reported: set[str] = set()
        #: nodes there at t = 0: connected from the start, no latency to measure
        self._initial: set[str] = set()

    def start_nodes(self, n: int, workers: int | None = None) -> None:
        """The starting cluster: ``n`` nodes, ``workers`` of them (default all) with a worker
        connected at t = 0; the others empty."""
        workers = n if workers is None else min(workers, n)
        self.world.cluster.add_empty_nodes(n - workers)
        for _ in range(workers):
            node = self.world.cluster.request_node(0.0, provision=False)
            self._initial.add(node.id)
            self._record(node, "requested", 0.0)

    def _record(self, node: SimNode, event: str, t: float, **extra) -> None:
        # as the k8s backend records them: a connected worker's advertised cores, else the pod's
        cores = node.capacity.cores if event == "connected" else node.limits.cores
        self._events.append(WorkerRecord(t=round(t, 3), worker=node.id, event=event, cores=cores,
                                         node=self._shared_node(node), **extra))

    def _shared_node(self, node: SimNode) -> str | None:
        """The node a worker smaller than a node runs on (it may share it, and node-seconds
        are paid per node); "" while it waits for room on none; None for a node-sized
        worker, a node of its own."""
        if self.world.cluster.node_sized(node) and not self.world.model.keeps_empty_nodes:
            return None
        return f"h{node.host}" if node.host is not None else ""

    def nodes_held(self) -> list[NodeRecord]:
        """When each node that outlived its last worker went (or goes: one emptied before the
        run's end, or by it, is paid its whole hold, as every policy's is): what the nodes
        cost beyond their workers."""
        return [NodeRecord(t=round(t, 3), node=f"h{h}") for h, t in sorted(self.world.cluster.held_until.items())]

    def worker_nodes(self) -> dict[str, str]:
        c = self.world.cluster
        return {i: f"h{n.host}" for i in c.order if (n := c.nodes[i]).host is not None}

    def node_hold_s(self) -> float | None:
        return self.world.cluster.node_hold_s()

    def _flush(self) -> list[WorkerRecord]:
        out, self._events = self._events, []
        return out

    async def start(self, master_host: str, master_port: int) -> None:
        return None

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        ids = []
        for _ in range(n):
            node = self.world.cluster.request_node(now, shape=shape)
            self._record(node, "requested", now)
            ids.append(node.id)
        return ids

    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        new, self.world.cluster.newly_connected = self.world.cluster.newly_connected, []
        new.sort(key=lambda n: int(n.id[1:]))  # request order, as the nodes were asked for
        for node in new:
            if node.id in self._reported or node.gone:
                continue
            self._reported.add(node.id)
            assert node.connected_at is not None  # (newly connected)
            if node.id in self._initial:
                self._record(node, "connected", node.connected_at)
                continue
            lat = node.connected_at - node.requested_at
            room = (node.placed_at or node.requested_at) - node.requested_at  # waiting for room on a node
            phases = {"room": round(room, 3)} if room > 0 else {}
            if node.node_wait_s > 0:  # a node prepared for it (and its image pulled there)
                pull = self.world.model.pull_s
                phases.update(node=round(lat - pull - room, 3), pull=pull)
            else:  # bound to a node already there
                phases.update(node=round(room, 3), start=round(lat - room, 3))
            # as Kubernetes tells it: unschedulable until a node had room (being prepared, or
            # at the cap until a pod left one); 0 for a pod bound at once
            phases["unschedulable"] = round(room + node.node_wait_s, 3)
            self._record(node, "connected", node.connected_at, latency_s=round(lat, 3), phases=phases)
        # workers that ran to completion and left by themselves (a job's worker, idle)
        exited, self.world.cluster.exited = self.world.cluster.exited, []
        for node in exited:
            self._record(node, "drained", node.gone_at if node.gone_at is not None else now)
        return self._flush()

    def worker_ids(self) -> dict[str, str]:
        cluster = self.world.cluster
        return {cluster.nodes[i].address: i for i in cluster.order}

    def retired(self) -> set[str]:
        return self.world.cluster.retired_addresses

    def pending(self) -> list[PendingWorker]:
        now = self.world.env.now
        return [PendingWorker(id=n.id, requested_at=n.requested_at, shape=n.limits,
                              started_at=n.started_at if n.started_at is not None and n.started_at <= now else None)
                for n in self.world.cluster.pending_nodes.values()]

    async def cpu_utilization(self) -> dict[str, float] | None:
        cluster = self.world.cluster
        return {i: self.world.queue.cpu_busy(cluster.nodes[i]) for i in cluster.order}

    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.hostname for w in snap.workers if w.tasks_running > 0}
        for wid in ids:
            if wid in busy:
                continue
            if self.world.cluster.retire(wid, busy_ok=False) is not None:
                self._record(self.world.cluster.nodes[wid], "drained", now)
        return self._flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        for wid in ids:
            lost = self.world.cluster.retire(wid, busy_ok=True)
            if lost is not None:
                self._record(self.world.cluster.nodes[wid], "removed", now, tasks_lost=lost)
        return self._flush()

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        self.world.cluster.end_of_run(now)
        for node in self.world.cluster.nodes.values():
            if not node.gone:
                node.gone = True  # the run is over: no worker outlives it (its node its hold)
                self._record(node, "stopped", now)
        return self._flush()

    def live(self) -> int:
        """Nodes asked for and not gone (connected or on their way)."""
        return len(self.world.cluster.pending_nodes) + len(self.world.cluster.order)
