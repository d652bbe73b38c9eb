"""The Kubernetes provider: workers are pods (official ``kubernetes`` client).

A :class:`~hta.backends.provider.Provider` under the worker pool, as local processes and
Slurm jobs are. Blocking client calls run in a thread (``asyncio.to_thread``);
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
import os
import time

from kubernetes import client

from hta.backends.base import CPU_UTILIZATION
from hta.backends.provider import JobState, JobStatus, Provider, end_all, in_order, launched, run_id_for
from hta.model import Resources
from hta.node.worker import worker_command
from k8s.api import STEP_BUDGET_S, CallCounter, K8sError, acall, call, load_client
from k8s.informer import PodInformer, PodState
from k8s.nodes import NodeWatch, node_holds, typical_hold
from k8s.pods import DEFAULT_IMAGE, RUN_LABEL, worker_pod
from workqueue_bridge.snapshot import MasterSnapshot

log = logging.getLogger("hta.k8s")


#: the resource metrics API, as the HPA controller reads it
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
#: metrics-server's default resolution: reading more often returns the same numbers
METRICS_EVERY_S = 15.0
#: no worker can start when every pod asked for has been stuck this long and none is connected
#: (unschedulable, its image cannot be pulled, its worker cannot reach the master): the run ends.
#: Above a cloud's node provisioning (GKE: about 157 s) so a cold cluster autoscaler is not a fault.
START_TIMEOUT_S = 300.0
#: a pod unschedulable this long is reported (one line per distinct reason) and no more pods of
#: its shape or larger are asked for while it is
STUCK_AFTER_S = 30.0
#: container waiting reasons that do not pass by themselves
STUCK_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff", "RunContainerError"}
#: at the end: pods still Terminating this long after the delete are deleted with grace 0
FORCE_DELETE_AFTER_S = 30.0


def _env_seconds(name: str, default: float) -> float:
    """A duration from the environment (the backend options cannot carry it yet)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise K8sError(f"{name}={raw!r} is not a number of seconds") from None
    if v <= 0:
        raise K8sError(f"{name}={raw!r} must be above 0")
    return v


def _short(message: str) -> str:
    """The scheduler's message without its preemption half, on one line."""
    m = " ".join((message or "").split())
    return m.split(" preemption:")[0].rstrip(". ") or m


def pod_cpu_cores(item: dict) -> float:
    """CPU cores a PodMetrics item says the pod's containers use (``usage.cpu`` quantities)."""
    from kubernetes.utils import parse_quantity

    return float(sum(parse_quantity(c.get("usage", {}).get("cpu", "0")) for c in item.get("containers", [])))


def pod_phases(st: PodState | None, requested: float, connected: float) -> dict[str, float]:
    """Where a pod's latency went (Unix times in): ``node`` (waiting for a node: request →
    scheduled; ``unschedulable``: how long of it no node had room), ``start`` (scheduled →
    running: image pull and container start) and ``connect`` (running → connected). Times the
    watch saw late come from the pod's status in whole seconds, and may read a little early."""
    if st is None:
        return {}
    out = in_order(requested, connected, [("node", st.scheduled_at), ("start", st.running_at)], "connect")
    if "node" in out:
        out["unschedulable"] = (round(max(0.0, requested + out["node"] - st.unschedulable_at), 3)
                                if st.unschedulable_at is not None else 0.0)
    return out


class KubernetesProvider(Provider):
    name = "k8s"
    noun, job, launched, reached_from = "worker pod", "pod", "created", "the pods"
    #: a fixed port, so a restarted HTA's pods find their master again
    default_port = 9123

    def __init__(
        self,
        *,
        run_id: str,
        namespace: str = "default",
        image: str = DEFAULT_IMAGE,
        kubeconfig: str | None = None,
        master_host: str | None = None,
        host_network: bool = False,
        idle_timeout_s: int = 900,
        delete_timeout_s: float = 120.0,
        create_concurrency: int = 16,
        start_timeout_s: float | None = None,
        stuck_after_s: float | None = None,
        force_delete_after_s: float = FORCE_DELETE_AFTER_S,
        api_budget_s: float = STEP_BUDGET_S,
        css: bool | str = True,
    ):
        self.run_id = run_id
        self.css = css
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
        self.nodes: NodeWatch | None = None
        self._seq = 0
        #: pods this run created: the watch may not have seen them yet; the pods the last poll saw
        self._created: set[str] = set()
        self._seen: dict[str, PodState] = {}
        self._cpu: dict[str, float] = {}
        self._cpu_at = float("-inf")
        self.start_timeout_s = (start_timeout_s if start_timeout_s is not None
                                else _env_seconds("HTA_K8S_START_TIMEOUT_S", START_TIMEOUT_S))
        self.stuck_after_s = stuck_after_s if stuck_after_s is not None else min(STUCK_AFTER_S,
                                                                                 self.start_timeout_s / 4)
        self.force_delete_after_s = force_delete_after_s
        self.api_budget_s = api_budget_s
        #: why the last launch created fewer pods than asked (a quota, an unschedulable shape)
        self._holding_back: str | None = None

    @property
    def core(self) -> client.CoreV1Api:
        """The API client, once :meth:`connect` has made it."""
        if self.api is None:
            raise K8sError("not connected to the Kubernetes API server yet")
        return self.api

    # -- access ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Load configuration and check access (blocking; one-line K8sError on failure)."""
        self.api = client.CoreV1Api(load_client(self.kubeconfig))
        call(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector, limit=1,
             counter=self.counter, attempts=3, what=f"list pods in namespace {self.namespace!r}")
        self._check_create()
        self.metrics = client.CustomObjectsApi(self.api.api_client)
        try:
            self._pod_metrics(limit=1)
        except K8sError as exc:
            self.signals = frozenset()
            self.signals_why = (f"the cluster does not serve {METRICS_GROUP} ({exc}); install metrics-server "
                                f"and grant HTA's Role get/list on pods.metrics.k8s.io")
        else:
            self.signals = frozenset({CPU_UTILIZATION})

    def _check_create(self) -> None:
        """Create one worker pod as a server-side dry run: the namespace exists (listing pods in
        one that does not answers an empty list), HTA may create pods there, and the API
        server takes the pod as HTA writes it (its image name included). Each failure would
        otherwise fail every create of the run, retried for ever."""
        pod = worker_pod(f"hta-{self.run_id}-check", self.run_id, Resources(cores=1, memory_mb=512, disk_mb=1024),
                         self.image, worker_command("127.0.0.1:9123", disk_mb=1024, idle_timeout_s=60),
                         self.host_network)
        try:
            call(self.core.create_namespaced_pod, self.namespace, pod, dry_run="All", counter=self.counter,
                 attempts=3, what=f"create a worker pod in namespace {self.namespace!r} (a dry run)")
        except K8sError as exc:
            if " 404 " in f" {exc} " and "namespaces" in str(exc):
                raise K8sError(f"namespace {self.namespace!r} not found: create it (kubectl create namespace "
                               f"{self.namespace}) or pass --namespace") from None
            if " 422 " in f" {exc} ":
                raise K8sError(f"{exc}: check --image ({self.image!r})") from None
            raise

    def _pod_metrics(self, **kwargs) -> list[dict]:
        out = call(self.metrics.list_namespaced_custom_object, METRICS_GROUP, METRICS_VERSION, self.namespace,
                   "pods", label_selector=self.selector, counter=self.counter, attempts=2,
                   what=f"read pod metrics in namespace {self.namespace!r}", **kwargs)
        return list(out.get("items", []))

    async def cpu_utilization(self, cores: dict[str, float]) -> dict[str, float] | None:
        """Each connected pod's CPU use over its cores (its limit), from the metrics API as the
        HPA controller reads it, at most once per ``METRICS_EVERY_S``; None without the API."""
        if CPU_UTILIZATION not in self.signals:
            return None
        now = time.monotonic()
        if now - self._cpu_at >= METRICS_EVERY_S:
            self._cpu_at = now
            items = await asyncio.to_thread(self._pod_metrics, budget_s=self.api_budget_s)
            used = {i.get("metadata", {}).get("name"): pod_cpu_cores(i) for i in items}
            self._cpu = {name: used[name] / n for name, n in cores.items() if name in used and n > 0}
        return dict(self._cpu)

    async def start(self, master_host: str, master_port: int) -> None:
        if self.api is None:
            await asyncio.to_thread(self.connect)
        self.master = f"{self.master_host or master_host}:{master_port}"
        self.informer = PodInformer(self.core, self.namespace, self.selector, self.counter)
        self.informer.start()
        watch = NodeWatch(self.core, self.counter)
        self.nodes = watch if await asyncio.to_thread(watch.start) else None
        await asyncio.to_thread(self.informer.synced.wait, 30)

    def _pods(self) -> dict[str, PodState]:
        return self.informer.snapshot() if self.informer else {}

    # -- why pods do not start ---------------------------------------------------------
    def _stuck(self, st: PodState, now_unix: float) -> tuple[str, str] | None:
        """(kind, reason) when a pod cannot start by itself (kind: unschedulable | image |
        container), None while it may still."""
        if st.finished or st.deleting:
            return None
        if st.node is None and st.unschedulable is not None:
            if now_unix - (st.unschedulable_at or now_unix) >= self.stuck_after_s:
                return "unschedulable", _short(st.unschedulable)
            return None
        if st.waiting_reason in STUCK_REASONS:
            kind = "image" if "Image" in st.waiting_reason else "container"
            return kind, f"{st.waiting_reason}: {' '.join(st.waiting_message.split())}".rstrip(": ")
        return None

    def stuck_line(self, kind: str, why: str, fatal: bool) -> str:
        waited = f"for {self.start_timeout_s:.0f}s"
        if not fatal:
            after = f"the run ends if no worker can start within {self.start_timeout_s:.0f}s"
            if kind == "unschedulable":
                return f"cannot be scheduled: {why} (no more pods of this shape are asked for while it waits; {after})"
            if kind == "unreachable":
                return super().stuck_line(kind, why, fatal)
            return f"cannot start: {why} (no more pods are asked for while it waits; {after})"
        if kind == "unschedulable":
            return (f"worker pods cannot be scheduled ({waited}): {why}; lower --worker-cores/--worker-memory "
                    f"or add nodes (or raise the cluster autoscaler's node maximum)")
        if kind == "image":
            return (f"worker pods cannot start ({waited}): image {self.image} cannot be pulled: {why}; "
                    f"push the image where the nodes can pull it or pass --image")
        if kind == "unreachable":
            return super().stuck_line(kind, why, fatal)
        return f"worker pods cannot start ({waited}): {why}; fix the worker image or its command"

    def cannot_start(self, n: int, handle: str, why: str) -> str:
        return (f"worker pods cannot start: {n} in a row ended before their worker connected; the last "
                f"({handle}): {why}; see kubectl logs {handle}, fix the image or pass --master-host an "
                f"address the pods can reach")

    def _shape_blocked(self, shape: Resources) -> str | None:
        """Why pods of ``shape`` would not start either: a pod of this shape or a smaller one is
        stuck unschedulable, or any pod cannot start its container (same image, any shape)."""
        now = time.time()
        for st in self._pods().values():
            stuck = self._stuck(st, now)
            if stuck is None:
                continue
            if stuck[0] != "unschedulable":
                return stuck[1]
            if st.cpu <= shape.cores + 1e-9 and st.memory_mb <= shape.memory_mb + 1e-9:
                return stuck[1]
        return None

    # -- launch ---------------------------------------------------------------------------
    def node_hold_s(self) -> float | None:
        """How long a node stayed after the run's last pod on it went, by the Node objects
        (:mod:`k8s.nodes`); None before one went, or where nodes cannot be listed."""
        if self.nodes is None:
            return None
        return typical_hold(node_holds(self._pods(), self.nodes.gone()))

    def holding_back(self) -> str | None:
        return self._holding_back

    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        self._holding_back = None
        blocked = self._shape_blocked(shape)
        if blocked:
            log.debug("not asking for %d pod(s): pods of this shape cannot start (%s)", n, blocked)
            self._holding_back = f"pods of this shape cannot start: {blocked}"
            return []
        names = []
        for _ in range(n):
            self._seq += 1
            names.append(f"hta-{self.run_id}-{self._seq}")
        cmd = worker_command(self.master, disk_mb=int(shape.disk_mb), idle_timeout_s=self.idle_timeout_s, css=self.css)
        gate = asyncio.Semaphore(self.create_concurrency)
        deadline = time.monotonic() + self.api_budget_s

        async def create(name: str) -> str | None:
            pod = worker_pod(name, self.run_id, shape, self.image, cmd, self.host_network)
            async with gate:
                try:
                    await acall(self.core.create_namespaced_pod, self.namespace, pod, deadline=deadline,
                                budget_s=self.api_budget_s, counter=self.counter, what=f"create pod {name}")
                except K8sError as exc:
                    if " 409 " in f" {exc} ":
                        return None  # a pod of that name exists already (adopted): skip it
                    if " 403 " in f" {exc} " and "exceeded quota" in str(exc):
                        self._holding_back = "the namespace's ResourceQuota: " + str(exc).split("exceeded quota", 1)[1] \
                            .strip(" :")[:160]
                        return None  # the quota holds it back: no fault of the run's
                    raise
            self._created.add(name)
            return name

        return launched(await asyncio.gather(*(create(n) for n in names), return_exceptions=True), self.noun)

    # -- poll -----------------------------------------------------------------------------
    async def poll(self, snap: MasterSnapshot | None) -> dict[str, JobStatus]:
        pods = self._seen = self._pods()
        out = {name: JobStatus(JobState.PENDING, hostnames=(name,), settled=False)  # not seen by the watch yet
               for name in self._created if name not in pods}
        now = time.time()
        for st in pods.values():
            if st.finished or st.deleting:
                why = ("its pod was deleted (or its node went away)" if st.deleting or st.gone else
                       f"its pod ended: {st.phase}" + (f", {st.terminated}" if st.terminated else ""))
                out[st.name] = JobStatus(JobState.ENDED, why=why, failed=st.phase in ("Failed", "Succeeded")
                                         and not (st.deleting or st.gone))
                continue
            stuck = self._stuck(st, now)
            out[st.name] = JobStatus(
                JobState.RUNNING if st.running_at is not None else JobState.PENDING,
                hostnames=(st.name, st.node) if self.host_network and st.node else (st.name,), node=st.node,
                running_since=st.running_at, stuck=stuck,
                stuck_since=st.unschedulable_at if stuck and stuck[0] == "unschedulable" else None,
                settled=st.running_at is not None, created_at=st.created,
                shape=Resources(cores=st.cpu, memory_mb=st.memory_mb) if st.cpu else None)
            seq = st.name.removeprefix(f"hta-{self.run_id}-")
            self._seq = max(self._seq, int(seq) if seq.isdigit() else 0)
        return out

    def phases(self, handle: str, requested: float, connected: float) -> dict[str, float]:
        st = self._seen.get(handle)
        if st is None or st.running_at is None:  # (at the end: what the watch knows by now)
            self._seen = self._pods()
            st = self._seen.get(handle)
        return pod_phases(st, requested, connected)

    # -- cancel ---------------------------------------------------------------------------
    async def _delete(self, name: str, *, deadline: float | None = None, grace_s: int | None = None) -> None:
        kwargs = {} if grace_s is None else {"grace_period_seconds": grace_s}
        try:
            await acall(self.core.delete_namespaced_pod, name, self.namespace, deadline=deadline,
                        budget_s=self.api_budget_s, counter=self.counter, what=f"delete pod {name}", **kwargs)
        except K8sError as exc:
            if " 404 " not in f" {exc} ":
                raise

    async def cancel(self, handles: list[str], force: bool = False, grace_s: int | None = None) -> dict[str, str]:
        """Delete these pods at once, within one API budget, with their grace period: ``hta
        worker`` leaves at once when idle, and a busy one's tasks go back to the queue."""
        deadline = time.monotonic() + self.api_budget_s
        done = await asyncio.gather(*(self._delete(h, deadline=deadline, grace_s=grace_s) for h in handles),
                                    return_exceptions=True)
        return {h: str(d) for h, d in zip(handles, done) if isinstance(d, BaseException)}

    async def kill(self, handles: list[str]) -> dict[str, str]:
        """Pods whose worker is gone already (its node may be gone too): grace period 0."""
        return await self.cancel(handles, force=True, grace_s=0)

    async def stop_all(self) -> None:
        """Delete every pod of the run (not only the tracked ones) and wait until they are gone,
        at most ``delete_timeout_s``; pods still Terminating after ``force_delete_after_s``
        (their node is gone, or its kubelet does not answer) are deleted with grace period 0."""
        try:
            if self.api is not None:
                await end_all("worker pod", lambda: self._list_names(5.0), self._end, self._stop_command,
                              timeout_s=self.delete_timeout_s, force_after_s=self.force_delete_after_s,
                              force_words="with grace period 0")
        finally:
            if self.informer:
                self.informer.stop()
            if self.nodes:
                self.nodes.stop()

    async def _list_names(self, budget_s: float) -> list[str]:
        pods = await acall(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector,
                           budget_s=budget_s, counter=self.counter, what="list pods")
        return [p.metadata.name for p in pods.items]

    async def _end(self, names: list[str], force: bool) -> None:
        deadline = time.monotonic() + (10.0 if force else 20.0)
        await asyncio.gather(*(self._delete(n, deadline=deadline, grace_s=0 if force else None) for n in names),
                             return_exceptions=True)

    def _stop_command(self, names: list[str]) -> str:
        return f"kubectl delete pods -n {self.namespace} -l {self.selector} --grace-period=0 --force"


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
    except Exception:  # noqa: BLE001 — no usable kubeconfig: fall back to this host's name
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


def from_options(options, run):
    """The registry's factory (:mod:`hta.backends`): connects and checks access now, so a
    wrong kubeconfig or missing RBAC is one line before anything starts."""
    from hta.backends.pool import WorkerPool
    try:
        provider = KubernetesProvider(
            run_id=run_id_for(run.workflow), namespace=options.namespace, image=options.image,
            kubeconfig=options.kubeconfig,
            master_host=options.master_host or routable_address(options.kubeconfig, options.host_network),
            host_network=options.host_network, idle_timeout_s=options.idle_timeout_s,
            start_timeout_s=options.start_timeout_s, css=options.css)
        provider.connect()
    except K8sError as exc:
        raise ValueError(str(exc)) from None
    return WorkerPool(provider, epoch=run.epoch)
