"""The thesis experiment on the real stack, compressed in time, and the simulator checked against it.

For each workload and policy: a fresh local control plane (real kube-apiserver,
etcd, kube-scheduler; kwok nodes of 3 allocatable cores, at most ``--nodes``,
one at the start; the node-provisioner stand-in adds a node for an
unschedulable worker pod after the thesis's preparation latency, 157.4 ±
4.2 s, ÷ k; the pod-process runner starts each worker pod's real ``hta
worker`` → ``work_queue_worker``), and the workload's tasks as a real Makeflow
(``workflows/replay``: each task a real process holding its declared cores
and memory for its runtime ÷ k) run by the real ``makeflow -T wq`` through
``hta makeflow --backend k8s``. The policy runs in the experiment's time
(``POLICY@k``), so its own periods and windows are the rival's real ones.

Then the simulator runs the same task list, seed and cluster, with the
preparation latency this run measured (× k), and the figures are printed side
by side in thesis time (× k): runtime, waste, shortage, node-seconds, real vs
simulated, with the error in %.

Exit code 1 if a run fails (makeflow's exit, outputs not byte-identical to
the expected ones, pods left behind, a timeout), if a calibration error
exceeds ``--max-error`` (10 %), or if a goal line misses.

    .venv/bin/python bench/replay.py                       # 2 workloads × hta, factory, static; k = 10, 20 nodes
    .venv/bin/python bench/replay.py --small               # k = 50, 5 nodes, io-bound, hta (the test suite's)
    .venv/bin/python bench/replay.py --policies hta,keda-3 --workloads blast-3stage
    .venv/bin/python bench/replay.py --node-autoscaler karpenter --policies hta,keda-scaledjob-1,keda-scaledjob-3

``--node-autoscaler karpenter`` runs real Karpenter (its kwok provider) instead of the
stand-in, consolidating empty nodes at once (``consolidateAfter: 0s``, the simulator's
Karpenter world); the simulated run then removes empty nodes as Karpenter's disruption loop
does (``hta.sim.cluster.EmptinessPass``: its 10 s poll and 15 s validation, × k, and the
delete each run measured), in batches. ``keda-scaledjob[-N]`` is the real KEDA ScaledJob (``testcluster/keda.py``: its
operator polls the master's ``/queue_status``, ``scalingStrategy: accurate``, a Job per
waiting N tasks running ``hta worker --tasks N``) while HTA only watches (``--policy
observe``); its simulated twin is the ``keda-job-N:strategy=accurate`` emulation. Every
real run's node·s are read from the cluster's own Node (and NodeClaim) objects
(``testcluster/node_ledger.py``), from each node's launch to its deletion.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "workflows" / "replay"))

from generate import expected_outputs, write_makeflow  # noqa: E402

from hta.accounting import CoreSample, integrate  # noqa: E402
from hta.policies.keda_job import KUBE_API_QPS  # noqa: E402
from hta.policies.registry import make_policy  # noqa: E402
from hta.scaling_log import ScalingLogWriter, read_records  # noqa: E402
from hta.sim.cluster import ClusterModel, EmptinessPass  # noqa: E402
from hta.sim.makeflow_workload import task_spans  # noqa: E402
from hta.sim.oracle import node_seconds_floor, oracle_runtime_s  # noqa: E402
from hta.sim.run import Simulation  # noqa: E402
from hta.sim.workload import load_workload  # noqa: E402
from hta.summary import RunSummary, summarize  # noqa: E402

THESIS_LATENCY_S, THESIS_LATENCY_SD_S = 157.4, 4.2
#: the cluster autoscaler's scale-down-unneeded-time (10 min), the stand-in's empty-node TTL
EMPTY_NODE_TTL_S = 600.0
#: the controller's shortest time between decisions in the real run (× k in thesis time)
MIN_INTERVAL_S = 0.2
NODE_CORES, NODE_MEMORY_MB, WORKER_MEMORY_MB, WORKER_DISK_MB = 3, 16384, 15000, 2000
FIGURES = (("runtime_s", "runtime s"), ("waste_core_s", "waste core·s"), ("shortage_core_s", "shortage core·s"),
           ("node_s", "node·s"))


@dataclass
class Measured:
    """What the real run measured that the simulated cluster takes as given (thesis time)."""

    #: request → scheduled of pods that waited for a new node
    node_s: list[float] = field(default_factory=list)
    #: scheduled → connected (pod start, hta worker, work_queue_worker's handshake)
    pod_start_s: list[float] = field(default_factory=list)
    #: what the real master adds to each task's runtime (dispatch, transfers, the monitor):
    #: the mean over each category's tasks
    task_overhead_s: dict[str, float] = field(default_factory=dict)
    #: a rival's Job: its worker gone → the Job complete, while KEDA still counts it
    job_end_s: float = 0.0
    #: a rival's pod: its worker's last task → the pod terminated, its room on the node held
    pod_exit_s: float = 0.0
    #: a rival's pod: running → its worker's first task (KEDA no longer counts it pending)
    pod_connect_s: float = 0.0
    #: a KEDA poll's reads before its first Job (:mod:`testcluster.keda_log`)
    read_s: float = 0.0
    #: KEDA's API calls, one at a time in its scale loop: a Job created, a Job deleted
    create_call_s: float = 0.0
    delete_call_s: float = 0.0
    #: the ScaledJob's successfulJobsHistoryLimit (KEDA's default)
    history_limit: int = 100


@dataclass
class Run:
    workload: str
    policy: str
    real: RunSummary | None = None
    sim: RunSummary | None = None
    latency_s: list[float] = field(default_factory=list)
    measured: Measured = field(default_factory=Measured)
    #: the real run's waste after makeflow finished (HTA deleting every pod)
    teardown_waste_core_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    #: the real run's nodes as the cluster billed them: (name, launched, deleted), Unix s
    ledger: list[tuple[str, float, float]] = field(default_factory=list)
    node_autoscaler: str = "provisioner"
    #: how long Karpenter kept a node after the run's last worker on it went (real s, mean)
    node_hold_s: float | None = None
    #: how long of that hold the node still took new pods, until Karpenter's disruption
    #: taint (real s, mean; :func:`testcluster.timeline.node_open_s`)
    node_open_s: float | None = None
    #: how long Karpenter took from that taint to the node's deletion (real s, mean;
    #: :func:`testcluster.timeline.node_delete_s`)
    node_delete_s: float | None = None
    #: the simulated loop's: a node's hold and open window, mean, real s
    sim_hold_s: float | None = None
    sim_open_s: float | None = None
    #: references, thesis time: the fewest node·s any policy pays to finish by the real run's
    #: runtime in its world (:func:`hta.sim.oracle.node_seconds_floor`), and the cap's nodes
    #: present from t = 0: its soonest end and the node·s until then
    floor_node_s: float | None = None
    pool_runtime_s: float | None = None
    pool_nodes: int = 0

    def error(self, metric: str, k: float) -> float | None:
        if self.real is None or self.sim is None:
            return None
        real = getattr(self.real, metric) * k
        return (getattr(self.sim, metric) - real) / real * 100 if real else None


#: Karpenter's disruption loop (sigs.k8s.io/karpenter v1.6, pkg/controllers/disruption):
#: ``pollingPeriod`` and ``consolidationTTL``, real seconds; they are Karpenter's constants, not
#: the run's, so the replay's compression does not shorten them
KARPENTER_POLL_S = 10.0
KARPENTER_VALIDATE_S = 15.0
#: its taint → the node's deletion, real s, where no run of the invocation measured it: 5.3 s
#: (a 27.6 s hold, open 22.3 s of it) over BLAST's four runs at k = 10
KARPENTER_DELETE_S = 5.3


def wait_for(cond, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.5)
    return bool(cond())


#: the rival deployed for real (a KEDA ScaledJob), by the name its policy goes by here
REAL_KEDA = "keda-scaledjob"


def keda_tasks(policy: str) -> int | None:
    """``keda-scaledjob[-N]``'s tasks per job (None: another policy)."""
    if policy == REAL_KEDA:
        return 1
    if policy.startswith(REAL_KEDA + "-") and policy[len(REAL_KEDA) + 1:].isdigit():
        return int(policy[len(REAL_KEDA) + 1:])
    return None


def keda_timing(k: float) -> tuple[int, int]:
    """(pollingInterval, the worker's idle timeout), whole seconds as KEDA and work_queue_worker
    take them: KEDA's 30 s and the emulation's 60 s, ÷ k, at least 1."""
    return max(1, round(30.0 / k)), max(1, round(60.0 / k))


def keda_pods_per_node(tasks_per_job: int) -> int:
    """A Job's pod holds the tasks it takes (one-core tasks): a pod of one task is a third
    of a node, as a user sizes it; a pod of three, a node. A bigger pod would take tasks it
    must hand back (``hta worker --tasks``)."""
    return max(1, NODE_CORES // max(1, tasks_per_job))


def sim_policy(policy: str, k: float, nodes: int, m: Measured | None = None) -> str:
    """The policy the simulator runs for a real run's (thesis time): the real ScaledJob's twin
    is the emulation, with the real one's whole-second timings, pod shape, most Jobs (``nodes``
    nodes' pods) and history limit, and what its Jobs measured (``m``): how long they outlived
    their workers and what KEDA's API calls took."""
    n = keda_tasks(policy)
    if n is None:
        return policy
    polling, idle = keda_timing(k)
    pods = keda_pods_per_node(n)
    m = m or Measured()
    return (f"keda-job-{n}:strategy=accurate,packed=false,polling_interval_s={polling * k:g},"
            f"idle_timeout_s={idle * k:g},"
            f"job_end_s={m.job_end_s:.1f},read_s={m.read_s:.2f},create_call_s={m.create_call_s:.2f},"
            f"delete_call_s={m.delete_call_s:.2f},api_qps={KUBE_API_QPS / k:g},"
            f"history_limit={m.history_limit},max_replicas={nodes * pods}[pods={pods}]")


class Cluster:
    """The local control plane of ``testcluster/``, up for one run, down after it."""

    def __init__(self, nodes: int, start_nodes: int, k: float, node_autoscaler: str = "provisioner",
                 keda: bool = False):
        self.state = Path(tempfile.mkdtemp(prefix="hta-replay-cluster-"))
        self.env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(self.state)}
        # Karpenter consolidates an empty node at once (consolidateAfter 0s); the stand-in
        # keeps it the cluster-autoscaler's 10 minutes
        ttl = 0.0 if node_autoscaler == "karpenter" else EMPTY_NODE_TTL_S / k
        self.args = ["--node-cores", str(NODE_CORES), "--node-memory", str(NODE_MEMORY_MB),
                     "--max-nodes", str(nodes), "--start-nodes", str(start_nodes),
                     "--provision-delay", f"{THESIS_LATENCY_S / k:.3f}",
                     "--provision-jitter", f"{THESIS_LATENCY_SD_S / k:.3f}",
                     "--pod-start-delay", "0.2", "--empty-node-ttl", f"{ttl:.1f}",
                     "--node-autoscaler", node_autoscaler, *(["--keda"] if keda else [])]
        self.kubeconfig = ""

    def __enter__(self) -> Cluster:
        up = subprocess.run([str(ROOT / "testcluster" / "cluster"), "up", *self.args], env=self.env,
                            capture_output=True, text=True, timeout=1800)
        if up.returncode != 0:
            raise RuntimeError(f"cluster up failed: {up.stderr.strip()[-500:]}")
        self.kubeconfig = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
        return self

    def api(self):
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        return client.ApiClient(cfg)

    def pods_left(self) -> int:
        from kubernetes import client

        # HTA's pods, whatever their phase (HTA deletes each); a rival's Jobs keep a few
        # finished pods (their history), which hold no node
        core = client.CoreV1Api(self.api())
        return sum(1 for p in core.list_namespaced_pod("default").items
                   if "hta.io/run" in (p.metadata.labels or {}) or (
                       "hta.io/rival" in (p.metadata.labels or {}) and p.status.phase not in ("Succeeded", "Failed")))

    def nodes_gone(self, timeout_s: float) -> bool:
        """Wait until the node autoscaler has removed every node (their node·s end then)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api())
        return wait_for(lambda: not core.list_node().items, timeout_s)

    def keep_logs(self, to: Path) -> None:
        """The control plane's, the autoscalers' and each pod's logs (``pods/``), kept beside
        the run's: a worker that hung is read there after the cluster is gone."""
        to.mkdir(parents=True, exist_ok=True)
        for log in (self.state / "logs").glob("*.log"):
            shutil.copy(log, to / log.name)
        pods = self.state / "logs" / "pods"
        if pods.is_dir():
            shutil.copytree(pods, to / "pods", dirs_exist_ok=True)

    def __exit__(self, *exc: object) -> None:
        subprocess.run([str(ROOT / "testcluster" / "cluster"), "down"], env=self.env, capture_output=True,
                       timeout=300)
        shutil.rmtree(self.state, ignore_errors=True)


def deploy_keda(cluster: Cluster, run: Run, k: float, nodes: int, port: int, wdir: Path) -> None:
    """The real ScaledJob on the master HTA's makeflow will open at ``port`` (kept as
    ``scaledjob.json`` beside the run)."""
    from kubernetes import client

    from hta.node.worker import worker_command
    from testcluster.keda import scaled_job

    polling, idle = keda_timing(k)
    master = f"127.0.0.1:{port}"
    n = keda_tasks(run.policy) or 1
    pods = keda_pods_per_node(n)
    job = scaled_job(run.policy, master, tasks_per_job=n, cores=NODE_CORES / pods,
                     memory_mb=WORKER_MEMORY_MB // pods, image="localhost/hta-worker:latest",
                     command=worker_command(master, disk_mb=WORKER_DISK_MB, idle_timeout_s=idle),
                     polling_s=polling, max_replicas=nodes * pods, strategy="accurate")
    (wdir / "scaledjob.json").write_text(json.dumps(job, indent=1))
    client.CustomObjectsApi(cluster.api()).create_namespaced_custom_object("keda.sh", "v1alpha1", "default",
                                                                          "scaledjobs", job)


def remove_keda(cluster: Cluster, run: Run) -> None:
    from kubernetes import client

    try:
        client.CustomObjectsApi(cluster.api()).delete_namespaced_custom_object("keda.sh", "v1alpha1", "default",
                                                                              "scaledjobs", run.policy)
    except client.exceptions.ApiException:
        pass


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_real(run: Run, k: float, nodes: int, seed: int, out: Path, timeout_s: float,
             node_autoscaler: str = "provisioner") -> None:
    from testcluster.node_ledger import NodeLedger
    from testcluster.timeline import Timeline

    workload = load_workload(run.workload, seed)
    wdir = out / f"{run.workload}-{run.policy}"
    shutil.rmtree(wdir, ignore_errors=True)
    wf = write_makeflow(workload, k, wdir)
    static = run.policy == "static"
    keda = keda_tasks(run.policy) is not None
    t0 = time.time()
    with Cluster(nodes, nodes if static else 1, k, node_autoscaler, keda) as cluster:
        ledger = NodeLedger(cluster.kubeconfig).start()
        timeline = Timeline(cluster.kubeconfig, wdir / "timeline.jsonl",
                            "hta.io/rival" if keda_tasks(run.policy) is not None else "hta.io/run").start()
        port = free_port() if keda else 0
        if keda:  # (KEDA polls the master from now; it finds none until makeflow opens it)
            deploy_keda(cluster, run, k, nodes, port, wdir)
        policy = "observe" if keda else run.policy
        cmd = [str(ROOT / ".venv" / "bin" / "hta"), "makeflow", "--backend", "k8s", "--kubeconfig",
               cluster.kubeconfig, "--host-network", "--port", str(port), "--policy", f"{policy}@{k:g}",
               "--max-workers", str(nodes), "--worker-cores", str(NODE_CORES), "--worker-memory",
               str(WORKER_MEMORY_MB), "--worker-disk", str(WORKER_DISK_MB), "--poll-interval", "0.5",
               "--min-interval", str(MIN_INTERVAL_S), "--max-interval", f"{600 / k:.1f}",
               "--latency-prior", f"{THESIS_LATENCY_S / k:.2f}", str(wf)]
        try:
            r = subprocess.run(cmd, cwd=Path(wf).parent, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.problems.append(f"no end within {timeout_s:.0f} s")
            r = None
        if r is not None and r.returncode != 0:
            run.problems.append(f"hta exited {r.returncode}: {r.stderr.strip().splitlines()[-1:] or ''}")
        if keda:
            remove_keda(cluster, run)
        if not wait_for(lambda: cluster.pods_left() == 0, 120):
            run.problems.append(f"{cluster.pods_left()} pods left")
        # node·s as the cluster billed them: until the node autoscaler removed the run's nodes
        # and their claims (a starting node of the stand-in's stays: it is paid to the run's end)
        gone = (wait_for(ledger.settled, EMPTY_NODE_TTL_S / k + 120) and cluster.nodes_gone(10)
                if node_autoscaler == "karpenter" else True)
        until = time.time()  # (a claim the ledger has not seen go is paid to here, not to after the logs' copy)
        ledger.stop()
        timeline.stop()
        cluster.keep_logs(wdir / "cluster-logs")
        run.ledger = ledger.paid(until)
        (wdir / "nodes.json").write_text(json.dumps(run.ledger))  # (for --reuse)
        if not gone:
            run.problems.append("Karpenter kept nodes after the run")
    run.wall_s = time.time() - t0
    load_real(run, workload, wdir, k)


def load_real(run: Run, workload, wdir: Path, k: float) -> None:
    """Check a real run's outputs and read what it logged."""
    wrong = [name for name, want in expected_outputs(workload).items()
             if not (wdir / name).exists() or (wdir / name).read_bytes() != want]
    if wrong:
        run.problems.append(f"{len(wrong)} outputs missing or wrong (first: {wrong[0]})")
    log = wdir / "Makeflow.scaling.jsonl"
    if not run.ledger and (wdir / "nodes.json").exists():
        run.ledger = [tuple(x) for x in json.loads((wdir / "nodes.json").read_text())]
    if log.exists():
        records, _ = read_records(log)
        whole = summarize(records, str(log))
        run.real = during_the_run(whole, records)
        run.teardown_waste_core_s = whole.waste_core_s - run.real.waste_core_s
        connected = [r for r in records if r.kind == "worker" and r.event == "connected" and r.latency_s is not None]
        run.latency_s = [r.latency_s * k for r in connected]
        run.measured = measure(connected, workload, wdir, k)
        if keda_tasks(run.policy) is not None and (wdir / "timeline.jsonl").exists():
            hold = measure_jobs(run.measured, wdir, k)
            if run.node_autoscaler == "karpenter" and hold is not None:
                run.node_hold_s = hold
        if run.node_autoscaler == "karpenter" and (wdir / "timeline.jsonl").exists():
            from testcluster.timeline import node_delete_s, node_open_s

            run.node_open_s = node_open_s(wdir / "timeline.jsonl")
            run.node_delete_s = node_delete_s(wdir / "timeline.jsonl")
        if run.ledger and run.node_autoscaler == "karpenter":
            # node·s as the cluster billed them, from the run's start to the last node's end
            start = next(r.started_at for r in records if r.kind == "run")
            billed = sum(max(0.0, b - max(a, start)) for _, a, b in run.ledger)
            run.real = run.real.model_copy(update={"node_s": billed})
            run.node_hold_s = node_hold(records, run.ledger, start) or run.node_hold_s  # (KEDA's: from its Jobs)


def node_hold(records: list, ledger: list[tuple[str, float, float]], start: float) -> float | None:
    """Mean real seconds from the run's last worker leaving a node to the node's end."""
    last: dict[str, float] = {}
    node_of: dict[str, str] = {}
    for r in records:
        if r.kind == "worker" and r.node:
            node_of[r.worker] = r.node
        if r.kind == "worker" and r.event in ("drained", "removed", "stopped", "lost", "failed") \
                and r.worker in node_of:
            last[node_of[r.worker]] = max(last.get(node_of[r.worker], 0.0), start + r.t)
    holds = [end - last[name] for name, _, end in ledger if name in last and end >= last[name]]
    return statistics.fmean(holds) if holds else None


def during_the_run(summary: RunSummary, records: list) -> RunSummary:
    """Waste until makeflow finished: what follows (deleting every pod, waiting until they
    are gone) is teardown, reported apart (``teardown_waste_core_s``); the simulated runs
    end at the workflow's end."""
    obs = [r for r in records if r.kind == "observation" and r.t <= summary.runtime_s]
    during = integrate((CoreSample(o.t, o.supply_cores, o.in_use_cores, o.demand_cores, o.idle_cores) for o in obs),
                       summary.runtime_s)
    return summary.model_copy(update={"waste_core_s": during.waste_core_s,
                                      "idle_waste_core_s": during.idle_waste_core_s})


def measure(connected: list, workload, wdir: Path, k: float) -> Measured:
    """The cluster's and the master's own delays in this run, in thesis time (× k)."""
    m = Measured()
    lat = provisioned([r.latency_s for r in connected])
    for r in connected:
        start = r.phases.get("start", 0.0) + r.phases.get("connect", 0.0)
        m.pod_start_s.append(start * k)
        if r.latency_s in lat and "node" in r.phases:
            m.node_s.append(r.phases["node"] * k)
    by_category: dict[str, list[float]] = {}
    for node, span in task_spans(wdir / "Makeflow.wqlog.tr", wdir / "Makeflow.makeflowlog").items():
        t = workload.tasks[node]  # makeflow numbers rules in file order, the workload's order
        by_category.setdefault(t.category, []).append(max(0.0, span * k - t.runtime_s))
    m.task_overhead_s = {c: statistics.fmean(v) for c, v in by_category.items()}
    return m


def measure_jobs(m: Measured, wdir: Path, k: float) -> float | None:
    """A KEDA run's own costs, from its Jobs and pods (:func:`testcluster.timeline.job_costs`;
    its workers are not HTA's, so HTA's records name no phases of theirs), in thesis time;
    returns how long the node autoscaler kept a node after its last pod (real s)."""
    from testcluster.keda_log import poll_costs
    from testcluster.timeline import job_costs, worker_addresses

    pods = wdir / "cluster-logs" / "pods"
    c = job_costs(wdir / "timeline.jsonl", wdir / "Makeflow.wqlog.tr", worker_addresses(pods) if pods.is_dir() else None)
    m.node_s = [x * k for x in c.node_wait_s]
    m.pod_start_s = [c.pod_start_s * k] if c.pod_start_s is not None else []
    m.job_end_s = (c.job_end_s or 0.0) * k
    m.pod_exit_s = (c.pod_end_s or 0.0) * k
    m.pod_connect_s = (c.connect_s or 0.0) * k
    m.create_call_s, m.delete_call_s = (c.create_call_s or 0.0) * k, (c.delete_call_s or 0.0) * k
    log = wdir / "cluster-logs" / "keda-operator.log"
    if log.exists():  # (the operator's own account of its polls, where it was kept)
        polls = poll_costs(log)
        m.read_s = (polls.read_s or 0.0) * k
        if polls.create_call_s is not None:
            m.create_call_s = polls.create_call_s * k
    spec = wdir / "scaledjob.json"
    if spec.exists():
        m.history_limit = json.loads(spec.read_text())["spec"].get("successfulJobsHistoryLimit", m.history_limit)
    return c.node_hold_s


def provisioned(latencies: list[float]) -> list[float]:
    """The latencies of pods that waited for a new node: a pod that found room on a node
    already there (the starting one) arrived in seconds and is not the cluster's L."""
    if not latencies:
        return []
    med = statistics.median(latencies)
    return [x for x in latencies if x >= 0.5 * med]


def run_sim(run: Run, nodes: int, seed: int, out: Path, k: float, delete_s: float | None = None) -> None:
    """The simulator on the same tasks and cluster, with the delays the real run measured:
    nodes' preparation, pods' start, the master's per-task overhead; like the real cluster,
    the starting nodes have no worker until one is asked for, and a node whose worker left
    stays for the stand-in's empty-node time. Under Karpenter there is no starting node, and
    empty nodes go as Karpenter's disruption loop removes them, its delete taking
    ``delete_s`` (real seconds, measured), paid."""
    workload = load_workload(run.workload, seed)
    workload.declared = True  # as the generated Makeflow declares CORES and MEMORY
    m = run.measured
    mean = statistics.fmean(m.node_s) if m.node_s else THESIS_LATENCY_S
    sd = statistics.stdev(m.node_s) if len(m.node_s) > 1 else THESIS_LATENCY_SD_S
    static = run.policy == "static"
    karpenter = run.node_autoscaler == "karpenter"
    emptiness = EmptinessPass(poll_s=KARPENTER_POLL_S * k, validate_s=KARPENTER_VALIDATE_S * k,
                              delete_s=(delete_s if delete_s is not None else KARPENTER_DELETE_S) * k)
    cluster = ClusterModel(max_nodes=nodes, start_nodes=0 if karpenter else nodes if static else 1, start_workers=0,
                           node_cores=NODE_CORES, node_memory_mb=WORKER_MEMORY_MB, latency_mean_s=mean,
                           latency_sd_s=sd, pod_start_s=statistics.median(m.pod_start_s) if m.pod_start_s else 0.0,
                           empty_node_ttl_s=0.0 if karpenter else EMPTY_NODE_TTL_S,
                           emptiness_pass=emptiness if karpenter else None, task_overhead_by_category_s=m.task_overhead_s,
                           pod_exit_s=m.pod_exit_s, pod_connect_s=m.pod_connect_s,
                           min_interval_s=MIN_INTERVAL_S * k, teardown_s=0.0)
    path = out / f"{run.workload}-{run.policy}.sim.jsonl"
    sim = Simulation(workload, make_policy(sim_policy(run.policy, k, nodes, m)), cluster, seed=seed,
                     log=ScalingLogWriter(path), latency_prior_s=THESIS_LATENCY_S)  # (the real run's, × k)
    run.sim = sim.run()
    if run.real is not None:
        run.floor_node_s = node_seconds_floor(workload, cluster).at(run.real.runtime_s * k)
        run.pool_runtime_s = oracle_runtime_s(workload, cluster.model_copy(update={"start_nodes": nodes}))
        run.pool_nodes = nodes
    if d := sim.world.cluster.disruptions:
        run.sim_hold_s = statistics.fmean(gone - empty for empty, _, gone in d) / k
        run.sim_open_s = statistics.fmean(taint - empty for empty, taint, _ in d) / k
    # under the stand-in the real run's node·s end with each node's last pod (HTA's records:
    # the stand-in's 10-minute hold is not the experiment's), and the simulated run is read
    # alike; under Karpenter both count each node until it went
    records, _ = read_records(path)
    if not karpenter and any(r.kind == "node" for r in records):
        run.sim = summarize([r for r in records if r.kind != "node"], str(path))


#: waste this small a part of the core·s paid is matched within it, not within 10 % of itself:
#: real waste moves by hundreds of core·s between runs of one day (docs/replay.md)
SMALL_WASTE = 0.02


def small_waste(r: Run, metric: str, k: float) -> bool:
    """Real and simulated waste within 2 % of the core·s the real run paid."""
    if metric != "waste_core_s" or r.real is None or r.sim is None:
        return False
    paid = r.real.node_s * k * NODE_CORES
    return paid > 0 and abs(r.sim.waste_core_s - r.real.waste_core_s * k) <= SMALL_WASTE * paid


def print_table(runs: list[Run], k: float, max_error: float) -> list[str]:
    misses = []
    print(f"\nreal runs (× k = {k:g}, thesis time) vs the simulator on the same tasks, seed and measured latency")
    head = f"{'workload':13s} {'policy':8s} " + " ".join(f"{label:>31s}" for _, label in FIGURES)
    print(head)
    print(f"{'':23s}" + " ".join(f"{'real':>10s} {'sim':>10s} {'err':>9s}" for _ in FIGURES))
    for r in runs:
        cells = []
        for metric, label in FIGURES:
            if r.real is None or r.sim is None:
                cells.append(f"{'—':>31s}")
                continue
            err = r.error(metric, k)
            cells.append(f"{getattr(r.real, metric) * k:10,.0f} {getattr(r.sim, metric):10,.0f} "
                         f"{'' if err is None else f'{err:+8.1f}%':>9s}")
            if err is not None and abs(err) > max_error and not small_waste(r, metric, k):
                misses.append(f"{r.workload} {r.policy} {label}: {err:+.1f} % (goal within ±{max_error:g} %)")
        print(f"{r.workload:13s} {r.policy:8s} " + " ".join(cells))
        lat = provisioned(r.latency_s)
        m = r.measured
        if lat:
            print(f"{'':23s}measured (× k): L mean {statistics.fmean(lat):.1f} s over {len(lat)} pods on new nodes "
                  f"(node {statistics.fmean(m.node_s) if m.node_s else 0:.1f} s), pod start "
                  f"{statistics.median(m.pod_start_s) if m.pod_start_s else 0:.1f} s, master's overhead per task "
                  + ", ".join(f"{c} {v:.1f} s" for c, v in sorted(m.task_overhead_s.items()))
                  + (f"; the real run took {r.wall_s:.0f} s" if r.wall_s else ""))
            print(f"{'':23s}real waste after makeflow finished (HTA deleting the pods): "
                  f"{r.teardown_waste_core_s * k:,.0f} core·s, not in the table")
        elif m.node_s or m.pod_start_s:  # a rival's Jobs, read from the cluster's objects
            wait = statistics.median(m.node_s) if m.node_s else 0.0
            start = statistics.median(m.pod_start_s) if m.pod_start_s else 0.0
            print(f"{'':23s}measured (× k) from the Jobs: node wait {wait:.1f} s over {len(m.node_s)} pods on new "
                  f"nodes, pod start {start:.1f} s ({m.pod_connect_s:.1f} s of it running), a pod outlives its last task "
                  f"{m.pod_exit_s:.1f} s and its Job "
                  f"{m.job_end_s:.1f} s, a KEDA poll reads {m.read_s:.1f} s, creates a "
                  f"Job in {m.create_call_s:.1f} s and deletes one in {m.delete_call_s:.1f} s (history "
                  f"{m.history_limit}), master's overhead per task "
                  + ", ".join(f"{c} {v:.1f} s" for c, v in sorted(m.task_overhead_s.items())))
        if r.real is not None and r.floor_node_s is not None and r.pool_runtime_s is not None:
            floor = (f"{r.floor_node_s:,.0f} (real {r.real.node_s * k / r.floor_node_s:.2f}×)"
                     if math.isfinite(r.floor_node_s) and r.floor_node_s > 0 else "— (faster than any policy can be)")
            print(f"{'':23s}references (× k): node·s floor at its real runtime {floor}; its {r.pool_nodes} nodes "
                  f"from t = 0 end no sooner than {r.pool_runtime_s:,.0f} s, paying at least "
                  f"{r.pool_nodes * r.pool_runtime_s:,.0f} node·s")
        for p in r.problems:
            misses.append(f"{r.workload} {r.policy}: {p}")
            print(f"{'':23s}FAILED: {p}")
    return misses


def goals(runs: list[Run]) -> list[str]:
    """HTA ahead of the factory and the static cluster on waste at ≤ 1.05 × their runtime, and
    beside the real KEDA ScaledJob at ≤ 1.02 × the faster setting's runtime and ≤ the
    cheaper's node·s, in the real runs."""
    misses: list[str] = []
    by = {(r.workload, r.policy): r.real for r in runs if r.real is not None}

    def line(wl: str, what: str, ratio: float, bound: float, strict: bool, miss: str) -> None:
        ok = ratio < bound if strict else ratio <= bound
        print(f"  {'PASS' if ok else 'MISS'}  {wl} HTA {what}: {ratio:.3f} (goal {'<' if strict else '≤'} {bound:g})")
        misses.extend([] if ok else [f"{wl} {miss}"])
    print("\ngoals, real runs:")
    for (wl, pol), hta in sorted(by.items()):
        if pol != "hta":
            continue
        for rival in ("factory", "static"):
            other = by.get((wl, rival))
            if other is not None:
                line(wl, f"waste / {rival} waste", hta.waste_core_s / other.waste_core_s, 1, True, f"waste vs {rival}")
                line(wl, f"runtime / {rival} runtime", hta.runtime_s / other.runtime_s, 1.05, False,
                     f"runtime vs {rival}")
        keda = {pol: r for (w, pol), r in by.items() if w == wl and keda_tasks(pol) is not None}
        if keda:
            fast = min(keda, key=lambda p: keda[p].runtime_s)
            cheap = min(keda, key=lambda p: keda[p].node_s)
            line(wl, f"runtime / the faster KEDA's ({fast})", hta.runtime_s / keda[fast].runtime_s, 1.02, False,
                 f"runtime vs {fast}")
            line(wl, f"node·s / the cheaper KEDA's ({cheap})", hta.node_s / keda[cheap].node_s, 1, False,
                 f"node·s vs {cheap}")
    return misses


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the thesis experiment on the real stack, and the simulator against it")
    ap.add_argument("--k", type=float, default=10.0, help="time compression (default 10)")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--workloads", default="blast-3stage,io-bound")
    ap.add_argument("--policies", default="hta,factory,static")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-error", type=float, default=10.0, help="calibration goal, %% (default 10)")
    ap.add_argument("--small", action="store_true", help="k = 50, 5 nodes, io-bound, hta only")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--reuse", action="store_true", help="take the real runs already in --out; simulate again")
    ap.add_argument("--node-autoscaler", choices=["provisioner", "karpenter"], default="provisioner",
                    help="the test cluster's node autoscaler: the stand-in (default) or real Karpenter")
    a = ap.parse_args(argv)
    if a.small:
        a.k, a.nodes, a.workloads, a.policies = 50.0, 5, "io-bound", "hta"
    try:  # bad names are one line, before any cluster starts
        for wl in a.workloads.split(","):
            load_workload(wl, a.seed)
        for pol in a.policies.split(","):
            make_policy(f"{sim_policy(pol, a.k, a.nodes)}@{a.k:g}")
            if keda_tasks(pol) is not None and a.node_autoscaler != "karpenter":
                raise ValueError(f"{pol} runs under real Karpenter: add --node-autoscaler karpenter")
    except ValueError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="hta-replay-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for wl in a.workloads.split(","):
        for pol in a.policies.split(","):
            run = Run(wl, pol, node_autoscaler=a.node_autoscaler)
            bound = 3 * sum(t.runtime_s for t in load_workload(wl, a.seed).tasks) / (a.nodes * NODE_CORES) / a.k
            print(f"{wl} / {pol}: real run on {a.nodes} nodes, k = {a.k:g} ...", flush=True)
            wdir = out / f"{wl}-{pol}"
            if a.reuse and (wdir / "Makeflow.scaling.jsonl").exists():
                load_real(run, load_workload(wl, a.seed), wdir, a.k)  # the real run is already there
            else:
                run_real(run, a.k, a.nodes, a.seed, out, timeout_s=max(300.0, bound + 600 / a.k),
                         node_autoscaler=a.node_autoscaler)
            runs.append(run)
    # Karpenter's delete as this invocation measured it, the world's for every run (its hold and
    # open window are printed: the simulated loop gives its own); a pod's start (HTA's runs read
    # it from their records, KEDA's from their Jobs) where a run measured none
    holds = [r.node_hold_s for r in runs if r.node_hold_s is not None]
    opens = [r.node_open_s for r in runs if r.node_open_s is not None]
    deletes = [r.node_delete_s for r in runs if r.node_delete_s is not None]
    starts = [x for r in runs for x in r.measured.pod_start_s]
    for run in runs:
        if run.real is not None:
            if not run.measured.pod_start_s and starts:
                run.measured.pod_start_s = list(starts)
            run_sim(run, a.nodes, a.seed, out, a.k, statistics.fmean(deletes) if deletes else None)
    if holds:
        print(f"Karpenter kept a node {statistics.fmean(holds):.1f} s (real) after its last worker went, "
              f"mean over {len(holds)} runs" + (f"; it took new pods for the first {statistics.fmean(opens):.1f} s"
                                                 if opens else "")
              + (f"; its delete took {statistics.fmean(deletes):.1f} s" if deletes else ""))
        sim_holds = [r.sim_hold_s for r in runs if r.sim_hold_s is not None]
        sim_opens = [r.sim_open_s for r in runs if r.sim_open_s is not None]
        if sim_holds:
            print(f"the simulated disruption loop kept one {statistics.fmean(sim_holds):.1f} s, open for the first "
                  f"{statistics.fmean(sim_opens):.1f} s (real s, mean over the same runs)")
    misses = print_table(runs, a.k, a.max_error) + goals(runs)
    if a.json:
        a.json.write_text(json.dumps([{"workload": r.workload, "policy": r.policy, "k": a.k,
                                       "real": r.real.model_dump() if r.real else None,
                                       "sim": r.sim.model_dump() if r.sim else None,
                                       "teardown_waste_core_s": r.teardown_waste_core_s * a.k,
                                       "latency_s": r.latency_s, "problems": r.problems} for r in runs], indent=1))
    print(f"\nruns and scaling logs: {out}/")
    if misses:
        print(f"{len(misses)} goal(s) missed: " + "; ".join(misses))
        return 1
    print("every run complete and every goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
