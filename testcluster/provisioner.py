"""The node-provisioner stand-in: a light stand-in for a node autoscaler (the
cluster-autoscaler's scale-up and empty-node removal), the default of the test
cluster's fast tests. Real Karpenter runs instead with ``cluster up
--node-autoscaler karpenter`` (:mod:`testcluster.karpenter`). Test cluster only.

Like the cluster-autoscaler it watches for pods the scheduler marked
unschedulable, adds nodes for them (kwok fake nodes of a configured size)
after a provisioning delay drawn uniformly from ``delay ± jitter`` (the
thesis measured 157 s on GKE; tests scale it down), never exceeds
``max_nodes``, and removes nodes it added once they have held no pod for
``empty_ttl`` seconds. It counts nodes still being provisioned as capacity,
so it does not buy twice for the same pods.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import threading
import time
from dataclasses import dataclass

from kubernetes import client, config

from testcluster.node_ledger import LAUNCHED_AT

log = logging.getLogger("node-provisioner-stand-in")
LABEL = "hta.io/provisioned-by"
VALUE = "node-provisioner-stand-in"


def cpu_of(q: str | None) -> float:
    if not q:
        return 0.0
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def mem_mib(q: str | None) -> float:
    if not q:
        return 0.0
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2, "K": 1e3 / 2**20, "M": 1e6 / 2**20,
             "G": 1e9 / 2**20}
    for u, f in units.items():
        if q.endswith(u):
            return float(q[: -len(u)]) * f
    return float(q) / 2**20


@dataclass
class Config:
    node_cores: int
    node_memory: int
    max_nodes: int
    start_nodes: int
    delay: float
    jitter: float
    empty_ttl: float


class Provisioner:
    def __init__(self, cfg: Config, api: client.CoreV1Api):
        self.cfg = cfg
        self.api = api
        self.rng = random.Random()
        self.provisioning = 0
        self.lock = threading.Lock()
        self.adding = threading.Lock()  # (apart from ``lock``: a step is not held up by API calls)
        self.seq = 0
        self.empty_since: dict[str, float] = {}
        self.stop = threading.Event()
        self.told: set[str] = set()

    def node_body(self, name: str, launched: float | None = None) -> client.V1Node:
        """A kwok node; ``launched``: when it was decided, as a cloud starts billing
        (:data:`testcluster.node_ledger.LAUNCHED_AT`)."""
        cap = {"cpu": str(self.cfg.node_cores), "memory": f"{self.cfg.node_memory}Mi", "pods": "110"}
        said = {LAUNCHED_AT: f"{launched:.3f}"} if launched is not None else {}
        return client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={"type": "kwok", LABEL: VALUE,
                                                            "kubernetes.io/hostname": name},
                                         annotations={"kwok.x-k8s.io/node": "fake", **said}),
            spec=client.V1NodeSpec(),
            status=client.V1NodeStatus(allocatable=cap, capacity=cap),
        )

    def add_node(self, launched: float | None = None) -> None:
        with self.adding:  # one at a time: nodes due at the same moment must not both see room
            if len(self.our_nodes()) >= self.cfg.max_nodes:  # never more than max_nodes, whatever raced
                log.info("no node added: %d already", self.cfg.max_nodes)
                return
            with self.lock:
                self.seq += 1
                name = f"kwok-node-{int(time.time())}-{self.seq}"
            self.api.create_node(self.node_body(name, launched))
        log.info("added node %s", name)

    def _provision_later(self, delay: float, launched: float) -> None:
        def run() -> None:
            if not self.stop.wait(delay):
                try:
                    self.add_node(launched)
                except Exception as exc:  # noqa: BLE001 — keep going: the next loop retries
                    log.warning("could not add a node: %s", exc)
            with self.lock:
                self.provisioning -= 1

        threading.Thread(target=run, daemon=True).start()

    def our_nodes(self) -> list[client.V1Node]:
        return self.api.list_node(label_selector=f"{LABEL}={VALUE}").items

    @staticmethod
    def _requests(p: client.V1Pod) -> tuple[float, float]:
        cpu = mem = 0.0
        for c in p.spec.containers:
            req = (c.resources.requests or {}) if c.resources else {}
            cpu += cpu_of(req.get("cpu"))
            mem += mem_mib(req.get("memory"))
        return cpu, mem

    def step(self) -> None:
        # nodes on their way, counted before the nodes are listed: one that lands after the
        # listing is then counted once, as coming (read after it, it was in neither, and a
        # loaded machine bought 7 nodes with at most 5)
        with self.lock:
            coming = self.provisioning
        pods = self.api.list_pod_for_all_namespaces().items
        nodes = self.our_nodes()
        unschedulable = []
        busy_nodes: set[str] = set()
        free = {n.metadata.name: [cpu_of(n.status.allocatable.get("cpu")), mem_mib(n.status.allocatable.get("memory"))]
                for n in nodes if n.status and n.status.allocatable}
        for p in pods:
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
                busy_nodes.add(p.spec.node_name)
                if p.spec.node_name in free:
                    c, m = self._requests(p)
                    free[p.spec.node_name][0] -= c
                    free[p.spec.node_name][1] -= m
            if p.spec.node_name or p.metadata.deletion_timestamp:
                continue
            for c in p.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    unschedulable.append(p)
        if unschedulable:
            # like the cluster-autoscaler's simulation: pods that fit the free room of existing
            # nodes (e.g. one added a moment ago) need no new node; the rest are packed
            rest = []
            for p in unschedulable:
                c, m = self._requests(p)
                slot = next((n for n, (fc, fm) in free.items() if fc >= c - 1e-9 and fm >= m - 1e-9), None)
                if slot is None:
                    rest.append((c, m, p))
                else:
                    free[slot][0] -= c
                    free[slot][1] -= m
            # like the cluster-autoscaler: a pod that no new node could hold triggers no scale-up
            fits = [(c, m, p) for c, m, p in rest
                    if c <= self.cfg.node_cores + 1e-9 and m <= self.cfg.node_memory + 1e-9]
            for c, m, p in rest:
                if (c, m, p) not in fits and p.metadata.uid not in self.told:
                    self.told.add(p.metadata.uid)
                    log.info("pod %s didn't trigger scale-up: it asks for %g cores, %g MiB; a node has %d, %d",
                             p.metadata.name, c, m, self.cfg.node_cores, self.cfg.node_memory)
            rest = fits
            need, room = 0, [0.0, 0.0]
            for c, m, _ in rest:
                if room[0] < c - 1e-9 or room[1] < m - 1e-9:
                    need += 1
                    room = [float(self.cfg.node_cores), float(self.cfg.node_memory)]
                room[0] -= c
                room[1] -= m
            new = max(0, min(need - coming, self.cfg.max_nodes - len(nodes) - coming))
            with self.lock:
                self.provisioning += new
            if new:
                # the delay runs from the request of the newest pod needing a node (the
                # cluster-autoscaler's reaction included); older pods wait for nodes already coming
                asked = max((p.metadata.creation_timestamp.timestamp() for _, _, p in rest
                             if p.metadata.creation_timestamp), default=time.time())
                for _ in range(new):
                    d = max(0.0, self.cfg.delay + self.rng.uniform(-self.cfg.jitter, self.cfg.jitter))
                    wait = max(0.0, asked + d - time.time())
                    log.info("%d unschedulable pods: a node in %.1fs", len(rest), wait)
                    self._provision_later(wait, asked)
        now = time.time()
        for n in nodes:
            name = n.metadata.name
            if name in busy_nodes:
                self.empty_since.pop(name, None)
                continue
            since = self.empty_since.setdefault(name, now)
            if now - since >= self.cfg.empty_ttl and len(nodes) > self.cfg.start_nodes:
                try:
                    self.api.delete_node(name)
                    log.info("removed node %s (empty for %.0fs)", name, now - since)
                except client.exceptions.ApiException as exc:
                    if exc.status != 404:
                        raise
                self.empty_since.pop(name, None)
                nodes = [x for x in nodes if x.metadata.name != name]

    def run(self) -> None:
        for _ in range(self.cfg.start_nodes - len(self.our_nodes())):
            self.add_node()
        while not self.stop.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 — an API error: the next loop retries
                log.warning("step failed: %s", exc)
            self.stop.wait(0.3)

    def cleanup(self) -> None:
        """Remove every node this stand-in added (``cluster down`` and tests)."""
        for n in self.our_nodes():
            try:
                self.api.delete_node(n.metadata.name)
            except client.exceptions.ApiException:
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description="node-provisioner stand-in (for the cluster-autoscaler)")
    ap.add_argument("--node-cores", type=int, default=4)
    ap.add_argument("--node-memory", type=int, default=16384)
    ap.add_argument("--max-nodes", type=int, default=20)
    ap.add_argument("--start-nodes", type=int, default=0)
    ap.add_argument("--delay", type=float, default=157.0)
    ap.add_argument("--jitter", type=float, default=4.0)
    ap.add_argument("--empty-ttl", type=float, default=60.0)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config.load_kube_config()
    p = Provisioner(Config(a.node_cores, a.node_memory, a.max_nodes, a.start_nodes, a.delay, a.jitter,
                           a.empty_ttl), client.CoreV1Api())
    signal.signal(signal.SIGTERM, lambda *_: p.stop.set())
    p.run()
    p.cleanup()


if __name__ == "__main__":
    main()
