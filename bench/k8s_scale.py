"""Benchmark: the Kubernetes backend driven by HTA's policy at scale —
worker pods on kwok nodes of the local test cluster (``--pods 1000 --nodes 100``
for the figure README shows; default 200 on 50).

Reports API calls per decision, informer lag (pod created → its ADDED event
seen by the informer, and Running on the server → seen), and the
controller's CPU time, beside the same figures for a naive controller that
polls (lists) the pods every decision instead of watching. The pod process
runner is off: the control path alone is measured.

    .venv/bin/python bench/k8s_scale.py [--pods 1000 --nodes 100]

Also: the decision latency (refresh + decide + create, per decision), pods
created per second from 0, and the informer's memory (tracemalloc, its pod
states and watch). Exits 1 if the informer-driven controller makes more API
calls per steady decision than the listing baseline.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hta.backends.pool import WorkerPool  # noqa: E402
from hta.model import LatencyStats, Observation, Resources, TaskGroup  # noqa: E402
from hta.policies.hta_policy import HTAPolicy  # noqa: E402
from k8s.api import CallCounter, K8sError, call  # noqa: E402
from k8s.backend import KubernetesProvider  # noqa: E402
from workqueue_bridge.snapshot import MasterSnapshot  # noqa: E402
from workqueue_bridge.status_json import QueueStatus  # noqa: E402

PODS, NODES, DECISIONS = 200, 50, 30
NODE_CORES = 4
SHAPE = Resources(cores=1, memory_mb=1024, disk_mb=1024)


def cluster(cmd: str, state: Path, *args: str) -> str:
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    out = subprocess.run([str(ROOT / "testcluster/cluster"), cmd, *args], env=env, capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def observation(backend: WorkerPool, now: float) -> Observation:
    return Observation(time=now, waiting=[TaskGroup(category="t", count=PODS * 4, request=Resources(cores=1))],
                       pending=backend.pending(), worker_shape=SHAPE, max_workers=PODS,
                       latency=LatencyStats(samples=[5.0]))


async def drive(kubeconfig: str) -> dict:
    epoch = time.time()
    k = KubernetesProvider(run_id="bench", kubeconfig=kubeconfig, image="none")
    b = WorkerPool(k, epoch=epoch)
    await b.start("127.0.0.1", 9)
    start_calls = k.counter.count  # start(): the access check, the informer's list and watch
    policy = HTAPolicy()
    snap = MasterSnapshot(taken_at=0, queue=QueueStatus(), tasks=[], workers=[])
    cpu0, calls0 = time.process_time(), k.counter.count
    created_at: dict[str, float] = {}
    decisions = 0
    # per decision: (pods created, API calls counted from its start to the next one's, the informer's included)
    per_decision: list[tuple[int, int]] = []
    latency: list[float] = []
    first_create: float | None = None
    all_created: float | None = None  # seconds from the first create call until every pod was created
    budget_cuts: list[str] = []
    for _ in range(DECISIONS):
        c0 = k.counter.count
        t_dec = time.time()
        now = t_dec - epoch
        await b.refresh(snap, now)
        d = policy.decide(observation(b, now))
        t = time.time()
        first_create = first_create or t
        known = set(b.workers)
        try:
            names = await b.request(d.add, SHAPE, now)
        except K8sError as exc:  # a step's API budget (5 s) ran out: as the controller does, go on next step
            names = [n for n in b.workers if n not in known]
            budget_cuts.append(str(exc))
        latency.append(time.time() - t_dec)
        if names:
            print(f"scale-up: {len(names)} pods created in {time.time() - t:.2f} s")
        for n in names:
            created_at[n] = epoch + b.workers[n].requested_at
        decisions += 1
        await asyncio.sleep(1.0)
        per_decision.append((len(names), k.counter.count - c0))
        if all_created is None and len(created_at) >= PODS:
            all_created = time.time() - (first_create or t)
    calls = k.counter.count - calls0
    last_up = max((i for i, (n, _) in enumerate(per_decision) if n), default=-1)
    steady = per_decision[last_up + 1:]
    cpu = time.process_time() - cpu0
    pods = k.informer.snapshot()
    added_lag = [pods[n].seen[0][0] - created_at[n] for n in created_at if n in pods and pods[n].seen]
    running = [p for p in pods.values() if p.running_at]
    server = call(k.api.list_namespaced_pod, "default", label_selector=k.selector).items
    run_lag = []
    for p in server:
        ready = next((c.last_transition_time for c in p.status.conditions or [] if c.type == "Ready"), None)
        st = pods.get(p.metadata.name)
        if ready and st and st.running_at:
            run_lag.append(st.running_at - ready.timestamp())
    # the baseline: a controller without an informer lists the run's pods every decision
    base_counter = CallCounter()
    cpu1 = time.process_time()
    listed = 0
    for _ in range(DECISIONS):
        listed = len(call(k.api.list_namespaced_pod, "default", label_selector=k.selector, counter=base_counter).items)
    base = {"calls": base_counter.count, "cpu": time.process_time() - cpu1, "listed": listed}
    t0 = time.time()
    await b.stop_all(time.time() - epoch)
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    await b.refresh(snap, time.time() - epoch)  # one more look, traced
    inf_mem = sum(st.size for st in tracemalloc.take_snapshot().compare_to(before, "filename") if st.size > 0)
    tracemalloc.stop()
    import sys as _sys

    informer_bytes = _deep_size(k.informer.snapshot(), _sys.getsizeof)
    return {"budget_cuts": budget_cuts, "latency": latency,
            "created_per_s": len(created_at) / all_created if all_created else None,
            "informer_bytes": informer_bytes, "refresh_alloc": inf_mem,
            "pods": len(created_at), "running": len(running), "decisions": decisions, "calls": calls,
            "start_calls": start_calls, "up": [c for n, c in per_decision if n],
            "steady": [c for _, c in steady], "cpu": cpu, "added_lag": added_lag, "run_lag": run_lag,
            "delete_s": time.time() - t0, "base": base}


def _deep_size(obj, sizeof, seen: set | None = None) -> int:
    """Bytes held by ``obj`` and what it refers to (dicts, lists, objects' __dict__)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    n = sizeof(obj)
    if isinstance(obj, dict):
        n += sum(_deep_size(k, sizeof, seen) + _deep_size(v, sizeof, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set)):
        n += sum(_deep_size(x, sizeof, seen) for x in obj)
    elif hasattr(obj, "__dict__"):
        n += _deep_size(vars(obj), sizeof, seen)
    return n


def main() -> int:
    global PODS, NODES, NODE_CORES
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=PODS)
    ap.add_argument("--nodes", type=int, default=NODES)
    a = ap.parse_args()
    PODS, NODES = a.pods, a.nodes
    NODE_CORES = max(4, -(-PODS // NODES))  # room for every pod
    state = Path(tempfile.mkdtemp(prefix="hta-bench-cluster-"))
    export = cluster("up", state, "--node-cores", str(NODE_CORES), "--node-memory", "16384", "--max-nodes", str(NODES),
                     "--start-nodes", str(NODES), "--provision-delay", "1", "--provision-jitter", "0",
                     "--pod-start-delay", "1", "--no-pod-runner")
    kubeconfig = export.split("=", 1)[1]
    try:
        time.sleep(3)
        r = asyncio.run(drive(kubeconfig))
        base = r["base"]
    finally:
        cluster("down", state)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else float("nan")
    print(f"{r['pods']} worker pods on {NODES} kwok nodes, {r['decisions']} decisions at 1 s, "
          f"{r['running']} seen Running")
    print(f"API calls (counted by the backend): {r['start_calls']} at start-up, then {r['calls']} over "
          f"{r['decisions']} decisions ({r['calls'] / r['decisions']:.1f} per decision)")
    print(f"  scale-up decisions: {len(r['up'])} ({r['pods']} pods created), {sum(r['up'])} calls")
    if r["steady"]:
        print(f"  steady state, the {len(r['steady'])} decisions after the last scale-up: {sum(r['steady'])} calls in "
              f"all, {sum(r['steady']) / len(r['steady']):.2f} per decision, at most {max(r['steady'])} in one "
              f"(the informer's watch renewals)")
    else:
        print("  steady state: none (the last decision scaled up)")
    print(f"informer lag, create call → ADDED seen: median {1e3 * med(r['added_lag']):.0f} ms, "
          f"p90 {1e3 * p90(r['added_lag']):.0f} ms")
    print(f"informer lag, Ready on the server → seen: median {med(r['run_lag']):.2f} s, p90 {p90(r['run_lag']):.2f} s "
          f"(server timestamps have 1 s resolution)")
    print(f"controller CPU: {r['cpu']:.2f} s over {r['decisions']} decisions "
          f"({1e3 * r['cpu'] / r['decisions']:.0f} ms per decision, creates included)")
    print(f"baseline (no informer: list the run's {base['listed']} pods every decision): {base['calls']} calls "
          f"({base['calls'] / DECISIONS:.1f} per decision), {base['cpu']:.2f} s CPU for {DECISIONS} decisions — "
          f"{base['cpu'] / max(r['cpu'], 1e-9):.1f}x the informer-driven controller's CPU")
    print(f"delete all {r['pods']} pods and wait until gone: {r['delete_s']:.1f} s")
    if r["budget_cuts"]:
        print(f"steps whose creates ran past the 5 s API budget (the rest created in later steps): "
              f"{len(r['budget_cuts'])}")
    lat = r["latency"]
    print(f"decision latency (refresh + decide + create): median {1e3 * med(lat):.0f} ms, p90 {1e3 * p90(lat):.0f} ms, "
          f"max {1e3 * max(lat):.0f} ms")
    if r["created_per_s"]:
        print(f"pods created per second, 0 → {r['pods']}: {r['created_per_s']:.1f} (first create call to the "
              f"decision after the last; 1 s between decisions)")
    print(f"informer memory: {r['informer_bytes'] / 1e6:.2f} MB for {len(r['run_lag']) or r['pods']} pods "
          f"({r['informer_bytes'] / max(r['pods'], 1) / 1e3:.1f} kB per pod); one refresh allocates "
          f"{r['refresh_alloc'] / 1e3:.0f} kB")
    steady = r["steady"]
    per = sum(steady) / len(steady) if steady else float("nan")
    base_per = base["calls"] / DECISIONS
    ok = bool(steady) and per < base_per
    print(f"goal: fewer API calls per steady decision than the listing baseline: {per:.2f} vs {base_per:.1f} — "
          f"{'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
