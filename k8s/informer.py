"""A pod informer (:func:`k8s.watch.list_and_watch`: list, watch from that
resourceVersion, relist at once after a 410 Gone or any watch failure). It keeps
the run's pods and timestamps each pod's life as seen here (sub-second, unlike the
API's 1 s timestamps): first seen unschedulable, scheduled on a node, running,
gone. These are the phases of the preparation latency L.

When the informer sees a transition late (it was not watching: an API server
outage, a relist, a restarted HTA), the time comes from the pod's own status
instead: the ``PodScheduled`` condition's ``lastTransitionTime`` and the
container's ``startedAt`` (1 s resolution), so no phase is lost or inflated.

It also keeps why a pod does not start: the scheduler's ``Unschedulable`` message,
the container's waiting reason (``ErrImagePull``, ``ImagePullBackOff``, ...) and
how a container that ended ended.
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
#: a transition seen more than this long after the pod's status says it happened was seen late
LATE_S = 2.0


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
    #: the scheduler's message while the pod is unschedulable (None once scheduled)
    unschedulable: str | None = None
    #: the container's waiting reason and message (e.g. ImagePullBackOff), None when not waiting
    waiting_reason: str | None = None
    waiting_message: str = ""
    #: how the container ended: "exit 1 (Error): message", "" if it has not
    terminated: str = ""
    #: what the pod asks for (cores, MiB)
    cpu: float = 0.0
    memory_mb: float = 0.0
    seen: list[tuple[float, str]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.gone or self.phase in ("Succeeded", "Failed")


def _cpu(q: str | None) -> float:
    if not q:
        return 0.0
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def _mib(q: str | None) -> float:
    if not q:
        return 0.0
    q = str(q)
    for u, f in {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 ** 2}.items():
        if q.endswith(u):
            return float(q[:-2]) * f
    return float(q) / 2 ** 20


def _ts(t) -> float | None:
    return t.timestamp() if t is not None else None


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

    @staticmethod
    def _when(now: float, api_time: float | None) -> float:
        """``now``, unless the pod's status says it happened clearly earlier (seen late)."""
        if api_time is not None and api_time < now - LATE_S:
            return api_time
        return now

    def _apply(self, kind: str, pod: client.V1Pod, now: float) -> None:
        meta, spec = pod.metadata or client.V1ObjectMeta(), pod.spec or client.V1PodSpec(containers=[])
        name, uid = str(meta.name), str(meta.uid)
        with self.lock:
            st = self.pods.get(name)
            if st is None or st.uid != uid:
                created = _ts(meta.creation_timestamp)
                st = self.pods[name] = PodState(name=name, uid=uid, created=created)
                for c in spec.containers or []:
                    req = (c.resources.requests or {}) if c.resources else {}
                    st.cpu += _cpu(req.get("cpu"))
                    st.memory_mb += _mib(req.get("memory"))
            st.seen.append((now, kind))
            status = pod.status or client.V1PodStatus()
            st.phase = status.phase or st.phase
            st.deleting = meta.deletion_timestamp is not None
            conditions = {c.type: c for c in status.conditions or []}
            sched = conditions.get("PodScheduled")
            if spec.node_name and st.node is None:
                st.node = spec.node_name
                api_t = _ts(sched.last_transition_time) if sched is not None and sched.status == "True" else None
                st.scheduled_at = self._when(now, api_t)
            if spec.node_name:
                st.unschedulable = None
            elif sched is not None and sched.status == "False" and sched.reason == "Unschedulable":
                st.unschedulable = sched.message or "unschedulable"
                if st.unschedulable_at is None:
                    st.unschedulable_at = self._when(now, _ts(sched.last_transition_time))
            st.waiting_reason, st.waiting_message = None, ""
            started: float | None = None
            for cs in (status.init_container_statuses or []) + (status.container_statuses or []):
                s = cs.state
                if s is None:
                    continue
                if s.waiting is not None and s.waiting.reason and s.waiting.reason != "ContainerCreating":
                    st.waiting_reason, st.waiting_message = s.waiting.reason, s.waiting.message or ""
                if s.running is not None and s.running.started_at is not None:
                    started = _ts(s.running.started_at)
                if s.terminated is not None:
                    t = s.terminated
                    st.terminated = (f"exit {t.exit_code}" + (f" ({t.reason})" if t.reason else "")
                                     + (f": {t.message.strip()}" if t.message and t.message.strip() else ""))
                    started = started or _ts(t.started_at)
            if st.phase in ("Running", "Succeeded", "Failed") and st.running_at is None and st.node is not None:
                st.running_at = self._when(now, started)
                if st.scheduled_at is not None and st.running_at < st.scheduled_at:
                    st.running_at = st.scheduled_at
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
