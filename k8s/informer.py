"""A pod informer (:func:`k8s.watch.list_and_watch`: list, watch from that
resourceVersion, relist on 410 Gone, reconnect with backoff). It keeps the run's pods and timestamps
each pod's life as seen here (sub-second, unlike the API's 1 s timestamps):
first seen unschedulable, scheduled on a node, running, gone. These are the
phases of the preparation latency L.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from kubernetes import client

from k8s.api import CallCounter
from k8s.watch import list_and_watch

log = logging.getLogger("hta.k8s.informer")


@dataclass
class PodState:
    name: str
    uid: str
    phase: str = "Pending"
    node: str | None = None
    created: float | None = None  # Unix time (API server, 1 s resolution)
    deleting: bool = False
    gone: bool = False
    unschedulable_at: float | None = None  # Unix times, as seen by this informer
    scheduled_at: float | None = None
    running_at: float | None = None
    gone_at: float | None = None
    seen: list[tuple[float, str]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.gone or self.phase in ("Succeeded", "Failed")


class PodInformer:
    def __init__(self, api: client.CoreV1Api, namespace: str, selector: str, counter: CallCounter | None = None):
        self.api = api
        self.namespace = namespace
        self.selector = selector
        self.counter = counter
        self.pods: dict[str, PodState] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.synced = threading.Event()
        self.relists = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-informer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def snapshot(self) -> dict[str, PodState]:
        with self.lock:
            return {k: PodState(**{f: getattr(v, f) for f in v.__dataclass_fields__}) for k, v in self.pods.items()}

    def _apply(self, kind: str, pod: client.V1Pod, now: float) -> None:
        name = pod.metadata.name
        with self.lock:
            st = self.pods.get(name)
            if st is None or st.uid != pod.metadata.uid:
                created = pod.metadata.creation_timestamp.timestamp() if pod.metadata.creation_timestamp else None
                st = self.pods[name] = PodState(name=name, uid=pod.metadata.uid, created=created)
            st.seen.append((now, kind))
            st.phase = pod.status.phase or st.phase
            st.deleting = pod.metadata.deletion_timestamp is not None
            if pod.spec.node_name and st.node is None:
                st.node = pod.spec.node_name
                st.scheduled_at = now
            for c in pod.status.conditions or []:
                if (c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                        and st.unschedulable_at is None):
                    st.unschedulable_at = now
            if st.phase == "Running" and st.running_at is None:
                st.running_at = now
            if kind == "DELETED":
                st.gone, st.gone_at = True, now

    def _sync(self, items: list) -> None:
        now = time.time()
        names = set()
        for p in items:
            self._apply("SYNC", p, now)
            names.add(p.metadata.name)
        with self.lock:  # pods deleted while we were not watching
            for name, st in self.pods.items():
                if name not in names and not st.gone:
                    st.gone, st.gone_at = True, now
        self.relists += 1
        self.synced.set()

    def _run(self) -> None:
        list_and_watch(self.api.list_namespaced_pod, self.namespace, selector=self.selector, on_sync=self._sync,
                       on_event=lambda kind, pod: self._apply(kind, pod, time.time()), stop=self.stop_event,
                       counter=self.counter)
