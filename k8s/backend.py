"""The Kubernetes backend: workers are pods (official ``kubernetes`` client).

Behind the same :class:`~hta.backends.base.WorkerBackend` contract as the
local backend. Blocking client calls run in a thread (``asyncio.to_thread``);
a :class:`~k8s.informer.PodInformer` keeps the run's pods and the times of
their phases.

- A worker in the master is matched to its pod by hostname: a pod's hostname
  is its name (with ``hostNetwork`` on a real cluster, it is the node's name,
  one worker per node).
- Preparation latency L = request → worker connected, with its phases:
  ``node`` (waiting for a node: request → scheduled), ``start`` (scheduled →
  running: image pull and container start) and ``connect`` (running →
  connected to the master).
- Scale down = drain: only pods whose worker the master shows idle are
  deleted. A pod that failed or was evicted is reported ``lost`` and replaced
  only if the policy still wants it.
- Pods of the same run (label ``hta.io/run``) found at start are adopted, not
  duplicated; at the end every pod of the run is deleted and HTA waits until
  they are gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kubernetes import client

from hta.backends.base import CPU_UTILIZATION
from hta.model import PendingWorker, Resources
from hta.scaling_log import WorkerRecord
from k8s.api import CallCounter, K8sError, call, load_client
from k8s.informer import PodInformer, PodState
from hta.node.worker import worker_command
from k8s.pods import DEFAULT_IMAGE, RUN_LABEL, worker_pod
from workqueue_bridge.status import MasterSnapshot

log = logging.getLogger("hta.k8s")


@dataclass
class Tracked:
    name: str
    shape: Resources
    requested_at: float  # seconds since epoch (the controller's clock)
    connected_at: float | None = None
    address: str | None = None
    state: str = "pending"  # pending | connected | deleting | gone
    adopted: bool = False


#: the resource metrics API, as the HPA controller reads it
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
#: metrics-server's default resolution: reading more often returns the same numbers
METRICS_EVERY_S = 15.0


def pod_cpu_cores(item: dict) -> float:
    """CPU cores a PodMetrics item says the pod's containers use (``usage.cpu`` quantities)."""
    from kubernetes.utils import parse_quantity

    return float(sum(parse_quantity(c.get("usage", {}).get("cpu", "0")) for c in item.get("containers", [])))


class KubernetesBackend:
    name = "k8s"
    #: a fixed port, so a restarted HTA's pods find their master again
    default_port = 9123
    #: filled by connect(): CPU utilisation only where the cluster serves metrics.k8s.io
    signals: frozenset[str] = frozenset()
    #: why a signal is missing (for the policy refusal)
    signals_why: str = ""

    def __init__(
        self,
        *,
        run_id: str,
        epoch: float,
        namespace: str = "default",
        image: str = DEFAULT_IMAGE,
        kubeconfig: str | None = None,
        master_host: str | None = None,
        host_network: bool = False,
        idle_timeout_s: int = 900,
        delete_timeout_s: float = 120.0,
        create_concurrency: int = 16,
    ):
        self.run_id = run_id
        self.epoch = epoch
        self.namespace = namespace
        self.image = image
        self.kubeconfig = kubeconfig
        self.master_host = master_host
        self.host_network = host_network
        self.idle_timeout_s = idle_timeout_s
        self.delete_timeout_s = delete_timeout_s
        self.create_concurrency = create_concurrency
        self.counter = CallCounter()
        self.selector = f"{RUN_LABEL}={run_id}"
        self.api: client.CoreV1Api | None = None
        self.informer: PodInformer | None = None
        self._tracked: dict[str, Tracked] = {}
        self._events: list[WorkerRecord] = []
        self._seq = 0
        self._port = 0
        self._cpu: dict[str, float] = {}
        self._cpu_at = float("-inf")

    # -- lifecycle -----------------------------------------------------------------
    def connect(self) -> None:
        """Load configuration and check access (blocking; one-line K8sError on failure)."""
        self.api = client.CoreV1Api(load_client(self.kubeconfig))
        call(self.api.list_namespaced_pod, self.namespace, label_selector=self.selector, limit=1,
             counter=self.counter, attempts=3, what=f"list pods in namespace {self.namespace!r}")
        self.metrics = client.CustomObjectsApi(self.api.api_client)
        try:
            self._pod_metrics(limit=1)
        except K8sError as exc:
            self.signals = frozenset()
            self.signals_why = (f"the cluster does not serve {METRICS_GROUP} ({exc}); install metrics-server "
                                f"and grant HTA's Role get/list on pods.metrics.k8s.io")
        else:
            self.signals = frozenset({CPU_UTILIZATION})

    def _pod_metrics(self, **kwargs) -> list[dict]:
        out = call(self.metrics.list_namespaced_custom_object, METRICS_GROUP, METRICS_VERSION, self.namespace,
                   "pods", label_selector=self.selector, counter=self.counter, attempts=2,
                   what=f"read pod metrics in namespace {self.namespace!r}", **kwargs)
        return list(out.get("items", []))

    async def cpu_utilization(self) -> dict[str, float] | None:
        """Each connected pod's CPU use over its cores (its limit), from the metrics API as the
        HPA controller reads it, at most once per ``METRICS_EVERY_S``; None without the API."""
        if CPU_UTILIZATION not in self.signals:
            return None
        now = time.monotonic()
        if now - self._cpu_at >= METRICS_EVERY_S:
            self._cpu_at = now
            items = await asyncio.to_thread(self._pod_metrics)
            used = {i.get("metadata", {}).get("name"): pod_cpu_cores(i) for i in items}
            self._cpu = {name: used[name] / tr.shape.cores for name, tr in self._tracked.items()
                         if tr.state == "connected" and name in used and tr.shape.cores > 0}
        return dict(self._cpu)

    async def start(self, master_host: str, master_port: int) -> None:
        if self.api is None:
            await asyncio.to_thread(self.connect)
        self.master_host = self.master_host or master_host
        self._port = master_port
        self.informer = PodInformer(self.api, self.namespace, self.selector, self.counter)
        self.informer.start()
        await asyncio.to_thread(self.informer.synced.wait, 30)
        for st in self.informer.snapshot().values():
            if st.finished or st.deleting:
                continue
            requested = (st.created or time.time()) - self.epoch
            self._tracked[st.name] = Tracked(st.name, Resources(), requested, adopted=True)
            self._events.append(WorkerRecord(t=round(max(requested, 0.0), 3), worker=st.name, event="requested"))
            self._seq = max(self._seq, self._seq_of(st.name))
        if self._tracked:
            log.info("adopted %d pods of run %s", len(self._tracked), self.run_id)

    def _seq_of(self, name: str) -> int:
        try:
            return int(name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            return 0

    def _now(self) -> float:
        return time.time() - self.epoch

    # -- scale up ------------------------------------------------------------------
    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        names = []
        for _ in range(n):
            self._seq += 1
            names.append(f"hta-{self.run_id}-{self._seq}")
        cmd = worker_command(f"{self.master_host or '127.0.0.1'}:{self._port}", disk_mb=int(shape.disk_mb),
                             idle_timeout_s=self.idle_timeout_s)
        gate = asyncio.Semaphore(self.create_concurrency)

        async def create(name: str) -> str | None:
            pod = worker_pod(name, self.run_id, shape, self.image, cmd, self.host_network)
            async with gate:
                t = self._now()
                try:
                    await asyncio.to_thread(call, self.api.create_namespaced_pod, self.namespace, pod,
                                            counter=self.counter, what=f"create pod {name}")
                except K8sError as exc:
                    if " 409 " in f" {exc} ":
                        return None  # a pod of that name exists already (adopted): skip it
                    raise
            self._tracked[name] = Tracked(name, shape, t)
            self._events.append(WorkerRecord(t=round(t, 3), worker=name, event="requested", cores=shape.cores))
            return name

        done = await asyncio.gather(*(create(n) for n in names))
        return [n for n in done if n]

    # -- observation ---------------------------------------------------------------
    def _rel(self, unix: float | None) -> float | None:
        return None if unix is None else unix - self.epoch

    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        pods = self.informer.snapshot() if self.informer else {}
        by_host = {w.hostname: w for w in snap.workers}
        for tr in self._tracked.values():
            st = pods.get(tr.name)
            if tr.state == "pending":
                w = by_host.get(tr.name) or (by_host.get(st.node) if (st and st.node and self.host_network) else None)
                if w is not None:
                    tr.state, tr.address, tr.connected_at = "connected", w.address, now
                    if tr.shape == Resources():
                        tr.shape = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
                    self._events.append(WorkerRecord(
                        t=round(now, 3), worker=tr.name, event="connected", cores=w.cores,
                        latency_s=None if tr.adopted else round(now - tr.requested_at, 3),
                        phases={} if tr.adopted else self._phases(tr, st, now)))
            if tr.state in ("pending", "connected") and st is not None and (st.finished or st.deleting):
                tr.state = "gone"
                lost = by_host[tr.name].tasks_running if tr.name in by_host else 0
                self._events.append(WorkerRecord(t=round(now, 3), worker=tr.name,
                                                 event="failed" if st.phase == "Failed" else "lost",
                                                 cores=tr.shape.cores, tasks_lost=lost))
        return self._flush()

    def _phases(self, tr: Tracked, st: PodState | None, now: float) -> dict[str, float]:
        if st is None:
            return {}
        sched = self._rel(st.scheduled_at)
        run = self._rel(st.running_at)
        out = {}
        if sched is not None:
            out["node"] = round(max(0.0, sched - tr.requested_at), 3)
        if sched is not None and run is not None:
            out["start"] = round(max(0.0, run - sched), 3)
        if run is not None:
            out["connect"] = round(max(0.0, now - run), 3)
        return out

    def _flush(self) -> list[WorkerRecord]:
        out, self._events = self._events, []
        return out

    def worker_ids(self) -> dict[str, str]:
        return {t.address: t.name for t in self._tracked.values() if t.state == "connected" and t.address}

    def retired(self) -> set[str]:
        return {t.address for t in self._tracked.values() if t.address and t.state in ("deleting", "gone")}

    def pending(self) -> list[PendingWorker]:
        return [PendingWorker(id=t.name, requested_at=t.requested_at, shape=t.shape)
                for t in self._tracked.values() if t.state == "pending"]

    def pod_names(self) -> list[str]:
        return [t.name for t in self._tracked.values() if t.state != "gone"]

    # -- scale down ----------------------------------------------------------------
    async def _delete(self, name: str) -> None:
        try:
            await asyncio.to_thread(call, self.api.delete_namespaced_pod, name, self.namespace,
                                    counter=self.counter, what=f"delete pod {name}")
        except K8sError as exc:
            if " 404 " not in f" {exc} ":
                raise

    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.address for w in snap.workers if w.tasks_running > 0}
        for name in ids:
            tr = self._tracked.get(name)
            if tr is None or tr.state != "connected" or tr.address in busy:
                continue
            tr.state = "deleting"
            await self._delete(name)
            self._events.append(WorkerRecord(t=round(now, 3), worker=name, event="drained", cores=tr.shape.cores))
        return self._flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        running = {w.address: w.tasks_running for w in snap.workers}
        for name in ids:
            tr = self._tracked.get(name)
            if tr is None or tr.state in ("gone", "deleting"):
                continue
            lost = running.get(tr.address or "", 0)
            tr.state = "deleting"
            await self._delete(name)
            self._events.append(WorkerRecord(t=round(now, 3), worker=name, event="removed", cores=tr.shape.cores,
                                             tasks_lost=lost))
        return self._flush()

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        """Delete every pod of the run (not only the tracked ones) and wait until they are gone."""
        if self.api is None:
            return []
        pods = await asyncio.to_thread(call, self.api.list_namespaced_pod, self.namespace,
                                       label_selector=self.selector, counter=self.counter, what="list pods")
        for p in pods.items:
            await self._delete(p.metadata.name)
        deadline = time.monotonic() + self.delete_timeout_s
        left = [p.metadata.name for p in pods.items]
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            cur = await asyncio.to_thread(call, self.api.list_namespaced_pod, self.namespace,
                                          label_selector=self.selector, counter=self.counter, what="list pods")
            left = [p.metadata.name for p in cur.items]
        if self.informer:
            self.informer.stop()
        for tr in self._tracked.values():
            if tr.state != "gone":
                self._events.append(WorkerRecord(t=round(now, 3), worker=tr.name, event="stopped",
                                                 cores=tr.shape.cores))
                tr.state = "gone"
        if left:
            log.warning("pods still present after %.0fs: %s", self.delete_timeout_s, ", ".join(left))
        return self._flush()


def routable_address(kubeconfig: str | None, host_network: bool) -> str:
    """The address of this host that worker pods can reach the master at: the one that routes
    towards the API server. For an API server on loopback (a cluster on this machine), that is
    127.0.0.1 only for pods on the host network; pods on a pod network need the address of the
    default route."""
    import socket
    from urllib.parse import urlparse

    try:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        host = urlparse(cfg.host).hostname or "127.0.0.1"
    except Exception:
        host = None
    if host in ("127.0.0.1", "localhost", "::1"):
        if host_network:
            return "127.0.0.1"
        host = "192.0.2.254"  # any non-local destination picks the default route
    if host is None:
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:  # a UDP "connect" only picks the route; nothing is sent
            s.connect((host, 443))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def from_options(options, run) -> KubernetesBackend:
    """The registry's factory (:mod:`hta.backends`): connects and checks access now, so a
    wrong kubeconfig or missing RBAC is one line before anything starts."""
    from k8s.pods import run_id_for

    backend = KubernetesBackend(
        run_id=run_id_for(run.workflow), epoch=run.epoch, namespace=options.namespace, image=options.image,
        kubeconfig=options.kubeconfig,
        master_host=options.master_host or routable_address(options.kubeconfig, options.host_network),
        host_network=options.host_network, idle_timeout_s=options.idle_timeout_s)
    try:
        backend.connect()
    except K8sError as exc:
        raise ValueError(str(exc)) from None
    return backend
