"""How long the cluster keeps a node once the run's last worker on it left: the node
autoscaler's empty-node hold, read from the Node objects themselves.

The cluster-autoscaler keeps an unneeded node ``--scale-down-unneeded-time`` (10 min by
default); Karpenter's consolidation with ``consolidateAfter: 0s`` removes it at once. A
worker bought back within the hold lands on the node in seconds; after it, it waits for a
new node. A :class:`NodeWatch` (list and watch on nodes, :func:`k8s.watch.list_and_watch`)
notes when each node is deleted; :func:`node_holds` pairs that with when the run's last pod
on it went (the pod informer's times). Nodes are cluster-scoped: a service account that may
not list them leaves the hold unknown, said once.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time

from kubernetes import client

from k8s.api import CallCounter
from k8s.informer import PodState
from k8s.watch import list_and_watch

log = logging.getLogger("hta.k8s.nodes")
#: the holds read: the last this many nodes that went
KEPT = 10


class NodeWatch:
    """When each node was deleted, as seen here (Unix seconds)."""

    def __init__(self, api: client.CoreV1Api, counter: CallCounter | None = None):
        self.api = api
        self.counter = counter
        self.deleted_at: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start watching; False (and one warning) if the nodes cannot be listed."""
        try:
            self.api.list_node(limit=1, _request_timeout=(3.0, 10.0))
        except client.exceptions.ApiException as exc:
            log.warning("cannot list nodes (%s %s): HTA cannot see how long the cluster keeps an empty node; "
                        "grant list and watch on nodes (a ClusterRole) for it", exc.status, exc.reason or "")
            return False
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self.stop_event.set()

    def deleted(self) -> dict[str, float]:
        with self.lock:
            return dict(self.deleted_at)

    def _sync(self, items: list) -> None:
        names = {n.metadata.name for n in items if n.metadata}
        with self.lock:
            for name in list(self.deleted_at):
                if name in names:  # (a node of the same name again)
                    del self.deleted_at[name]

    def _event(self, kind: str, node: client.V1Node) -> None:
        name = node.metadata.name if node.metadata else None
        if kind == "DELETED" and name:
            with self.lock:
                self.deleted_at.setdefault(name, time.time())

    def _run(self) -> None:
        list_and_watch(self.api.list_node, selector="", on_sync=self._sync, on_event=self._event,
                       stop=self.stop_event, counter=self.counter)


def node_holds(pods: dict[str, PodState], deleted_at: dict[str, float]) -> list[float]:
    """For each deleted node the run's pods ran on, the seconds from its last such pod's end
    to the node's deletion, in deletion order (a node one of them still ran on when it went
    is left out: it was not empty)."""
    last_gone: dict[str, float] = {}
    still_on: set[str] = set()
    for st in pods.values():
        if st.node is None:
            continue
        if st.gone and st.gone_at is not None:
            last_gone[st.node] = max(last_gone.get(st.node, 0.0), st.gone_at)
        else:
            still_on.add(st.node)
    holds = [(at, at - last_gone[name]) for name, at in deleted_at.items()
             if name in last_gone and name not in still_on and at >= last_gone[name]]
    return [h for _, h in sorted(holds)]


def typical_hold(holds: list[float]) -> float | None:
    """The median of the last :data:`KEPT` holds; None before a node went."""
    return statistics.median(holds[-KEPT:]) if holds else None
