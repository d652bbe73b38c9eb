"""Node·s as the cluster bills them, read from its own objects, whichever autoscaler made
the nodes: the measure every real run on the test cluster is judged by.

A cloud bills a node from its launch to its termination. Karpenter launches an instance
when it creates a NodeClaim and terminates it when the claim goes; the Node object
registers only after the instance booted (the KWOKNodeClass's registration delay). The
node-provisioner stand-in decides a node at once and creates it after its delay, and says
when it decided (annotation :data:`LAUNCHED_AT`). So a node is paid from its launch (its
claim's creation, the stand-in's annotation, else its creation) until it, or its claim,
went. A run's policy never reads this: HTA counts what its own records show
(:mod:`hta.summary`), and the harness compares both.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kubernetes import client, config

from k8s.watch import list_and_watch

#: the stand-in's annotation: when it decided the node (Unix seconds)
LAUNCHED_AT = "hta.io/launched-at"
#: how often the NodeClaims are listed (their times are read to this much)
CLAIMS_EVERY_S = 0.5


@dataclass
class NodeLife:
    name: str
    launched: float
    deleted: float | None = None


def _unix(ts) -> float:
    return ts.timestamp() if hasattr(ts, "timestamp") else time.time()


class NodeLedger:
    """Watches the nodes (and Karpenter's NodeClaims, where its CRD is installed) from
    :meth:`start` until :meth:`stop`."""

    def __init__(self, kubeconfig: str | None):
        """``kubeconfig`` None: no cluster (the accounting alone, fed by hand)."""
        if kubeconfig is not None:
            cfg = client.Configuration()
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
            api = client.ApiClient(cfg)
            self.core = client.CoreV1Api(api)
            self.custom = client.CustomObjectsApi(api)
        self.lives: dict[str, NodeLife] = {}  # by uid
        #: NodeClaim name → (created, node name or "", deleted)
        self.claims: dict[str, list] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> NodeLedger:
        self.threads = [threading.Thread(target=self._watch_nodes, daemon=True),
                        threading.Thread(target=self._poll_claims, daemon=True)]
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(5)

    def _node(self, kind: str, node: client.V1Node) -> None:
        uid, meta = node.metadata.uid, node.metadata
        with self.lock:
            if uid not in self.lives:
                said = (meta.annotations or {}).get(LAUNCHED_AT)
                self.lives[uid] = NodeLife(meta.name, float(said) if said else _unix(meta.creation_timestamp))
            if kind == "DELETED" and self.lives[uid].deleted is None:
                self.lives[uid].deleted = time.time()

    def _watch_nodes(self) -> None:
        list_and_watch(self.core.list_node, selector="", on_sync=lambda ns: [self._node("ADDED", n) for n in ns],
                       on_event=self._node, stop=self.stop_event)

    def _poll_claims(self) -> None:
        while not self.stop_event.is_set():
            try:
                items = self.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
            except client.exceptions.ApiException as exc:
                if exc.status == 404:  # no Karpenter in this cluster
                    return
                items = None
            if items is not None:
                now, seen = time.time(), set()
                with self.lock:
                    for c in items:
                        name = c["metadata"]["name"]
                        seen.add(name)
                        created = _parse(c["metadata"]["creationTimestamp"])
                        entry = self.claims.setdefault(name, [created, "", None])
                        entry[1] = (c.get("status") or {}).get("nodeName") or entry[1]
                    for name, entry in self.claims.items():
                        if name not in seen and entry[2] is None:
                            entry[2] = now
            self.stop_event.wait(CLAIMS_EVERY_S)

    def settled(self) -> bool:
        """Every node and every NodeClaim seen has gone: what each was paid is final. A
        claim outlives its node by seconds (Karpenter deletes the instance once the node is
        gone, and looks again 5 s later before it lets the claim go); a claim still there
        when the ledger stops is paid to the end given to :meth:`paid`."""
        with self.lock:
            return (all(life.deleted is not None for life in self.lives.values())
                    and all(entry[2] is not None for entry in self.claims.values()))

    def paid(self, until: float) -> list[tuple[str, float, float]]:
        """Each node's (name, paid from, paid until), a node still there paid to ``until``."""
        with self.lock:
            claims = {e[1]: e for e in self.claims.values() if e[1]}
            out = []
            for life in self.lives.values():
                start, end = life.launched, life.deleted or until
                claim = claims.get(life.name)
                if claim is not None:
                    start = min(start, claim[0])
                    end = max(end, claim[2] or until)
                out.append((life.name, start, min(end, until)))
            named = {life.name for life in self.lives.values()}
            # a claim whose node never registered (consolidated or failed first) is paid too
            for e in self.claims.values():
                if e[1] not in named:
                    out.append((e[1] or "(never registered)", e[0], min(e[2] or until, until)))
        return out

    def node_seconds(self, since: float, until: float) -> float:
        """Node·s paid within [``since``, ``until``] (Unix seconds)."""
        return sum(max(0.0, min(b, until) - max(a, since)) for _, a, b in self.paid(until))


def _parse(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
