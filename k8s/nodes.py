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
from typing import Any

from kubernetes import client

from k8s.api import CallCounter
from k8s.informer import PodState
from k8s.watch import list_and_watch

log = logging.getLogger("hta.k8s.nodes")
#: the holds read: the last this many nodes that went
KEPT = 10


class NodeWatch:
    """The nodes that went, as seen here: (name, created, deleted), Unix seconds. A node's
    name may come back (a new node of the same name): each deletion is its own entry, and
    pods are paired with the node they ran on by its creation time."""

    def __init__(self, api: client.CoreV1Api, counter: CallCounter | None = None):
        self.api = api
        self.counter = counter
        self.went: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start watching; False (and one warning) if the nodes cannot be listed and watched."""
        try:
            self.api.list_node(limit=1, _request_timeout=(3.0, 10.0))
            # (a grant to list but not to watch would relist every node once a second, for ever)
            probe: Any = self.api.list_node(watch=True, timeout_seconds=1, _preload_content=False,
                                            _request_timeout=(3.0, 10.0))
            probe.release_conn()  # (the raw response: nothing read)
        except client.exceptions.ApiException as exc:
            log.warning("cannot list and watch nodes (%s %s): HTA cannot see how long the cluster keeps an empty "
                        "node; grant list and watch on nodes for it (k8s/manifests/examples/node-reader.yaml)",
                        exc.status, exc.reason or "")
            return False
        except Exception as exc:  # noqa: BLE001 — a timeout, a reset: the run goes on without it
            log.warning("cannot watch nodes (%s): HTA cannot see how long the cluster keeps an empty node",
                        type(exc).__name__)
            return False
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self.stop_event.set()

    def gone(self) -> list[tuple[str, float, float]]:
        with self.lock:
            return list(self.went)

    def _event(self, kind: str, node: client.V1Node) -> None:
        meta = node.metadata
        if kind == "DELETED" and meta is not None and meta.name:
            created = meta.creation_timestamp.timestamp() if meta.creation_timestamp else 0.0
            with self.lock:
                if not any(n == meta.name and c == created for n, c, _ in self.went):  # (seen again on a relist)
                    self.went.append((meta.name, created, time.time()))

    def _run(self) -> None:
        list_and_watch(self.api.list_node, selector="", on_sync=lambda items: None, on_event=self._event,
                       stop=self.stop_event, counter=self.counter)


def node_holds(pods: dict[str, PodState], went: list[tuple[str, float, float]]) -> list[float]:
    """For each node that went (name, created, deleted) after the run's pods ran on it, the
    seconds from its last such pod's end to its deletion, in deletion order. A node one of
    them was still on when it went was not empty: left out. A pod that ended without being
    deleted (Succeeded, Failed) holds no node, but tells no end time either."""
    holds = []
    for name, created, deleted in sorted(went, key=lambda w: w[2]):
        on = [st for st in pods.values() if st.node == name and (st.scheduled_at or st.created or 0.0) >= created - 1.0
              and (st.scheduled_at or st.created or 0.0) <= deleted]
        ended = [st.gone_at for st in on if st.gone and st.gone_at is not None and st.gone_at <= deleted]
        still = [st for st in on if not st.finished or (st.gone_at is not None and st.gone_at > deleted)]
        if ended and not still:
            holds.append(deleted - max(ended))
    return holds


def typical_hold(holds: list[float]) -> float | None:
    """The median of the last :data:`KEPT` holds; None before a node went."""
    return statistics.median(holds[-KEPT:]) if holds else None
