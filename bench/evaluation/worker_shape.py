"""Worker shape, with and without.

HTA's default cuts each purchase's nodes into the smallest 1/k that holds one of each
task still waiting, by their measured peaks, and a third of a node for a never-measured
task (``probe``: ``worker_shape=learned,probe_split=3``; one that needs more memory is
killed and retried on a node, more cores is throttled to the third's and measured at
them). ``learned`` buys whole nodes for never-measured tasks (``probe_split=1``);
``node`` buys whole nodes always (``worker_shape=node``, the default before learned
shapes). The simulator packs several worker pods per node (first fit, a
node leaves with its last pod, node-seconds paid per node: ``hta.sim.cluster``).

For each workload × cluster × seed this runs HTA's default, ``hta-time`` and ``hta-cost``
with each shape and prints runtime, waste (idle cores inside workers, during the run and
after it) and node-seconds, and the ratios to the default's shape. The rule:
keep a shape only where it lowers node-seconds at no cost in runtime. A default is chosen
before anything is measured, so where its guess is wrong it shows:
``blast-3stage-2core`` (2-core aligns, which do not fit a third of a node) is among the
cases. Goal line: HTA's default shape is the right default — no other shape both lowers
node-seconds by 1 % or more at a runtime no longer than the default's on most (workload,
cluster) cases and costs at most 5 % more runtime and node-seconds on every case; and
every run finishes. Exit 1 if either misses (in the first case, the default should
change).

The simulator runs the world ``hta makeflow`` is in (``makeflow -T wq`` without
``--allocation``: a task that declares nothing takes a whole worker, measured or not);
``--packed``, stored apart, the world where Work Queue sizes tasks itself (a measured
category's tasks are allocated its peak and share a worker).

    .venv/bin/python bench/worker_shape.py                 # blast-3stage, io-bound, montage, blast-3stage-2core; 2 seeds
    .venv/bin/python bench/worker_shape.py --workloads blast-3stage --seeds 5 --packed

Each run, once simulated, is appended to ``OUT/runs.jsonl``; a second call with the same ``--out``
reuses it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hta.policies import make_policy
from hta.policies.hta_policy import HTAPolicy
from hta.sim.cluster import ClusterModel
from hta.sim.oracle import oracle_runtime_s

from .pareto import CLUSTERS, WORKLOADS, open_store, run_one, settings_of, workload

SETTINGS = ["hta", "hta-time", "hta-cost"]
#: shape → (worker_shape, probe_split); whole nodes have no probes to split
SHAPES = {"node": ("node", 1), "learned": ("learned", 1), "probe": ("learned", 3)}
#: HTA's default's own shape, the one every other is held against
_DEFAULT = HTAPolicy()
DEFAULT_SHAPE = next(name for name, fields in SHAPES.items() if fields == (_DEFAULT.worker_shape, _DEFAULT.probe_split))
#: node-seconds the learned shape must save to count as better (at no runtime cost)
BETTER_BY = 0.01
#: what a default may cost, runtime or node-seconds, on any case (where its guess is wrong)
WORST_ALLOWED = 1.05
#: beside the Pareto workloads: one whose never-measured tasks do not fit a third of a node
SHAPE_WORKLOADS = [*WORKLOADS, "blast-3stage-2core"]


def shaped(setting: str, shape: str) -> str:
    """``setting`` with ``shape``, naming only what differs from the setting's own (``hta``
    and ``hta-cost``: probes), so a run is stored under one name here and in the Pareto
    bench (``hta-cost`` there is ``hta-cost`` with probes here)."""
    own = make_policy(setting)
    assert isinstance(own, HTAPolicy), setting
    worker_shape, probe_split = SHAPES[shape]
    changes = ([f"worker_shape={worker_shape}"] if own.worker_shape != worker_shape else []) + \
        ([f"probe_split={probe_split}"] if worker_shape == "learned" and own.probe_split != probe_split else [])
    return f"{setting}{',' if ':' in setting else ':'}{','.join(changes)}" if changes else setting


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="blast-3stage,io-bound,montage,blast-3stage-2core",
                    help=f"of: {', '.join(SHAPE_WORKLOADS)}")
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=600)
    ap.add_argument("--out", type=Path, default=Path("/tmp/hta-worker-shape"))
    ap.add_argument("--packed", action="store_true",
                    help="a measured category's tasks are allocated its peak and share a worker (the simulator's "
                         "world where Work Queue sizes tasks itself); stored apart")
    args = ap.parse_args()
    unknown = [n for n in args.workloads.split(",") if n not in SHAPE_WORKLOADS] + \
        [c for c in args.clusters.split(",") if c not in CLUSTERS]
    if unknown:
        ap.error(f"unknown workload or cluster: {', '.join(unknown)} (workloads: {', '.join(SHAPE_WORKLOADS)}; "
                 f"clusters: {', '.join(CLUSTERS)})")
    # runs, reused by the next call with this --out
    store = open_store(ap, args.out, args.tasks, whole_worker=not args.packed)
    t0 = time.perf_counter()
    better = {shape: 0 for shape in SHAPES if shape != DEFAULT_SHAPE}
    vs_default: dict[str, list[tuple[float, float, str]]] = {s: [] for s in better}  # (runtime ×, node·s ×, case)
    cases = 0
    unfinished: list[str] = []
    print(f"{'workload':14} {'cluster':12} {'setting':9} {'shape':8} {'runtime s':>10} {'waste run':>10} "
          f"{'waste end':>10} {'node·s':>10}   shape/{DEFAULT_SHAPE}: runtime  waste  node·s")
    for wl_name in args.workloads.split(","):
        for cl_name in args.clusters.split(","):
            cluster = ClusterModel(max_nodes=CLUSTERS[cl_name], auto_allocation=args.packed)
            default_means = {}
            for setting in SETTINGS:
                means = {}
                for shape in SHAPES:
                    spec = shaped(setting, shape)
                    settings = settings_of(spec)  # what the label stands for: a changed preset runs again
                    runs = []
                    for seed in range(args.seeds):
                        wl = workload(wl_name, seed, args.tasks, args.out / "workloads")
                        runs.append(store.get((wl_name, cl_name, spec, seed), settings=settings,
                                              make=lambda: run_one(wl_name, wl, spec, cluster, seed,
                                                                   oracle_runtime_s(wl, cluster))))
                        if not runs[-1]["finished"]:
                            unfinished.append(f"{wl_name}/{cl_name}/{spec}/seed {seed}")
                    means[shape] = {k: statistics.fmean(r[k] for r in runs)
                                    for k in ("runtime_s", "waste_core_s", "waste_after_core_s", "node_s")}
                n = means[DEFAULT_SHAPE]
                for shape, m in means.items():
                    ratios = "" if shape == DEFAULT_SHAPE else (
                        f"   {m['runtime_s'] / n['runtime_s']:15.3f} {m['waste_core_s'] / max(n['waste_core_s'], 1e-9):6.2f}"
                        f" {m['node_s'] / n['node_s']:7.3f}")
                    print(f"{wl_name:14} {cl_name:12} {setting:9} {shape:8} {m['runtime_s']:10,.0f} "
                          f"{m['waste_core_s'] - m['waste_after_core_s']:10,.0f} {m['waste_after_core_s']:10,.0f} "
                          f"{m['node_s']:10,.0f}{ratios}", flush=True)
                if setting == "hta":
                    default_means = means
            cases += 1
            n = default_means[DEFAULT_SHAPE]
            for shape in better:
                m = default_means[shape]
                if m["node_s"] <= (1 - BETTER_BY) * n["node_s"] and m["runtime_s"] <= n["runtime_s"]:
                    better[shape] += 1
                vs_default[shape].append((m["runtime_s"] / n["runtime_s"], m["node_s"] / n["node_s"],
                                       f"{wl_name} {cl_name}"))
    print(f"({args.seeds} seed(s) each; waste counts idle cores inside workers: a learned shape leaves a node's "
          f"unused cores outside any worker, so its waste can fall while node·s do not; {time.perf_counter() - t0:.0f} s)")
    if unfinished:
        print(f"goal MISS: every run finishes; unfinished within 30 × the bound: {', '.join(unfinished)}")
    robust = {}
    for shape, rs in vs_default.items():
        rt, ns = max(rs, key=lambda r: r[0]), max(rs, key=lambda r: r[1])
        print(f"{shape}: lowers node·s by ≥ {BETTER_BY:.0%} at no runtime cost in {better[shape]} of {cases} cases; "
              f"at worst runtime {rt[0]:.3f} × ({rt[2]}), node·s {ns[1]:.3f} × ({ns[2]})")
        robust[shape] = rt[0] <= WORST_ALLOWED and ns[1] <= WORST_ALLOWED
    switch = [s for s, b in better.items() if b * 2 > cases and robust[s]]
    ok = not switch and not unfinished
    print(f"goal {'met' if ok else 'MISS'}: {DEFAULT_SHAPE} stays HTA's default shape — no other shape lowers node·s at no "
          f"runtime cost on more than half the cases while costing at most {WORST_ALLOWED:g} × runtime and node·s on "
          "every one" + (f" (the default should change to: {', '.join(switch)})" if switch else ""))
    return 0 if ok else 1

