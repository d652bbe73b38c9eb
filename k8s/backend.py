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
import os
import re
import time
from dataclasses import dataclass, field

from kubernetes import client

from hta.backends.base import CPU_UTILIZATION, WorkerBackend
from hta.backends.lifecycle import Lifecycle, WorkerLife, running_by_worker
from hta.model import PendingWorker, Resources
from hta.node.worker import worker_command
from hta.scaling_log import WorkerRecord
from k8s.api import STEP_BUDGET_S, CallCounter, K8sError, acall, call, load_client
from k8s.informer import PodInformer, PodState
from k8s.pods import DEFAULT_IMAGE, RUN_LABEL, worker_pod
from workqueue_bridge.snapshot import MasterSnapshot

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
    life: WorkerLife = field(default_factory=WorkerLife)
    #: while its pod cannot start by itself: since when (Unix time) and (kind, reason)
    stuck_since: float | None = None
    stuck: tuple[str, str] | None = None
    #: its "connected" record, held until the watch has told us when its pod ran (the worker
    #: can connect within the watch's lag of its pod running), and until when (Unix time)
    unannounced: WorkerRecord | None = None
    announce_by: float = 0.0


#: how long a connected worker's record waits for the watch to say when its pod ran: a
#: kubelet reports Running about a second after the container starts, and the watch adds
#: its own lag (median 0.5 s, p90 0.9 s at 1,000 pods: bench/k8s_scale.py)
PHASES_WAIT_S = 10.0

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


class KubernetesBackend(WorkerBackend):
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
        start_timeout_s: float | None = None,
        stuck_after_s: float | None = None,
        force_delete_after_s: float = FORCE_DELETE_AFTER_S,
        api_budget_s: float = STEP_BUDGET_S,
        phases_wait_s: float = PHASES_WAIT_S,
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
        self.lifecycle = Lifecycle()
        self._seq = 0
        self._port = 0
        self._cpu: dict[str, float] = {}
        self._cpu_at = float("-inf")
        self.start_timeout_s = (start_timeout_s if start_timeout_s is not None
                                else _env_seconds("HTA_K8S_START_TIMEOUT_S", START_TIMEOUT_S))
        self.stuck_after_s = stuck_after_s if stuck_after_s is not None else min(STUCK_AFTER_S,
                                                                                 self.start_timeout_s / 4)
        self.force_delete_after_s = force_delete_after_s
        self.api_budget_s = api_budget_s
        self.phases_wait_s = phases_wait_s
        self._reported: set[str] = set()
        self._blocked_since: float | None = None
        self._blocked_why: str = ""
        #: why the last request started fewer pods than asked (a quota, an unschedulable shape)
        self._holding_back: str | None = None
        #: since when every pod create has failed (None: the last one worked), and the last error
        self._creates_failing_since: float | None = None
        self._create_error = ""

    @property
    def fatal(self) -> str | None:
        return self.lifecycle.fatal

    @property
    def core(self) -> client.CoreV1Api:
        """The API client, once :meth:`connect` has made it."""
        if self.api is None:
            raise K8sError("not connected to the Kubernetes API server yet")
        return self.api

    @property
    def start_failures(self) -> int:
        return self.lifecycle.start_failures

    # -- lifecycle -----------------------------------------------------------------
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

    async def cpu_utilization(self) -> dict[str, float] | None:
        """Each connected pod's CPU use over its cores (its limit), from the metrics API as the
        HPA controller reads it, at most once per ``METRICS_EVERY_S``; None without the API."""
        if CPU_UTILIZATION not in self.signals:
            return None
        now = time.monotonic()
        if now - self._cpu_at >= METRICS_EVERY_S:
            self._cpu_at = now
            items = await asyncio.to_thread(self._pod_metrics, budget_s=self.api_budget_s)
            used = {i.get("metadata", {}).get("name"): pod_cpu_cores(i) for i in items}
            self._cpu = {name: used[name] / tr.shape.cores for name, tr in self._tracked.items()
                         if tr.state == "connected" and name in used and tr.shape.cores > 0}
        return dict(self._cpu)

    async def start(self, master_host: str, master_port: int) -> None:
        if self.api is None:
            await asyncio.to_thread(self.connect)
        self.master_host = self.master_host or master_host
        self._port = master_port
        self.informer = PodInformer(self.core, self.namespace, self.selector, self.counter)
        self.informer.start()
        await asyncio.to_thread(self.informer.synced.wait, 30)
        self._adopt(self.informer.snapshot())
        if self._tracked:
            log.info("adopted %d pods of run %s", len(self._tracked), self.run_id)

    def _adopt(self, pods: dict[str, PodState]) -> None:
        """Track the run's live pods this HTA did not create (a restarted HTA's, or one whose create
        call timed out but happened): counted, never duplicated, deleted at the end."""
        for st in pods.values():
            if st.name in self._tracked or st.finished or st.deleting:
                continue
            requested = (st.created or time.time()) - self.epoch
            shape = Resources(cores=st.cpu, memory_mb=st.memory_mb) if st.cpu else Resources()
            self._tracked[st.name] = Tracked(st.name, shape, requested, adopted=True)
            self.lifecycle.record(WorkerRecord(t=round(max(requested, 0.0), 3), worker=st.name, event="requested",
                                             cores=st.cpu or None))
            self._seq = max(self._seq, self._seq_of(st.name))

    def _seq_of(self, name: str) -> int:
        try:
            return int(name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            return 0

    def _now(self) -> float:
        return time.time() - self.epoch

    # -- why pods do not start ---------------------------------------------------------
    def _stuck(self, tr: Tracked, st: PodState | None, now_unix: float) -> tuple[str, str] | None:
        """(kind, reason) when ``tr``'s pod cannot start by itself (kind: unschedulable | image |
        container | unreachable), None while it may still."""
        if st is None or tr.state != "pending" or st.finished or st.deleting:
            return None
        if st.node is None and st.unschedulable is not None:
            if now_unix - (st.unschedulable_at or now_unix) >= self.stuck_after_s:
                return "unschedulable", _short(st.unschedulable)
            return None
        if st.waiting_reason in STUCK_REASONS:
            kind = "image" if "Image" in st.waiting_reason else "container"
            return kind, f"{st.waiting_reason}: {' '.join(st.waiting_message.split())}".rstrip(": ")
        if st.running_at is not None and now_unix - st.running_at >= self.stuck_after_s:
            return "unreachable", f"running for {now_unix - st.running_at:.0f}s without its worker connecting"
        return None

    def _report(self, name: str, kind: str, why: str) -> None:
        key = kind + ":" + re.sub(r"\d+", "N", why)  # "0/2 nodes" and "0/3 nodes" are one reason
        if key in self._reported:
            return
        self._reported.add(key)
        if kind == "unschedulable":
            log.warning("worker pod %s cannot be scheduled: %s (no more pods of this shape are asked for "
                        "while it waits; the run ends if no worker can start within %.0fs)", name, why,
                        self.start_timeout_s)
        elif kind == "unreachable":
            log.warning("worker pod %s is %s to the master at %s:%s (the run ends if no worker can start "
                        "within %.0fs)", name, why, self.master_host, self._port, self.start_timeout_s)
        else:
            log.warning("worker pod %s cannot start: %s (no more pods are asked for while it waits; the run "
                        "ends if no worker can start within %.0fs)", name, why, self.start_timeout_s)

    def _fatal_line(self, kind: str, why: str) -> str:
        waited = f"for {self.start_timeout_s:.0f}s"
        if kind == "unschedulable":
            return (f"worker pods cannot be scheduled ({waited}): {why}; lower --worker-cores/--worker-memory "
                    f"or add nodes (or raise the cluster autoscaler's node maximum)")
        if kind == "image":
            return (f"worker pods cannot start ({waited}): image {self.image} cannot be pulled: {why}; "
                    f"push the image where the nodes can pull it or pass --image")
        if kind == "unreachable":
            return (f"worker pods run but no worker reached the master at {self.master_host}:{self._port} "
                    f"{waited}; pass --master-host an address of this host the pods can reach, and let port "
                    f"{self._port} through")
        return f"worker pods cannot start ({waited}): {why}; fix the worker image or its command"

    def _shape_blocked(self, shape: Resources, pods: dict[str, PodState]) -> str | None:
        """Why pods of ``shape`` would not start either: a pod of this shape or a smaller one is
        stuck unschedulable, or any pod cannot start its container (same image, any shape)."""
        now = time.time()
        for tr in self._tracked.values():
            st = pods.get(tr.name)
            stuck = self._stuck(tr, st, now)
            if stuck is None or stuck[0] == "unreachable":
                continue
            if stuck[0] != "unschedulable":
                return stuck[1]
            if st is not None and st.cpu <= shape.cores + 1e-9 and st.memory_mb <= shape.memory_mb + 1e-9:
                return stuck[1]
        return None

    # -- scale up ------------------------------------------------------------------
    def holding_back(self) -> str | None:
        return self._holding_back

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        self._holding_back = None
        if self.fatal or n <= 0:
            return []
        blocked = self._shape_blocked(shape, self.informer.snapshot() if self.informer else {})
        if blocked:
            log.debug("not asking for %d pod(s): pods of this shape cannot start (%s)", n, blocked)
            self._holding_back = f"pods of this shape cannot start: {blocked}"
            return []
        names = []
        for _ in range(n):
            self._seq += 1
            names.append(f"hta-{self.run_id}-{self._seq}")
        cmd = worker_command(f"{self.master_host or '127.0.0.1'}:{self._port}", disk_mb=int(shape.disk_mb),
                             idle_timeout_s=self.idle_timeout_s)
        gate = asyncio.Semaphore(self.create_concurrency)
        deadline = time.monotonic() + self.api_budget_s

        async def create(name: str) -> str | None:
            pod = worker_pod(name, self.run_id, shape, self.image, cmd, self.host_network)
            async with gate:
                t = self._now()
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
            self._tracked[name] = Tracked(name, shape, t)
            self.lifecycle.record(WorkerRecord(t=round(t, 3), worker=name, event="requested", cores=shape.cores))
            return name

        done = await asyncio.gather(*(create(n) for n in names), return_exceptions=True)
        errors = [d for d in done if isinstance(d, BaseException)]
        if any(isinstance(d, str) for d in done):
            self._creates_failing_since = None
        elif errors and self._creates_failing_since is None:
            self._creates_failing_since = time.time()
        if errors:  # those created are tracked; the next decision asks again for the rest
            self._create_error = str(errors[0])
            raise errors[0]
        return [n for n in done if isinstance(n, str)]

    # -- observation ---------------------------------------------------------------
    def _rel(self, unix: float | None) -> float | None:
        return None if unix is None else unix - self.epoch

    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        pods = self.informer.snapshot() if self.informer else {}
        self._adopt(pods)
        by_host = {w.hostname: w for w in snap.workers}
        listed = {w.address for w in snap.workers}
        running = running_by_worker(snap)
        for tr in self._tracked.values():
            st = pods.get(tr.name)
            if tr.state == "pending":
                w = by_host.get(tr.name) or (by_host.get(st.node) if (st and st.node and self.host_network) else None)
                if w is not None:
                    tr.state, tr.address, tr.connected_at = "connected", w.address, now
                    self.lifecycle.connected()
                    if tr.shape == Resources() or not tr.shape.disk_mb:
                        tr.shape = Resources(cores=w.cores, memory_mb=w.memory_mb, disk_mb=w.disk_mb)
                    tr.unannounced = WorkerRecord(
                        t=round(now, 3), worker=tr.name, event="connected", cores=w.cores,
                        latency_s=None if tr.adopted else round(now - tr.requested_at, 3))
                    tr.announce_by = time.time() + self.phases_wait_s
            if tr.unannounced is not None and (tr.adopted or (st is not None and st.running_at is not None)
                                               or time.time() >= tr.announce_by):
                self._announce(tr, st)
            if tr.state == "connected":
                if tr.address in listed:
                    self.lifecycle.listed(tr.life, running.get(tr.address or "", {}))
                elif st is not None and not (st.finished or st.deleting):
                    # its worker left the master while the pod lives: the node went away, or the worker
                    # stalled; the master runs its tasks again. Delete the pod (it cannot come back
                    # as a stranger) and let the policy replace it.
                    if self.lifecycle.dropped(tr.life, snap.taken_at):
                        self._gone(tr, now, tr.life.missing_since or snap.taken_at, "lost",
                                   "its worker left the master while its pod was still there (node gone or worker "
                                   "stalled): pod deleted and replaced")
                        try:  # its worker is gone already: no grace to give (its node may be gone too)
                            await self._delete(tr.name, grace_s=0)
                        except K8sError as exc:
                            log.warning("could not delete pod %s: %s (deleted at the end)", tr.name, exc)
                        continue
            if tr.state in ("pending", "connected") and st is not None and (st.finished or st.deleting):
                was_pending = tr.state == "pending"
                if st is None or st.deleting or st.gone:
                    why = "its pod was deleted (or its node went away)"
                else:
                    why = f"its pod ended: {st.phase}" + (f", {st.terminated}" if st.terminated else "")
                event = "failed" if (st is not None and st.phase == "Failed") or was_pending else "lost"
                self._gone(tr, now, snap.taken_at, event, why)
                if was_pending and st is not None and st.phase in ("Failed", "Succeeded"):
                    self._start_failed(tr, why)
            elif tr.state == "pending" and st is not None:
                stuck = self._stuck(tr, st, time.time())
                if stuck:
                    self._report(tr.name, *stuck)
                    if tr.stuck_since is None:
                        kind = stuck[0]
                        tr.stuck_since = (st.unschedulable_at if kind == "unschedulable" else
                                          st.running_at if kind == "unreachable" else None) or time.time()
                    tr.stuck = stuck
                else:
                    tr.stuck_since, tr.stuck = None, None
        self._check_blocked()
        return self.lifecycle.flush()

    def _gone(self, tr: Tracked, now: float, at: float, event: str, why: str) -> None:
        self._announce(tr)
        tr.state = "gone"
        rec = self.lifecycle.ended(tr.life, t=now, worker=tr.name, event=event, cores=tr.shape.cores, at=at,
                                   reason=why)
        if rec.tasks_lost:
            log.warning("worker pod %s went away with %d running task(s) (%s): the master runs them again",
                        tr.name, rec.tasks_lost, why)

    def _start_failed(self, tr: Tracked, why: str) -> None:
        def fatal(n: int) -> str:
            return (f"worker pods cannot start: {n} in a row ended before their worker connected; the last "
                    f"({tr.name}): {why}; see kubectl logs {tr.name}, fix the image or pass --master-host an "
                    f"address the pods can reach")

        if self.lifecycle.start_failed(fatal) == 1:
            log.warning("worker pod %s ended before its worker connected (%s); see kubectl logs %s", tr.name, why,
                        tr.name)

    def _check_blocked(self) -> None:
        """``fatal`` when no worker is connected and every pod asked for has been stuck (cannot
        start by itself) for ``start_timeout_s``, or every create has failed that long: no
        worker can ever start."""
        if self.fatal:
            return
        live = [tr for tr in self._tracked.values() if tr.state in ("pending", "connected")]
        failing = self._creates_failing_since
        if failing is not None and not any(tr.state == "connected" for tr in live) \
                and time.time() - failing >= self.start_timeout_s:
            # the API server gone, the namespace deleted, the Role revoked: no pod can be made
            self.lifecycle.give_up(f"no worker pod could be created for {time.time() - failing:.0f}s and no worker "
                                   f"is connected; the last error: {self._create_error}")
            log.info("%s", self.fatal)
            return
        if not live or any(tr.state == "connected" or tr.stuck_since is None for tr in live):
            return
        stuck = [(tr.stuck_since, tr.stuck) for tr in live if tr.stuck_since is not None and tr.stuck is not None]
        since, why = max(stuck, key=lambda s: s[0])
        if time.time() - since >= self.start_timeout_s:
            self.lifecycle.give_up(self._fatal_line(*why))
            log.info("%s", self.fatal)  # the run ends with this line

    def _announce(self, tr: Tracked, st: PodState | None = None) -> None:
        """Emit ``tr``'s held "connected" record, if any, with the phases known by now (``st``:
        its pod's state, read from the informer if not given)."""
        rec, tr.unannounced = tr.unannounced, None
        if rec is None:
            return
        if st is None and self.informer is not None:
            st = self.informer.snapshot().get(tr.name)
        if not tr.adopted and tr.connected_at is not None:
            rec.phases = self._phases(tr, st, tr.connected_at)
        if st is not None and st.node:
            rec.node = st.node  # pods that share a node pay it once (hta.summary.paid_intervals)
        self.lifecycle.record(rec)

    def _phases(self, tr: Tracked, st: PodState | None, now: float) -> dict[str, float]:
        """The phases of ``tr``'s latency, its worker having connected at ``now``: its pod
        ran by then, whatever time the watch saw it at (it can see it up to a second late);
        node + start + connect add up to the latency."""
        if st is None:
            return {}
        # requested ≤ scheduled ≤ running ≤ connected, whatever the clocks say: times the watch
        # saw late come from the pod's status, in whole seconds, and may read a little early
        run = self._rel(st.running_at)
        run = None if run is None else min(max(run, tr.requested_at), now)
        sched = self._rel(st.scheduled_at)
        sched = None if sched is None else min(max(sched, tr.requested_at), run if run is not None else now)
        out = {}
        if sched is not None:
            out["node"] = round(max(0.0, sched - tr.requested_at), 3)
            # how long it was unschedulable: waiting for a node (0: bound at once, it found room)
            unsched = self._rel(st.unschedulable_at)
            out["unschedulable"] = round(max(0.0, sched - unsched), 3) if unsched is not None else 0.0
        if sched is not None and run is not None:
            out["start"] = round(max(0.0, run - sched), 3)
        if run is not None:
            out["connect"] = round(max(0.0, now - run), 3)
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
    async def _delete(self, name: str, *, deadline: float | None = None, grace_s: int | None = None) -> None:
        kwargs = {} if grace_s is None else {"grace_period_seconds": grace_s}
        try:
            await acall(self.core.delete_namespaced_pod, name, self.namespace, deadline=deadline,
                        budget_s=self.api_budget_s, counter=self.counter, what=f"delete pod {name}", **kwargs)
        except K8sError as exc:
            if " 404 " not in f" {exc} ":
                raise

    async def _delete_all(self, trs: list[Tracked]) -> None:
        """Delete these pods at once, within one API budget; a pod whose delete failed keeps its
        state (the next decision tries again) and the first error is raised."""
        deadline = time.monotonic() + self.api_budget_s
        prev = {tr.name: tr.state for tr in trs}
        for tr in trs:
            tr.state = "deleting"
        done = await asyncio.gather(*(self._delete(tr.name, deadline=deadline) for tr in trs),
                                    return_exceptions=True)
        errors = []
        for tr, d in zip(trs, done):
            if isinstance(d, BaseException):
                tr.state = prev[tr.name]
                errors.append(d)
        if errors:
            raise errors[0]

    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.address for w in snap.workers if w.tasks_running > 0}
        picked = [tr for tr in (self._tracked.get(n) for n in ids)
                  if tr is not None and tr.state == "connected" and tr.address not in busy]
        try:
            await self._delete_all(picked)
        finally:
            for tr in picked:
                self._announce(tr)
                if tr.state == "deleting":
                    self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=tr.name, event="drained",
                                                       cores=tr.shape.cores))
        return self.lifecycle.flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        picked = [tr for tr in (self._tracked.get(n) for n in ids)
                  if tr is not None and tr.state not in ("gone", "deleting")]
        try:
            await self._delete_all(picked)
        finally:
            for tr in picked:
                self._announce(tr)
                if tr.state == "deleting":
                    self.lifecycle.ended(tr.life, t=now, worker=tr.name, event="removed", cores=tr.shape.cores,
                                         at=snap.taken_at)
        return self.lifecycle.flush()

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        """Delete every pod of the run (not only the tracked ones) and wait until they are gone:
        at most ``delete_timeout_s``, saying what it waits for; pods still Terminating after
        ``force_delete_after_s`` (their node is gone, or its kubelet does not answer) are deleted
        with grace period 0. An API server that does not answer is one line naming the command
        that deletes what is left; never an exception."""
        try:
            if self.api is not None:
                await self._stop_pods()
        except K8sError as exc:
            log.warning("could not delete the worker pods of this run (%s): delete them with: kubectl delete pods "
                        "-n %s -l %s", exc, self.namespace, self.selector)
        finally:
            if self.informer:
                self.informer.stop()
            pods = self.informer.snapshot() if self.informer else {}
            for tr in self._tracked.values():
                self._announce(tr, pods.get(tr.name))
                if tr.state != "gone":
                    self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=tr.name, event="stopped",
                                                       cores=tr.shape.cores))
                    tr.state = "gone"
        return self.lifecycle.flush()

    async def _list_names(self, budget_s: float) -> list[str]:
        pods = await acall(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector,
                           budget_s=budget_s, counter=self.counter, what="list pods")
        return [p.metadata.name for p in pods.items]

    async def _stop_pods(self) -> None:
        t0 = time.monotonic()
        end = t0 + self.delete_timeout_s
        left = await self._list_names(min(20.0, self.delete_timeout_s))
        if not left:
            return
        deadline = time.monotonic() + 20.0
        await asyncio.gather(*(self._delete(n, deadline=deadline) for n in left), return_exceptions=True)
        said = forced = False
        while left and time.monotonic() < end:
            await asyncio.sleep(0.5)
            try:
                left = await self._list_names(5.0)
            except K8sError as exc:
                if time.monotonic() >= end:
                    raise
                log.debug("listing pods: %s", exc)
                continue
            waited = time.monotonic() - t0
            if left and not said and waited >= 5.0:
                said = True
                log.warning("waiting for %d worker pod(s) to terminate: %s", len(left), ", ".join(left[:5])
                            + (" ..." if len(left) > 5 else ""))
            if left and not forced and waited >= self.force_delete_after_s:
                forced = True
                log.warning("%d worker pod(s) still terminating after %.0fs (their node may be gone): deleting "
                            "them with grace period 0", len(left), waited)
                deadline = time.monotonic() + 10.0
                await asyncio.gather(*(self._delete(n, deadline=deadline, grace_s=0) for n in left),
                                     return_exceptions=True)
        if left:
            log.warning("%d worker pod(s) still present after %.0fs: %s; delete them with: kubectl delete pods "
                        "-n %s -l %s --grace-period=0 --force", len(left), self.delete_timeout_s, ", ".join(left),
                        self.namespace, self.selector)


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


def from_options(options, run) -> KubernetesBackend:
    """The registry's factory (:mod:`hta.backends`): connects and checks access now, so a
    wrong kubeconfig or missing RBAC is one line before anything starts."""
    from k8s.pods import run_id_for

    try:
        backend = KubernetesBackend(
            run_id=run_id_for(run.workflow), epoch=run.epoch, namespace=options.namespace, image=options.image,
            kubeconfig=options.kubeconfig,
            master_host=options.master_host or routable_address(options.kubeconfig, options.host_network),
            host_network=options.host_network, idle_timeout_s=options.idle_timeout_s,
            start_timeout_s=getattr(options, "start_timeout_s", None))
        backend.connect()
    except K8sError as exc:
        raise ValueError(str(exc)) from None
    return backend
