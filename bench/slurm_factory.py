"""HTA against CCTools' own ``work_queue_factory -T slurm`` on the same elastic Slurm cluster,
and the simulator's prediction of both beside them.

The cluster is the local Slurm test cluster (``testcluster/slurm``: Debian's slurmctld, slurmd
and munge; ``--static`` nodes always on and ``--cloud`` ``State=CLOUD`` nodes of 3 cores that
Slurm's power saving boots after the thesis's 157.4 ± 4.2 s ÷ k and powers off after 600 s ÷ k
idle), brought up afresh for each run. The workload is the replay workload
(``workflows/replay``: the simulator's ``io-bound`` or ``blast-3stage`` task list, every
task a real process holding its declared core for its runtime ÷ k), run by the real
``makeflow -T wq``:

1. **HTA**: ``hta makeflow --backend slurm --worker-cores 3 --max-workers N`` (the ``hta``
   policy, as a user runs it; it cuts node-sized workers to what the tasks measured);
2. **the real factory**: ``hta makeflow --policy observe --port P`` (HTA only watches the
   master and writes its scaling log) and beside it ``work_queue_factory -T slurm
   127.0.0.1 P --max-workers N --cores 3 --disk D --tasks-per-worker 3 -t T`` (T = its
   default 300 s ÷ k, compressed like every other period), in its own session and
   scratch folder; at the end its process group is killed and every job it left is
   cancelled. No ``--memory``: Debian's CCTools 8.0 then writes ``sbatch --mem=M M ...``
   (a stray word sbatch takes for the script: every submission fails), so each factory job
   gets Slurm's default, the node's memory, which a node-sized worker has anyway.

Runtime, waste and shortage come from each run's scaling log (HTA's accounting, the same for
both); node·s from Slurm's own power saving: each cloud node from the moment slurmctld asked
its ResumeProgram to boot it until its SuspendProgram powered it off (``power.log``), and the
static nodes all along, counted until the workflow ended and, apart, until every node was off.
(``sacct`` needs slurmdbd and a database; the power-state times are the cloud's bill.)

Then the simulator runs the same task list (runtimes ÷ k) on the same cluster with what HTA's
run measured: the latency of a worker on a booted node (pending + resume), a job's start
(its script → its worker connected), the master's overhead per task, the idle time before a
node powers off; ``hta`` and the factory emulation (``factory:...``, checked against the real
factory by bench/factory_check.py) each predicted beside its real run.

``--dial`` adds a third real run: HTA with ``--deadline`` at the factory's real runtime and
``--runtime-prior`` its own first run's scaling log, so the dial sizes the pool from the start
(its asymmetry, said beside the figure: HTA knows its tasks' runtimes from a run before, and
the factory's runtime as its deadline). ``--tasks N`` runs the workload's first N tasks (a
workload without dependencies), so that a partition the cap binds for neither fits here.

Exit 1 if a run fails (exit code, outputs not byte-identical, a Slurm job left), if a
prediction misses by more than ``--max-error`` (10 %), or if HTA (with ``--dial``, HTA at the
deadline) does not pay fewer node·s than the factory at ≤ 1.02 × its runtime.

    .venv/bin/python bench/slurm_factory.py                  # io-bound, k = 10, 1 static + 5 cloud nodes
    .venv/bin/python bench/slurm_factory.py --workload blast-3stage --k 20 --cloud 8
    .venv/bin/python bench/slurm_factory.py --tasks 60 --cloud 22 --dial  # a cap neither meets
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
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

from hta.accounting import node_seconds_after  # noqa: E402
from hta.policies.registry import make_policy  # noqa: E402
from hta.scaling_log import (  # noqa: E402
    NodeRecord,
    RunRecord,
    ScalingLogWriter,
    WorkerRecord,
    measured_categories,
    read_records,
)
from hta.sim.cluster import ClusterModel  # noqa: E402
from hta.sim.run import Simulation  # noqa: E402
from hta.sim.workload import Workload, load_workload  # noqa: E402
from hta.summary import RunSummary, paid_intervals, summarize  # noqa: E402
from testcluster.slurm_cluster import THESIS_LATENCY_S, node_seconds  # noqa: E402

HTA = ROOT / ".venv" / "bin" / "hta"
CATALOG = "127.0.0.1:9097"
NODE_CORES, NODE_MEMORY_MB, WORKER_MEMORY_MB, WORKER_DISK_MB = 3, 16000, 15000, 4000
#: the cluster autoscaler's scale-down-unneeded-time, thesis time: Slurm's SuspendTime here
EMPTY_NODE_S = 600.0
#: work_queue_factory's own default worker idle timeout (-t), compressed like every other period
FACTORY_IDLE_S = 300.0


@dataclass
class Run:
    label: str
    dir: Path
    summary: RunSummary | None = None
    node_s: float = 0.0
    node_s_after: float = 0.0
    records: list = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    sim: RunSummary | None = None
    sim_policy: str = ""
    #: the simulated run's node·s until the workflow's end, and its cloud nodes' after it
    #: (:func:`sim_node_s`)
    sim_node_s: float = 0.0
    sim_node_s_after: float = 0.0
    #: HTA's policy spec and the earlier run whose runtimes it was given (the dial's run)
    policy: str = "hta"
    prior_log: Path | None = None


class Cluster:
    """``testcluster/slurm`` in a folder of its own, up for one run."""

    def __init__(self, a: argparse.Namespace):
        self.state = Path(tempfile.mkdtemp(prefix="hta-slurm-bench-", dir="/tmp"))
        self.state.chmod(0o755)  # munged reaches its socket through it
        self.env = {**os.environ, "HTA_SLURM_DIR": str(self.state)}
        self.args = ["--static-nodes", str(a.static), "--cloud-nodes", str(a.cloud), "--node-cores", str(NODE_CORES),
                     "--node-memory", str(NODE_MEMORY_MB), "--k", f"{a.k:g}"]
        self.suspend_s = EMPTY_NODE_S / a.k

    def __enter__(self) -> Cluster:
        up = subprocess.run([str(ROOT / "testcluster" / "slurm"), "up", *self.args], env=self.env,
                            capture_output=True, text=True, timeout=300)
        if up.returncode != 0:
            raise RuntimeError(f"slurm up failed: {up.stderr.strip()[-500:]}")
        self.env["SLURM_CONF"] = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
        return self

    def power_log(self) -> Path:
        return self.state / "power.log"

    def jobs_left(self) -> list[str]:
        out = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=self.env, capture_output=True, text=True)
        return [ln for ln in out.stdout.splitlines() if ln.strip()]

    def all_off(self, cloud: int) -> bool:
        text = self.power_log().read_text() if self.power_log().exists() else ""
        on: set[str] = set()
        for line in text.splitlines():
            _, what, node = line.split()
            if what == "resume":
                on.add(node)
            elif what == "off":
                on.discard(node)
        return not on

    def __exit__(self, *exc: object) -> None:
        subprocess.run([str(ROOT / "testcluster" / "slurm"), "down"], env=self.env, capture_output=True, timeout=300)
        shutil.rmtree(self.state, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM (HTA stops makeflow and its workers), then SIGKILL to the process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finish(run: Run, cluster: Cluster, workload: Workload, wf: Path, a: argparse.Namespace) -> None:
    """Outputs, scaling log, node·s from the power log (during the run, and until every node is off)."""
    wrong = [n for n, want in expected_outputs(workload).items()
             if not (wf.parent / n).exists() or (wf.parent / n).read_bytes() != want]
    if wrong:
        run.problems.append(f"{len(wrong)} outputs missing or wrong (first: {wrong[0]})")
    log = wf.parent / "Makeflow.scaling.jsonl"
    try:
        run.records = read_records(log)[0]
        run.summary = summarize(run.records, str(log))
    except Exception as exc:  # noqa: BLE001 — reported as a failed run
        run.problems.append(f"no scaling log: {exc}")
        return
    t0 = next(r.started_at for r in run.records if isinstance(r, RunRecord))
    end = t0 + run.summary.runtime_s
    deadline = time.time() + cluster.suspend_s + 120
    while not cluster.all_off(a.cloud) and time.time() < deadline:
        time.sleep(1)
    if not cluster.all_off(a.cloud):
        run.problems.append("cloud nodes still on long after the run")
    run.node_s = node_seconds(cluster.power_log(), t0, end, static=a.static)
    whole = node_seconds(cluster.power_log(), t0, time.time() + 1, static=0)
    run.node_s_after = whole - node_seconds(cluster.power_log(), t0, end, static=0)
    shutil.copy(cluster.power_log(), run.dir / "power.log")
    (run.dir / "node_s.json").write_text(json.dumps({"node_s": run.node_s, "node_s_after": run.node_s_after}))
    left = cluster.jobs_left()
    if any(" PENDING" in j or " RUNNING" in j or " CONFIGURING" in j for j in left):
        run.problems.append(f"Slurm jobs left: {left}")


def run_hta(a: argparse.Namespace, workload: Workload, out: Path, deadline_s: float | None = None,
            prior: Path | None = None) -> Run:
    """HTA's run; with ``deadline_s`` and ``prior`` (an earlier run's log), the dial's."""
    run = Run("HTA", out / "hta") if deadline_s is None else Run("HTA at the deadline", out / "hta-dial")
    if deadline_s is not None:
        run.policy, run.prior_log = f"hta:deadline_s={deadline_s:.1f}", prior
    shutil.rmtree(run.dir, ignore_errors=True)
    wf = write_makeflow(workload, a.k, run.dir)
    t = time.time()
    dial = [] if deadline_s is None else ["--deadline", f"{deadline_s:.1f}", "--runtime-prior", str(prior)]
    with Cluster(a) as cluster:
        cmd = [str(HTA), "makeflow", "--backend", "slurm", "--max-workers", str(a.static + a.cloud),
               "--worker-cores", str(NODE_CORES), "--worker-memory", str(WORKER_MEMORY_MB), "--worker-disk",
               str(WORKER_DISK_MB), "--latency-prior", f"{THESIS_LATENCY_S / a.k:.1f}", *dial, "-q", str(wf)]
        with open(run.dir / "hta.out", "w") as o:
            p = subprocess.Popen(cmd, cwd=wf.parent, stdout=o, stderr=subprocess.STDOUT, env=cluster.env,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=a.timeout)
            except subprocess.TimeoutExpired:
                run.problems.append(f"no end within {a.timeout:.0f} s")
                stop(p)
                rc = p.returncode
        if rc != 0:
            run.problems.append(f"hta exited {rc} (see {run.dir / 'hta.out'})")
        finish(run, cluster, workload, wf, a)
    run.wall_s = time.time() - t
    return run


def run_factory(a: argparse.Namespace, workload: Workload, out: Path) -> Run:
    run = Run("work_queue_factory", out / "factory")
    shutil.rmtree(run.dir, ignore_errors=True)
    wf = write_makeflow(workload, a.k, run.dir)
    scratch = run.dir / "factory-scratch"
    scratch.mkdir()
    t = time.time()
    with Cluster(a) as cluster:
        port = free_port()
        hta = subprocess.Popen([str(HTA), "makeflow", "--policy", "observe", "--port", str(port), "-q", str(wf)],
                               cwd=wf.parent, stdout=open(run.dir / "hta.out", "w"), stderr=subprocess.STDOUT,
                               env=cluster.env, start_new_session=True)
        factory = None
        try:
            deadline = time.time() + 60
            while not answers(port):
                if hta.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the master never answered")
                time.sleep(0.05)
            fcmd = ["work_queue_factory", "-T", "slurm", "--catalog", CATALOG, "-S", str(scratch),
                    "-d", "all", "-o", str(run.dir / "factory.debug"), "--min-workers", "0",
                    "--max-workers", str(a.static + a.cloud), "--cores", str(NODE_CORES),
                    "--disk", str(WORKER_DISK_MB),
                    "--tasks-per-worker", str(NODE_CORES), "-t", f"{FACTORY_IDLE_S / a.k:.0f}", "127.0.0.1", str(port)]
            with open(run.dir / "factory.out", "w") as fo:
                factory = subprocess.Popen(fcmd, cwd=scratch, stdout=fo, stderr=subprocess.STDOUT, env=cluster.env,
                                           start_new_session=True)
            rc = hta.wait(timeout=a.timeout)
            if rc != 0:
                run.problems.append(f"hta (observing) exited {rc}")
            if factory.poll() is not None:
                run.problems.append(f"work_queue_factory exited early ({factory.returncode})")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            run.problems.append(str(exc))
        finally:
            stop(hta)
            if factory is not None:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(factory.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        factory.wait(timeout=10)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            # the factory's jobs outlive it (as its local workers do): cancel every job it left
            ids = [j.split()[0] for j in cluster.jobs_left()]
            if ids:
                subprocess.run(["scancel", *ids], env=cluster.env, capture_output=True)
        finish(run, cluster, workload, wf, a)
    run.wall_s = time.time() - t
    return run


def run_dial(a: argparse.Namespace, workload: Workload, out: Path, runs: list[Run]) -> Run | None:
    """HTA with the dial: its deadline the factory's real runtime, its runtimes HTA's first
    run's (kept in ``dial.json`` beside it, for ``--reuse``)."""
    d = out / "hta-dial"
    if a.reuse and (d / "node_s.json").exists() and (d / "dial.json").exists():
        given = json.loads((d / "dial.json").read_text())
        run = reuse("HTA at the deadline", d, workload, a)
        run.policy, run.prior_log = f"hta:deadline_s={given['deadline_s']:.1f}", Path(given["prior"])
        return run
    real = {r.label: r for r in runs if r.summary is not None}
    if "HTA" not in real or "work_queue_factory" not in real:
        print("hta-dial: not run (it needs HTA's and the factory's real runs)", flush=True)
        return None
    factory = real["work_queue_factory"].summary
    assert factory is not None
    prior = (out / "hta" / "Makeflow.scaling.jsonl").resolve()
    print("hta-dial: running ...", flush=True)
    run = run_hta(a, workload, out, deadline_s=factory.runtime_s, prior=prior)
    (run.dir / "dial.json").write_text(json.dumps({"deadline_s": factory.runtime_s, "prior": str(prior)}))
    print(f"hta-dial: {run.wall_s:.0f} s wall" + "".join(f"; FAILED: {p}" for p in run.problems), flush=True)
    return run


def reuse(label: str, d: Path, workload: Workload, a: argparse.Namespace) -> Run:
    """A real run kept in ``--out`` by an earlier bench (to simulate again)."""
    run = Run(label, d)
    run.records = read_records(d / "Makeflow.scaling.jsonl")[0]
    run.summary = summarize(run.records, str(d / "Makeflow.scaling.jsonl"))
    figures = json.loads((d / "node_s.json").read_text())
    run.node_s, run.node_s_after = figures["node_s"], figures["node_s_after"]
    return run


def measured(hta: Run, a: argparse.Namespace) -> dict:
    """What an HTA run measured of this cluster (real seconds): a worker's start on a node
    already up (the static one: its job started → connected), a cloud worker's latency from
    its job's submission less that start (the node's pending and boot, and what else its
    start cost while others booted), the master's overhead per task. Each run is simulated
    with its own: on this 2-core host a worker's start grows with the nodes booting at once
    (about 1.5 s alone, 20 s among 20), which a cloud's nodes would not share."""
    conn = [r for r in hta.records if isinstance(r, WorkerRecord) and r.event == "connected" and r.latency_s]
    booted = [r for r in conn if r.phases.get("resume", 0.0) > 0.5]
    start = [r.phases.get("start", 0.0) for r in conn if r not in booted]
    pod_start = statistics.median(start) if start else 0.0
    lat = [r.latency_s - pod_start for r in booted if r.latency_s] or [THESIS_LATENCY_S / a.k]
    return {"latency_mean_s": statistics.fmean(lat), "latency_sd_s": statistics.stdev(lat) if len(lat) > 1 else 0.5,
            "pod_start_s": pod_start, "task_overhead_s": task_overhead(hta, a), "hold_s": node_hold(hta),
            "samples": len(booted), "pending": [r.phases.get("pending", 0.0) for r in booted],
            "resume": [r.phases.get("resume", 0.0) for r in booted],
            "start": [r.phases.get("start", 0.0) for r in booted]}


def node_hold(run: Run) -> float | None:
    """How long a cloud node stayed on after HTA's last worker on it went (real s, mean): its
    ``SuspendTime``, plus Slurm's power-saving pass and the node's stop. None where HTA's log
    names no node (the factory's workers are not HTA's)."""
    start = next(r.started_at for r in run.records if isinstance(r, RunRecord))
    node_of = {r.worker: r.node for r in run.records if isinstance(r, WorkerRecord) and r.node}
    last: dict[str, float] = {}
    for r in run.records:
        if isinstance(r, WorkerRecord) and r.event in ("drained", "removed", "stopped", "lost", "failed") \
                and node_of.get(r.worker, "").startswith("c"):
            last[node_of[r.worker]] = max(last.get(node_of[r.worker], 0.0), r.t)
    power = run.dir / "power.log"
    off = {n: float(t) - start for t, what, n in (line.split() for line in power.read_text().splitlines()
                                                   if line.strip()) if what == "off"} if power.exists() else {}
    holds = [off[n] - t for n, t in last.items() if n in off and off[n] >= t]
    return statistics.fmean(holds) if holds else None


def task_overhead(run: Run, a: argparse.Namespace) -> float:
    """The master's mean time per task beyond the task's own runtime, in ``run``."""
    from bench.replay import task_spans  # (the same measure as the replay bench)

    spans = task_spans(run.dir / "Makeflow.wqlog.tr", run.dir / "Makeflow.makeflowlog")
    tasks = bench_workload(a).tasks
    over = [max(0.0, s - tasks[n].runtime_s / a.k) for n, s in spans.items()]
    return statistics.fmean(over) if over else 0.0


def measured_factory(run: Run, hta: dict, a: argparse.Namespace) -> dict:
    """The factory's run as :func:`measured` reads an HTA run, where its workers are not
    HTA's: each cloud worker's latency from Slurm resuming a node (``power.log``) to a
    worker connecting after the first node was up (the master's log), paired in order, plus
    the mean wait before a resume HTA's run measured (``pending``); a start on a node
    already up as HTA's run measured it."""
    if not (run.dir / "power.log").exists() or not (run.dir / "Makeflow.wqlog.tr").exists():
        return dict(hta)  # (a run kept without them: HTA's figures, as before)
    power = [line.split() for line in (run.dir / "power.log").read_text().splitlines() if line.strip()]
    resumes = sorted(float(t) for t, what, _ in power if what == "resume")
    ups = [float(t) for t, what, _ in power if what == "up"]
    conns = sorted(int(line.split()[0]) / 1e6 for line in (run.dir / "Makeflow.wqlog.tr").read_text().splitlines()
                   if " WORKER " in line and line.rstrip().endswith(" CONNECTION") and not line.startswith("#"))
    cloud = [c for c in conns if ups and c >= min(ups)]
    pending = statistics.fmean(hta["pending"]) if hta["pending"] else 0.0
    lat = [c - r + pending - hta["pod_start_s"] for r, c in zip(resumes, cloud)]
    if not lat:
        return {**hta, "task_overhead_s": task_overhead(run, a)}
    return {**hta, "latency_mean_s": statistics.fmean(lat),
            "latency_sd_s": statistics.stdev(lat) if len(lat) > 1 else 0.5, "samples": len(lat),
            "task_overhead_s": task_overhead(run, a)}


def factory_spec(a: argparse.Namespace) -> str:
    from bench.factory_check import counts_before_7_4

    spec = (f"factory:tasks_per_worker={NODE_CORES},idle_timeout_s={round(FACTORY_IDLE_S / a.k):g},workers_per_cycle=5,"
            "worker_wakeup_s=5")
    return spec + (",pre_7_4_count=1" if counts_before_7_4() else "")


def bench_workload(a: argparse.Namespace) -> Workload:
    """The workload, or its first ``--tasks`` tasks (ValueError: one line)."""
    w = load_workload(a.workload, a.seed)
    if a.tasks is None:
        return w
    if any(t.parents for t in w.tasks):
        raise ValueError(f"--tasks cuts a workload of independent tasks; {a.workload}'s depend on each other: "
                         f"use io-bound")
    if not 1 <= a.tasks <= len(w.tasks):
        raise ValueError(f"--tasks {a.tasks}: give 1 to {len(w.tasks)} ({a.workload}'s tasks)")
    return Workload(w.name, w.tasks[:a.tasks], declared=w.declared)


def simulate(run: Run, policy: str, m: dict, a: argparse.Namespace, out: Path) -> None:
    base = bench_workload(a)
    tasks = [dataclasses.replace(t, runtime_s=t.runtime_s / a.k) for t in base.tasks]
    workload = Workload(base.name, tasks, declared=True)
    cluster = ClusterModel(max_nodes=a.static + a.cloud, start_nodes=a.static, start_workers=0,
                           node_cores=NODE_CORES, node_memory_mb=WORKER_MEMORY_MB,
                           latency_mean_s=m["latency_mean_s"], latency_sd_s=m["latency_sd_s"],
                           pod_start_s=m["pod_start_s"], empty_node_ttl_s=m.get("hold_s") or EMPTY_NODE_S / a.k,
                           task_overhead_s=m["task_overhead_s"], min_interval_s=1.0, teardown_s=0.0,
                           static_start_nodes=True)
    run.sim_policy = policy
    prior = None
    if run.prior_log is not None:
        prior = {n: c.runtime_mean_s for n, c in measured_categories(run.prior_log).items() if c.runtime_mean_s}
    log = out / f"{run.dir.name}.sim.jsonl"
    run.sim = Simulation(workload, make_policy(policy), cluster, seed=a.seed, log=ScalingLogWriter(log),
                         runtime_prior=prior, latency_prior_s=THESIS_LATENCY_S / a.k).run()  # (the real runs')
    run.sim_node_s, run.sim_node_s_after = sim_node_s(log, run.sim.runtime_s, a.static)


def sim_node_s(log: Path, end: float, static: int) -> tuple[float, float]:
    """A simulated run's node·s until the workflow's end and after it, as the real columns
    count them from the power log: the static nodes (the simulator's starting ones, ``h1``...,
    which never go) all along until the end, and each cloud node from its request until it
    went, its hold included, cut at the end in the first and from it in the second."""
    records = read_records(log)[0]
    workers = [r for r in records if isinstance(r, WorkerRecord)]
    gone = {r.node: r.t for r in records if isinstance(r, NodeRecord)}
    last = max([r.t for r in workers] + list(gone.values()) + [end])
    static_nodes = {f"h{i}" for i in range(1, static + 1)}
    cloud = paid_intervals([w for w in workers if w.node not in static_nodes], None, gone)
    return static * end + node_seconds_after(cloud, 0.0, end), node_seconds_after(cloud, end, last)


def err(sim: float, real: float) -> float:
    return (sim - real) / real * 100 if real else 0.0


def table(runs: list[Run], a: argparse.Namespace) -> list[str]:
    misses: list[str] = []
    head = ["run", "runtime s", "waste core·s", "shortage core·s", "node·s until the end", "node·s after the end"]
    rows = []
    for r in runs:
        if r.summary is None:
            continue
        s = r.summary
        rows.append([f"{r.label} (real)", f"{s.runtime_s:,.1f}", f"{s.waste_core_s:,.0f}", f"{s.shortage_core_s:,.0f}",
                     f"{r.node_s:,.0f}", f"{r.node_s_after:,.0f}"])
        if r.sim is not None:
            z = r.sim
            # node·s until the workflow ended, and after it: every node emptied (by its policy or
            # by the run's end) stays up its SuspendTime, in the power log as in the simulator
            cells = [(z.runtime_s, s.runtime_s, "runtime"), (z.waste_core_s, s.waste_core_s, "waste"),
                     (z.shortage_core_s, s.shortage_core_s, "shortage"),
                     (r.sim_node_s, r.node_s, "node·s"), (r.sim_node_s_after, r.node_s_after, "after")]
            rows.append([f"  simulator ({r.sim_policy.split(':')[0]})"] +
                        [f"{x:,.0f} ({err(x, y):+.1f} %)" if n != "runtime" else f"{x:,.1f} ({err(x, y):+.1f} %)"
                         for x, y, n in cells])
            # the goal's node·s: every node·s the cloud billed, until the end and after it
            paid = (r.sim_node_s + r.sim_node_s_after, r.node_s + r.node_s_after, "node·s in all")
            for x, y, n in [*cells[:3], paid]:
                if abs(err(x, y)) > a.max_error and n != "waste":
                    misses.append(f"simulator vs {r.label}: {n} {err(x, y):+.1f} % (goal within ±{a.max_error:g} %)")
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return misses


def main(argv: list[str] | None = None) -> int:
    # SIGTERM ends the bench as Ctrl-C does: the clusters and the factory it started are stopped
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="io-bound", help="io-bound (default) or blast-3stage")
    ap.add_argument("--k", type=float, default=10.0, help="time compression (default 10)")
    ap.add_argument("--static", type=int, default=1, help="static nodes (default 1)")
    ap.add_argument("--cloud", type=int, default=5, help="State=CLOUD nodes (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-error", type=float, default=10.0, help="simulator goal, %% (default 10)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per run, s")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--only", choices=("hta", "factory"), default=None)
    ap.add_argument("--reuse", action="store_true", help="take the real runs already in --out; simulate again")
    ap.add_argument("--tasks", type=int, default=None, metavar="N", help="the workload's first N tasks only")
    ap.add_argument("--dial", action="store_true",
                    help="also HTA with --deadline at the factory's runtime and --runtime-prior its first run")
    a = ap.parse_args(argv)
    if a.dial and a.only:
        print("slurm_factory: error: --dial runs HTA, the factory and HTA at the deadline: leave --only out",
              file=sys.stderr)
        return 2
    try:
        workload = bench_workload(a)
    except ValueError as exc:
        print(f"slurm_factory: error: {exc}", file=sys.stderr)
        return 2
    if shutil.which("work_queue_factory") is None or shutil.which("slurmctld") is None:
        print("slurm_factory: error: work_queue_factory or slurmctld not found: run scripts/setup.sh", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="hta-slurm-factory-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{a.workload}: {len(workload.tasks)} tasks ÷ k = {a.k:g}; {a.static} static + {a.cloud} cloud nodes of "
          f"{NODE_CORES} cores, boot {THESIS_LATENCY_S / a.k:.1f} s, power off after {EMPTY_NODE_S / a.k:.0f} s "
          f"idle; runs in {out}", flush=True)
    runs: list[Run] = []
    for label, fn in (("hta", run_hta), ("factory", run_factory)):
        if a.only and a.only != label:
            continue
        if a.reuse and (out / label / "node_s.json").exists():
            runs.append(reuse("HTA" if label == "hta" else "work_queue_factory", out / label, workload, a))
            continue
        print(f"{label}: running ...", flush=True)
        runs.append(fn(a, workload, out))
        print(f"{label}: {runs[-1].wall_s:.0f} s wall" + "".join(f"; FAILED: {p}" for p in runs[-1].problems),
              flush=True)
    if a.dial:
        dial = run_dial(a, workload, out, runs)
        if dial is not None:
            runs.append(dial)
    hta = next((r for r in runs if r.label == "HTA"), None)
    m = measured(hta, a) if hta is not None and hta.records else None
    if m is not None:
        print("\nmeasured by each run (real s): a cloud worker's latency beyond a start on a node already up "
              f"(the static one's, {m['pod_start_s']:.1f} s, median in HTA's run); the master's overhead per task")
        for r in runs:
            if r.summary is None:
                continue
            own = measured(r, a) if r.label.startswith("HTA") else measured_factory(r, m, a)
            simulate(r, r.policy if r.label.startswith("HTA") else factory_spec(a), own, a, out)
            print(f"  {r.label}: latency {own['latency_mean_s']:.1f} ± {own['latency_sd_s']:.1f} over "
                  f"{own['samples']} workers"
                  + (f" (pending {statistics.fmean(own['pending']):.1f} + resume {statistics.fmean(own['resume']):.1f}"
                     f" + start {statistics.fmean(own['start']):.1f})" if r.label.startswith("HTA") and own["pending"]
                     else " (resume → connected, paired in order)")
                  + f"; overhead {own['task_overhead_s']:.1f}"
                  + (f"; a node on {own['hold_s']:.1f} s after its last worker" if own.get("hold_s") else ""))
    print(f"\nreal runs and the simulator's predictions (real seconds; × {a.k:g} in thesis time)\n")
    misses = table(runs, a)
    for r in runs:
        misses += [f"{r.label}: {p}" for p in r.problems]
    real = {r.label: r for r in runs if r.summary is not None}
    ours = "HTA at the deadline" if a.dial else "HTA"
    if ours in real and "work_queue_factory" in real:
        h, f = real[ours], real["work_queue_factory"]
        if a.dial:
            print(f"\n{ours}: --deadline {h.policy.split('=')[1]} s (the factory's runtime) and --runtime-prior "
                  f"HTA's first run: HTA knows its tasks' runtimes from a run before (an asymmetry)")
        assert h.summary is not None and f.summary is not None
        ratio_t = h.summary.runtime_s / f.summary.runtime_s
        ratio_n = (h.node_s + h.node_s_after) / (f.node_s + f.node_s_after)
        print(f"\n{ours} / factory: runtime {ratio_t:.3f} (goal ≤ 1.02), node·s paid in all {ratio_n:.3f} (goal < 1), "
              f"node·s until the end {h.node_s / f.node_s:.3f}")
        if ratio_t > 1.02:
            misses.append(f"HTA's runtime is {ratio_t:.3f} × the factory's")
        if ratio_n >= 1:
            misses.append(f"HTA pays {ratio_n:.3f} × the factory's node·s")
        if h.sim is not None and f.sim is not None and f.sim_node_s + f.sim_node_s_after > 0:
            # the saving the simulator predicts for the same two runs, met within 10 % of itself
            predicted = 1 - (h.sim_node_s + h.sim_node_s_after) / (f.sim_node_s + f.sim_node_s_after)
            print(f"the simulator's {ours} / factory: node·s in all {1 - predicted:.3f}; saving real "
                  f"{1 - ratio_n:+.1%}, predicted {predicted:+.1%}")
            if predicted > 0 and 1 - ratio_n < 0.9 * predicted:
                misses.append(f"the real saving {1 - ratio_n:.1%} is short of the simulator's {predicted:.1%} "
                              "(goal: at least 0.9 × it)")
    if a.json:
        a.json.write_text(json.dumps({"k": a.k, "workload": a.workload, "measured": m, "runs": [
            {"label": r.label, "real": r.summary.model_dump() if r.summary else None, "node_s": r.node_s,
             "node_s_after": r.node_s_after, "sim": r.sim.model_dump() if r.sim else None, "problems": r.problems}
            for r in runs]}, indent=1))
    print(f"\nruns, scaling logs and the factory's logs: {out}/")
    if misses:
        print(f"{len(misses)} miss(es): " + "; ".join(misses))
        return 1
    print("every run complete and every goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
