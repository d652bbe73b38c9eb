"""What the cluster did during a real run, object by object, as the harness saw it: each
worker pod's creation, binding, start and end, each Job's creation and completion, each
node's launch, the moment Karpenter marked it for disruption, and its deletion.

A rival's pods name no phases in HTA's records (they are not HTA's), so what a KEDA Job
costs between KEDA deciding it and its worker connecting can only be read here. Each line
of the JSON Lines file is ``{"t": unix seconds seen, "kind": "pod"|"job"|"node", "name",
"event"}`` (a pod's line names its node too, once bound): times are when the watch saw the
change (the objects' own stamps are whole seconds, too coarse at k = 10).
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, config

from k8s.watch import list_and_watch

#: Karpenter's taint on a node it has chosen to disrupt: no new pod lands there
DISRUPTED_TAINT = "karpenter.sh/disrupted"


def pod_state(pod: client.V1Pod) -> str:
    """created, bound, running, succeeded, failed or deleting: the pod's furthest state."""
    if pod.metadata.deletion_timestamp:
        return "deleting"
    phase = (pod.status.phase or "").lower() if pod.status else ""
    if phase in ("running", "succeeded", "failed"):
        return phase
    return "bound" if pod.spec.node_name else "created"


def job_state(job: client.V1Job) -> str:
    for c in (job.status.conditions or []) if job.status else []:
        if c.status == "True" and c.type in ("Complete", "Failed"):
            return c.type.lower()
    return "active" if job.status and job.status.active else "created"


def node_state(node: client.V1Node) -> str:
    taints = {t.key for t in node.spec.taints or []} if node.spec else set()
    return "disrupted" if DISRUPTED_TAINT in taints else "registered"


class Timeline:
    """Watches pods (``selector``), Jobs and nodes from :meth:`start` until :meth:`stop`,
    writing one line per change of state to ``path``."""

    def __init__(self, kubeconfig: str, path: Path, selector: str = "hta.io/rival"):
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        api = client.ApiClient(cfg)
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)
        self.selector = selector
        self.out = path.open("a")
        self.seen: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def _note(self, kind: str, name: str, state: str, node: str = "") -> None:
        with self.lock:
            if self.out.closed or self.seen.get((kind, name)) == state:
                return
            self.seen[(kind, name)] = state
            line = {"t": time.time(), "kind": kind, "name": name, "event": state, **({"node": node} if node else {})}
            self.out.write(json.dumps(line) + "\n")

    def _watch(self, kind: str, list_fn, state, selector: str) -> None:
        def on_event(ev: str, obj) -> None:
            node = obj.spec.node_name or "" if kind == "pod" else ""
            self._note(kind, obj.metadata.name, "deleted" if ev == "DELETED" else state(obj), node)

        list_and_watch(list_fn, selector=selector, on_sync=lambda objs: [on_event("ADDED", o) for o in objs],
                       on_event=on_event, stop=self.stop_event)

    def start(self) -> Timeline:
        for args in (("pod", self.core.list_pod_for_all_namespaces, pod_state, self.selector),
                     ("job", self.batch.list_job_for_all_namespaces, job_state, ""),
                     ("node", self.core.list_node, node_state, "")):
            self.threads.append(threading.Thread(target=self._watch, args=args, daemon=True))
            self.threads[-1].start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(5)
        with self.lock:
            self.out.close()


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class JobCosts:
    """What a rival's Jobs cost beyond their tasks, in real seconds, read from a run's
    timeline and its master's transactions log.

    A Job's worker is not HTA's: which connection is which pod's is read from the pods' own
    logs (``work_queue_worker`` prints the local address it connected from, the worker's
    name in the master's log: :func:`worker_addresses`). Without them the lags between
    stages are read in order (the i-th pod to run against the i-th worker to get its first
    task), which holds for their means only while pods go through each stage alike: at three
    tasks a Job it gave a Job outliving its last task by −10 s.
    Means, not medians: each Job pays every stage in turn, so their sum is what a slot
    loses per Job. A simulated worker takes its first task the moment it connects and
    leaves the moment its last one ends, so the real worker's handshake and leaving are
    counted in these stages."""

    #: pods that waited for a new node: created → bound (the node autoscaler's batch, the
    #: node's launch and registration)
    node_wait_s: list[float] = field(default_factory=list)
    #: pods on a node already there: their Job created → the worker's first task (the Job
    #: controller making the pod, the scheduler, the pod's start, ``hta worker``'s start,
    #: its connection and first dispatch)
    pod_start_s: float | None = None
    #: the worker's last task ended → its Job complete (the worker leaving, the pod's exit,
    #: the Job controller): while KEDA still counts the Job
    job_end_s: float | None = None
    #: a pod running → its worker's first task (``hta worker``'s start, the worker's
    #: connection): KEDA counts the Job as running meanwhile (paired only)
    connect_s: float | None = None
    #: the worker's last task ended → its pod terminated (the worker leaving, the container's
    #: exit, the kubelet's report): the pod holds its room on the node meanwhile (paired only)
    pod_end_s: float | None = None
    #: one Job created, and one deleted, by KEDA, which makes these calls one after another
    #: in its scale loop: the mean spacing of consecutive ones within a poll, while the
    #: workflow ran
    create_call_s: float | None = None
    delete_call_s: float | None = None
    #: a node's last pod ended → the node deleted (how long the node autoscaler kept it), mean
    node_hold_s: float | None = None


def node_open_s(timeline: Path) -> float | None:
    """How long a node stayed open to new pods once its last pod went (real s, the mean over
    the nodes Karpenter disrupted): from that pod's end (it exited, or its deletion began) to
    Karpenter's disruption taint, after which no pod lands there while the node is drained
    and deleted (the rest of its hold, paid)."""
    pod_end: dict[str, float] = {}
    node_of: dict[str, str] = {}
    disrupted: dict[str, float] = {}
    for e in read(timeline):
        if e["kind"] == "pod":
            if e.get("node"):
                node_of[e["name"]] = e["node"]
            if e["event"] in ("succeeded", "failed", "deleting", "deleted"):
                pod_end.setdefault(e["name"], e["t"])
        elif e["kind"] == "node" and e["event"] == "disrupted":
            disrupted.setdefault(e["name"], e["t"])
    gaps = []
    for node, t in disrupted.items():
        ends = [pod_end.get(pod) for pod, on in node_of.items() if on == node]
        if ends and all(end is not None and end <= t for end in ends):  # (empty when tainted)
            gaps.append(t - max(e for e in ends if e is not None))
    return statistics.fmean(gaps) if gaps else None


def node_delete_s(timeline: Path) -> float | None:
    """How long Karpenter took to delete a node it had tainted (real s, the mean over the
    nodes it disrupted): the drain, the provider's delete and the finalizers, paid."""
    disrupted: dict[str, float] = {}
    deleted: dict[str, float] = {}
    for e in read(timeline):
        if e["kind"] == "node" and e["event"] in ("disrupted", "deleted"):
            (disrupted if e["event"] == "disrupted" else deleted).setdefault(e["name"], e["t"])
    lags = [deleted[n] - t for n, t in disrupted.items() if n in deleted and deleted[n] >= t]
    return statistics.fmean(lags) if lags else None


def _ordered_lag(earlier: list[float], later: list[float]) -> float | None:
    n = min(len(earlier), len(later))
    return statistics.fmean(b - a for a, b in zip(sorted(earlier)[:n], sorted(later)[:n])) if n else None


def worker_addresses(pod_logs: Path) -> dict[str, str]:
    """Pod name → the address its worker connected from (``connected to manager H:P via
    local address A:Q``), from the pod runner's logs (``<namespace>_<pod>.log``)."""
    out: dict[str, str] = {}
    for log in sorted(Path(pod_logs).glob("*_*.log")):
        m = re.search(r"via local address (\S+)", log.read_text(errors="replace"))
        if m:
            out[log.stem.split("_", 1)[1]] = m.group(1)
    return out


def job_costs(timeline: Path, transactions: Path, addresses: dict[str, str] | None = None) -> JobCosts:
    """``addresses``: pod name → its worker's address (:func:`worker_addresses`), to pair
    each pod with its own worker; without, stages are paired in order."""
    from workqueue_bridge.transactions import TaskEvent, WorkerEvent, parse_line

    first: dict[tuple[str, str, str], float] = {}
    node_of: dict[str, str] = {}
    for e in read(timeline):
        first.setdefault((e["kind"], e["name"], e["event"]), e["t"])
        if e.get("node"):
            node_of[e["name"]] = e["node"]
    connected: list[float] = []
    first_task: dict[str, float] = {}  # by worker address
    last_end: dict[str, float] = {}
    for line in transactions.read_text().splitlines():
        try:
            ev = parse_line(line)
        except ValueError:
            continue
        if isinstance(ev, WorkerEvent) and ev.connected:
            connected.append(ev.time)
        elif isinstance(ev, TaskEvent) and ev.worker and ev.state == "RUNNING":
            first_task.setdefault(ev.worker, ev.time)
        elif isinstance(ev, TaskEvent) and ev.worker and ev.state == "WAITING_RETRIEVAL":
            last_end[ev.worker] = ev.time
    costs = JobCosts()
    if addresses:
        return _paired(costs, first, node_of, addresses, first_task, last_end, connected)
    running, at_once = [], []
    for (kind, name, event), created in first.items():
        if kind != "pod" or event != "created":
            continue
        bound = first.get(("pod", name, "bound"), first.get(("pod", name, "running")))
        run = first.get(("pod", name, "running"))
        if bound is None or run is None:
            continue
        running.append(run)
        waited = _waited(first, node_of, name, created, bound)
        (costs.node_wait_s if waited else at_once).append((bound - created) if waited
                                                           else (run - _job_created(first, name, created)))
    start_lag = _ordered_lag(running, list(first_task.values()))
    if at_once and start_lag is not None:
        costs.pod_start_s = statistics.fmean(at_once) + start_lag
    complete = [t for (kind, _, event), t in first.items() if kind == "job" and event == "complete"]
    costs.job_end_s = _ordered_lag(list(last_end.values()), complete)
    return _cluster_costs(costs, first, node_of, connected)


def _job_created(first: dict[tuple[str, str, str], float], pod: str, pod_created: float) -> float:
    """When the Job of ``pod`` (named ``<job>-<suffix>``) was created: KEDA's call, which the
    Job controller answers with the pod (seconds later on a loaded control plane)."""
    return min(first.get(("job", pod.rsplit("-", 1)[0], "created"), pod_created), pod_created)


def _waited(first: dict[tuple[str, str, str], float], node_of: dict[str, str], pod: str, created: float,
            bound: float) -> bool:
    registered = first.get(("node", node_of.get(pod, ""), "registered"))
    return registered > created if registered is not None else bound - created > NODE_WAIT_GUESS_S


def _paired(costs: JobCosts, first: dict[tuple[str, str, str], float], node_of: dict[str, str],
            addresses: dict[str, str], first_task: dict[str, float], last_end: dict[str, float],
            connected: list[float]) -> JobCosts:
    """The per-Job stages, each pod with its own worker (a pod named ``<job>-<suffix>``)."""
    starts, ends, exits, connects = [], [], [], []
    for (kind, name, event), created in first.items():
        if kind != "pod" or event != "created":
            continue
        bound = first.get(("pod", name, "bound"), first.get(("pod", name, "running")))
        if bound is None:
            continue
        if _waited(first, node_of, name, created, bound):
            costs.node_wait_s.append(bound - created)
        elif addresses.get(name) in first_task:
            starts.append(first_task[addresses[name]] - _job_created(first, name, created))
        done = first.get(("job", name.rsplit("-", 1)[0], "complete"))
        if done is not None and addresses.get(name) in last_end:
            ends.append(done - last_end[addresses[name]])
        running = first.get(("pod", name, "running"))
        if running is not None and addresses.get(name) in first_task:
            connects.append(first_task[addresses[name]] - running)
        exited = first.get(("pod", name, "succeeded"))
        if exited is not None and addresses.get(name) in last_end:
            exits.append(exited - last_end[addresses[name]])
    costs.pod_start_s = statistics.fmean(starts) if starts else None
    costs.job_end_s = statistics.fmean(ends) if ends else None
    costs.pod_end_s = statistics.fmean(exits) if exits else None
    costs.connect_s = statistics.fmean(connects) if connects else None
    return _cluster_costs(costs, first, node_of, connected)


def _cluster_costs(costs: JobCosts, first: dict[tuple[str, str, str], float], node_of: dict[str, str],
                   connected: list[float]) -> JobCosts:
    """What the node autoscaler and KEDA's own calls cost (the same however pods are paired)."""
    last_pod: dict[str, float] = {}
    for (kind, name, event), t in first.items():
        if kind == "pod" and event in ("succeeded", "failed") and node_of.get(name):
            last_pod[node_of[name]] = max(last_pod.get(node_of[name], 0.0), t)
    holds = [first[("node", n, "deleted")] - t for n, t in last_pod.items() if ("node", n, "deleted") in first]
    costs.node_hold_s = statistics.fmean(holds) if holds else None
    until = max(connected, default=0.0)  # (after it, the ScaledJob's removal deletes every Job at once)
    for event, attr in (("created", "create_call_s"), ("deleted", "delete_call_s")):
        times = sorted(t for (kind, _, ev), t in first.items() if kind == "job" and ev == event and t <= until)
        spacing = [b - a for a, b in zip(times, times[1:]) if b - a < SAME_POLL_S]
        setattr(costs, attr, statistics.fmean(spacing) if spacing else None)
    return costs


#: consecutive Job creations or deletions closer than this belong to one poll of KEDA's
SAME_POLL_S = 2.0


#: without node names (an older timeline), a pod bound this long after its creation waited for a node
NODE_WAIT_GUESS_S = 3.0
