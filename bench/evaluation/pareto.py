"""Every rival setting, at every worker shape, against HTA's, in a world that charges
every policy the same measured costs.

For each workload × cluster it runs, over seeds, every setting a user would try, each
with whole-node workers, with 1-core pods and with pods as HTA's default cuts nodes for
the tasks that wait (``POLICY[pods=K]``: :mod:`hta.policies.pod_shape`; counts a user
sets in workers, KEDA's maxReplicaCount, are the cap in workers of that shape):

- HPA on CPU, targets 10, 20, 30, 50, 80 %;
- KEDA ScaledJob (``keda-job``), 1, 2, 3, 5, 10 tasks per job, its default strategy,
  and ``accurate`` and ``eager`` at 1 and 3 tasks per job; the ScaledObject variant
  ``keda-3`` (it deletes busy pods);
- work_queue_factory, 1–3 tasks per worker × idle timeout 60 / 300 / 900 s;
- max-then-drain; static (the cap, asked for at the first decision);
- HTA: its default and its two named presets (``hta.policies.hta_policy.PRESETS``:
  ``hta-time``, ``hta-cost``).

The world (:func:`world`): one empty node at the start that every policy's first worker
lands on; a pod on a node that is there connects after the measured pod start; the
master sends each input once per worker, one transfer at a time, at the measured
bandwidth, and brings outputs back (:data:`hta.sim.costs.MEASURED`); an empty node is
kept, and paid, for the cluster-autoscaler's ``scale-down-unneeded-time`` (10 min), or
``--node-hold karpenter`` removes it at once (consolidation's ``consolidateAfter: 0s``).

It prints one table per case (mean over seeds: runtime, waste during the run and after
its end, node-seconds, shortage; each seed's times scaled by the median critical path
over its own and its costs by the median work over its own, so that every seed weighs
alike, :class:`SeedScale`) with references: the lower bound (``hta.sim.oracle``; it holds
for workers of at least one core, which every shape here is), the node-seconds floor at
HTA's runtime, and fixed sizes present from t = 0 with 1-core pods. Then the goals:

1. HTA's default runtime ≤ 1.02 × that of max-then-drain with the same pods
   (``max-then-drain [learned]``: a real policy, so a reachable reference);
2. HTA's default node·s ≤ 0.75 × that of max-then-drain with the same pods uncapped,
   ≤ 1.00 × under the cap (there every sensible policy buys the cap at once);
3. every rival setting, at every shape, dominated by HTA's default or a preset on the
   time and the bill: runtime ≤ 1.02 ×, node·s no more;
4. no static pool of a size in ``FIXED_SIZES``, on 1-core or learned pods, asked for at
   t = 0 from the one starting node (so it pays the latency, as HTA does), both faster and
   cheaper than HTA's default; within 1.02 × its runtime, HTA pays ≤ 1.10 × its node·s;
5. over the cases run, HTA's default pays ≤ 1.5 × the node·s floor at its own runtime in
   median, ≤ 3.0 × on the worst. Waste is printed beside, not a
   dominance axis: a per-task pod has no idle cores inside it by construction, yet it
   can cost more node·s and run slower. A rival that left the workflow unfinished on
   some seed is listed apart, as no competitor;
6. with ``--dial`` (the time–cost dial, docs/decisions/0031-the-time-cost-dial.md): HTA's
   default given a deadline of 1.1, 1.5, 2, 3 and 4 × its own runtime (per seed) ends by it
   in ≥ 95 % of the runs, its node·s never rising (within 1.02 ×) as the deadline grows; and
   given the cheapest finished rival setting's node·s as its budget, it spends ≤ 1.02 × it.
   Those points count in goal 3's dominance beside the presets.

Each rival left standing is printed with, for each HTA setting, the axes it loses on and
the figures, and the least runtime at which any policy is as cheap (the floor). Each
front is drawn (node-seconds × runtime) into ``--out``. Exit 1 if any goal misses.

Workloads: ``blast-3stage``, ``io-bound`` and five WfCommons recipes (Montage,
Epigenomics, 1000Genome, SoyKB, Cycles), generated per seed with the ``wfcommons``
package (``pip install -e '.[bench]'``) at ``--tasks`` tasks (600; the recipes give a
few fewer). WfCommons 1.6 instances carry runtimes, 1 core per task and file sizes, no
``avgCPU`` nor memory: the simulator's defaults apply (100 % CPU, 512 MB).

    .venv/bin/python bench/pareto.py --quick             # 1 seed, 3 workloads (minutes)
    .venv/bin/python bench/pareto.py --seeds 5 --out /tmp/pareto
    .venv/bin/python bench/pareto.py --seeds 5 --out /tmp/pareto --preset hta-cost:busy_runtimes=3 --preset hta-cost

``--preset SPEC`` (at most twice) holds HTA's default and these settings against the
rivals in place of ``hta-time`` and ``hta-cost`` (docs/decisions/0014-presets.md).
``--sweep`` runs HTA's tuned settings (``SWEEP``) beside them and ranks every pair of
the settings run by the rivals the default and the pair leave undominated (``covers``;
not a goal).

``--declared`` runs the same workloads with every task declaring its cores and memory
(Makeflow's ``.MAKEFLOW CORES`` and ``MEMORY`` per category), for HTA and every rival
alike (docs/decisions/0010-whole-worker-tasks.md). ``--packed`` runs the world where Work
Queue sizes tasks itself: a measured category's tasks are allocated its peak and share a
worker (what ``--allocation=throughput`` is documented to do). By default a task that
declares nothing takes a whole worker, always, as CCTools 8.0 does under ``makeflow -T
wq``. Each world's runs are stored apart.

Each run, once simulated, is appended to ``OUT/runs.jsonl``; a second call with the same
``--out`` reuses it (a long run can be resumed; two processes split by ``--workloads``
may share it).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hta.policies import make_policy
from hta.policies.hta_policy import HTAPolicy
from hta.sim.cluster import ClusterModel
from hta.sim.compare import CUTOFF_FACTOR
from hta.sim.costs import MEASURED
from hta.sim.oracle import (
    NodeSecondsFloor,
    critical_path_s,
    least_mean_runtime_s,
    mean_node_seconds_floor,
    node_seconds_floor,
    oracle_runtime_s,
)
from hta.sim.run import Simulation
from hta.sim.workload import Workload, load_workload

RUNTIME_SLACK = 1.02
MTD_SAVING = 0.25
BEST_FIXED_WITHIN = 1.10
#: HTA's default node·s over the floor at its own runtime, over the cases run: the median's
#: goal and the worst case's
FLOOR_MEDIAN = 1.5
FLOOR_WORST = 3.0

HTA_SETTINGS = {"hta": "hta", "hta-time": "hta-time", "hta-cost": "hta-cost"}
#: ``--dial``: HTA's default given a deadline of each of these × its own runtime (per seed)
DIAL_FACTORS = (1.1, 1.5, 2.0, 3.0, 4.0)
#: ... at least this share of those runs ends by its deadline, and within a case the mean
#: node·s never rise by more than DIAL_RISE as the deadline grows
DIAL_KEPT = 0.95
DIAL_RISE = 1.02
#: ``--dial``: HTA given the cheapest finished rival setting's node·s (per seed) as its budget
#: spends at most this many times it
BUDGET_SLACK = 1.02
BUDGET_LABEL = "hta budget of the cheapest rival"
#: the dial's settings, off at 0: left out of a setting's text (:func:`settings_of`), so the
#: runs stored before the dial existed stay valid
DIAL_FIELDS = ("deadline_s", "budget_node_s")
#: ``--sweep``: HTA's cost knobs around its default and ``hta-cost``, to show which rivals
#: a user who tunes them would beat; not presets, so not counted in the goals.
#: ``busy_runtimes`` (default 1, ``hta-cost`` 4) caps every purchase by how long the
#: backlog keeps a worker busy (10 on whole nodes, then 5: the cost presets before this
#: one); ``unmeasured_per_worker`` (default 1) buys one worker per that many never-measured
#: tasks, the first wave only; ``hta-cost`` at 3, 5 and 10 task runtimes brackets its 4,
#: without its bound of 2 latencies, and with that bound's rounds counted in the mean
#: runtime; the default on whole nodes and with whole nodes for never-measured tasks only
#: (no probes)
SWEEP = {spec: spec for spec in [*(f"hta:busy_runtimes={k}" for k in (2, 3, 5, 10)), "hta:unmeasured_per_worker=2",
                                 *(f"hta-cost:busy_runtimes={k}" for k in (3, 5, 10)),
                                 "hta-cost:busy_latencies=0", "hta-cost:busy_latencies_runtime=mean",
                                 "hta:worker_shape=node", "hta:probe_split=1"]}
CLUSTERS = {"cap20": 20, "uncapped200": 200}
WFCOMMONS = {"montage": "MontageRecipe", "epigenomics": "EpigenomicsRecipe", "1000genome": "GenomeRecipe",
             "soykb": "SoykbRecipe", "cycles": "CyclesRecipe"}
WORKLOADS = ["blast-3stage", "io-bound", *WFCOMMONS]
QUICK_WORKLOADS = ["blast-3stage", "io-bound", "montage"]
FIXED_SIZES = {20: [2, 5, 10, 15, 20], 200: [10, 25, 50, 100, 150, 200]}


#: the rivals' worker shapes (``POLICY[pods=K]``, :mod:`hta.policies.pod_shape`): a whole
#: node, 1-core pods (a node of ``node_cores`` cut in as many), and pods as HTA's default
#: cuts nodes for the tasks that wait (the same learned sizes, the same code)
SHAPES = ("node", "1-core", "learned")


def pods_of(shape: str, node_cores: float) -> int | str:
    """Pods a node is cut into for ``shape`` (1: a whole node)."""
    pods: dict[str, int | str] = {"node": 1, "1-core": max(1, int(node_cores)), "learned": "learned"}
    return pods[shape]


def shaped(spec: str, shape: str, node_cores: float) -> str:
    """``spec`` given workers of ``shape``: the spec itself for whole nodes, else ``spec[pods=K]``."""
    pods = pods_of(shape, node_cores)
    return spec if pods == 1 else f"{spec}[pods={pods}]"


def rivals(max_nodes: int, node_cores: float = 3.0) -> dict[str, str]:
    """Label → policy spec, every setting a user would try, each at every shape of
    :data:`SHAPES`. Counts a user sets in workers (KEDA's maxReplicaCount) are the cap in
    workers of that shape: a pod is 1/K of a node, so the cap's nodes hold K × as many."""
    per_node = max(1, int(node_cores))
    out: dict[str, str] = {}
    for shape in SHAPES:
        cap = max_nodes * (1 if shape == "node" else per_node)
        base = {f"hpa-{t}": f"hpa-{t}" for t in (10, 20, 30, 50, 80)}
        base.update({f"keda-job-{n}": f"keda-job:tasks_per_job={n},max_replicas={cap}" for n in (1, 2, 3, 5, 10)})
        for strategy in ("accurate", "eager"):
            base.update({f"keda-job-{n} {strategy}": f"keda-job:tasks_per_job={n},max_replicas={cap},strategy={strategy}"
                         for n in (1, 3)})
        base["keda-3 (ScaledObject)"] = "keda-3"
        for per in (1, 2, 3):
            for idle in (60, 300, 900):
                base[f"factory-{per}x{idle}s"] = f"factory:tasks_per_worker={per},idle_timeout_s={idle}"
        base["max-then-drain"] = "max-then-drain"
        base["static"] = "static"
        out.update({f"{label} [{shape}]": shaped(spec, shape, node_cores) for label, spec in base.items()})
    return out


def chosen_rivals(ap: argparse.ArgumentParser, names: str | None) -> Callable[[str], bool]:
    """``--rivals``: which rival labels to run (all without it). A name that starts no
    label, or a choice without max-then-drain (the goals' reference), is a usage error."""
    if names is None:
        return lambda label: True
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    labels = rivals(20)
    unknown = [n for n in wanted if not any(label.startswith(n) for label in labels)]
    if unknown or not wanted:
        ap.error(f"--rivals {names!r}: no rival setting starts with {', '.join(unknown) or 'nothing'}; names are "
                 f"e.g. max-then-drain, static, factory, keda-job, hpa")
    if not any(MTD_SAME_PODS.startswith(n) for n in wanted):
        ap.error(f"--rivals {names!r}: keep max-then-drain, the reference every goal line compares with")
    return lambda label: any(label.startswith(n) for n in wanted)


#: the references the goals hold HTA's default against: max-then-drain with the same pods
MTD_SAME_PODS = "max-then-drain [learned]"


# -- dominance (pure; tests/test_pareto.py) -------------------------------------------------

@dataclass
class Point:
    label: str
    runtime_s: float
    waste_core_s: float
    node_s: float
    waste_after_core_s: float = 0.0
    shortage_core_s: float = 0.0
    unfinished: int = 0


def dominates(h: Point, r: Point, slack: float = RUNTIME_SLACK) -> bool:
    """On the time and the bill: runtime within ``slack`` ×, node·s no more. Waste is no axis:
    a per-task pod has no idle cores inside it by construction, yet it can cost more node·s
    and run slower."""
    return h.runtime_s <= slack * r.runtime_s and h.node_s <= r.node_s


def losses(h: Point, r: Point, slack: float = RUNTIME_SLACK) -> list[str]:
    """Where ``h`` fails to dominate ``r``, with the figures."""
    out = []
    if h.runtime_s > slack * r.runtime_s:
        out.append(f"runtime {h.runtime_s:,.0f} > {slack:g} × {r.runtime_s:,.0f} = {slack * r.runtime_s:,.0f} s")
    if h.node_s > r.node_s:
        out.append(f"node·s {h.node_s:,.0f} > {r.node_s:,.0f}")
    return out


def undominated(rival_points: list[Point], hta_points: list[Point]) -> list[Point]:
    """Rival settings no HTA setting dominates (unfinished rivals are no competitors)."""
    return [r for r in rival_points if not r.unfinished and not any(dominates(h, r) for h in hta_points)]


@dataclass
class Cover:
    """What HTA's default and some other settings (one, or a pair) leave undominated, over every case."""
    settings: tuple[str, ...]
    #: case → labels of the rivals that neither the default nor these settings dominate
    left: dict[str, list[str]]

    @property
    def cases_left(self) -> int:
        return sum(1 for labels in self.left.values() if labels)

    @property
    def rivals_left(self) -> int:
        return sum(len(labels) for labels in self.left.values())

    def rank_key(self) -> tuple[int, int]:
        return self.cases_left, self.rivals_left


def covers(cases: dict[str, tuple[list[Point], dict[str, Point]]], candidates: list[str], size: int = 2) -> list[Cover]:
    """For every ``size`` of ``candidates`` (HTA settings other than the default, run on every
    case), the rivals left undominated by the default and them; ranked by the cases left with
    any (a goal line each), then by the rivals left. ``cases``: case → (rival points, HTA
    points by label, ``hta`` among them).

    The goal holds the rivals against the default and two presets; this asks which two of the
    settings run would serve best as those presets, and where no two of them can."""
    out = [Cover(chosen, {case: [r.label for r in undominated(rivs, [htas["hta"], *(htas[k] for k in chosen)])]
                          for case, (rivs, htas) in cases.items()})
           for chosen in itertools.combinations(candidates, size)]
    return sorted(out, key=lambda c: (*c.rank_key(), c.settings))


def rank(cover: Cover, ranked: list[Cover]) -> int:
    """1 + how many of ``ranked`` leave strictly fewer cases, or as many and fewer rivals (ties share a rank)."""
    return 1 + sum(1 for c in ranked if c.rank_key() < cover.rank_key())


def shown_ratio(ratio: float, limit: float, digits: int) -> str:
    """``ratio`` to ``digits`` decimals, or to as many more as it takes for the printed
    figure to fall on the same side of ``limit`` as the ratio itself (1.0002 is not "1.00"
    beside a miss of ≤ 1.00)."""
    for d in range(digits, digits + 6):
        shown = f"{ratio:.{d}f}"
        if (float(shown) <= limit) == (ratio <= limit):
            break
    return shown


class Goal(NamedTuple):
    """One goal line: what it asks, whether HTA met it, the figures, and the ratio as printed."""

    text: str
    met: bool
    figures: str
    ratio: str


def goals(hta: Point, mtd: Point, capped: bool) -> list[Goal]:
    """HTA's default against max-then-drain with the same pods: as fast (within
    ``RUNTIME_SLACK``), and cheaper: ``1 - MTD_SAVING`` × its node·s where the cluster does
    not cap it, no more than it where the cap binds (there every sensible policy buys the
    cap at once)."""
    most = 1.0 if capped else 1 - MTD_SAVING
    runtime = shown_ratio(hta.runtime_s / mtd.runtime_s, RUNTIME_SLACK, 3)
    node_s = shown_ratio(hta.node_s / mtd.node_s, most, 2)
    return [
        Goal(f"HTA default runtime ≤ {RUNTIME_SLACK:g} × {MTD_SAME_PODS}", hta.runtime_s <= RUNTIME_SLACK * mtd.runtime_s,
             f"{hta.runtime_s:,.0f} vs {mtd.runtime_s:,.0f} s ({runtime} ×)", runtime),
        Goal(f"HTA default node·s ≤ {most:g} × {MTD_SAME_PODS}", hta.node_s <= most * mtd.node_s,
             f"{hta.node_s:,.0f} vs {mtd.node_s:,.0f} ({node_s} ×)", node_s),
    ]


#: a static pool within this runtime of HTA's default may cost at most ``POOL_NODE_S`` × HTA's
POOL_NODE_S = 1.10
#: the shapes of the static pools asked for at t = 0 (``pool_goal``)
POOL_SHAPES = ("1-core", "learned")


def pool_goal(hta: Point, pools: list[Point]) -> Goal:
    """No static pool asked for at t = 0 (one of ``FIXED_SIZES``, from the one starting node,
    so it pays the latency as HTA does) is both faster and cheaper than HTA's default; where
    one runs within ``RUNTIME_SLACK`` of its runtime, HTA pays at most ``POOL_NODE_S`` × its
    node·s. The figures name the pool closest to breaking it."""
    def worst(p: Point) -> float:  # HTA's node·s over the pool's, where the pool is as fast
        return hta.node_s / p.node_s if p.runtime_s <= RUNTIME_SLACK * hta.runtime_s else 0.0

    beaten = [p for p in pools if p.runtime_s < hta.runtime_s and p.node_s < hta.node_s]
    near = max(pools, key=worst)
    ratio = worst(near)
    met = not beaten and ratio <= POOL_NODE_S
    who = beaten[0] if beaten else near
    figures = (f"{who.label}: {who.runtime_s:,.0f} s / {who.node_s:,.0f} node·s vs HTA's "
               f"{hta.runtime_s:,.0f} s / {hta.node_s:,.0f}" + (" (faster and cheaper)" if beaten else ""))
    return Goal(f"no static pool from t=0 faster and cheaper; within {RUNTIME_SLACK:g} × the runtime, HTA "
                f"node·s ≤ {POOL_NODE_S:g} × its", met, figures, shown_ratio(ratio, POOL_NODE_S, 2))


# -- workloads and runs ---------------------------------------------------------------------

#: what the node autoscaler does with a node whose last worker left: the cluster-autoscaler
#: keeps it ``--scale-down-unneeded-time`` (10 min by default: its FAQ), paid; Karpenter's
#: consolidation removes an empty node after ``consolidateAfter`` (0 s by default in
#: ``karpenter.sh/v1`` NodePools). Pods stay put: workers carry ``karpenter.sh/do-not-disrupt``
#: (a busy worker moved loses its task), so no under-used node is consolidated
NODE_HOLDS = {"cluster-autoscaler": 600.0, "karpenter": 0.0}


def world(cap: int, packed: bool = False, node_hold: str = "cluster-autoscaler") -> ClusterModel:
    """The cluster every policy runs on, charged alike: ``cap`` nodes, one empty at the start
    (every policy's first worker starts on it, a pod start later), the measured pod start
    and transfer costs (:data:`hta.sim.costs.MEASURED`), the node autoscaler's hold."""
    return ClusterModel(max_nodes=cap, start_workers=0, auto_allocation=packed,
                        **{**MEASURED.cluster_update(), "empty_node_ttl_s": NODE_HOLDS[node_hold]})


def world_key(cluster: ClusterModel) -> str:
    """The costs a stored run was charged, as text: a run of another world is run again."""
    return (f"pod start {cluster.pod_start_s:g} s, hold {cluster.empty_node_ttl_s:g} s, "
            f"{cluster.transfer_mb_per_s:g} MB/s, start workers {cluster.start_workers}")


def wfcommons_instance(name: str, seed: int, tasks: int, folder: Path) -> Path:
    path = folder / f"{name}-{tasks}-seed{seed}.json"
    if path.is_file():
        return path
    try:
        import numpy
        from wfcommons import WorkflowGenerator
        from wfcommons.wfchef import recipes
    except ImportError as exc:
        sys.exit(f"bench/pareto.py: {name} needs the wfcommons package ({exc}); pip install -e '.[bench]'")
    random.seed(seed)
    numpy.random.seed(seed)
    try:
        recipe = getattr(recipes, WFCOMMONS[name]).from_num_tasks(tasks)
        workflow = WorkflowGenerator(recipe).build_workflow()
    except ValueError as exc:  # (wfcommons: too few tasks for the recipe's base graph)
        sys.exit(f"{Path(sys.argv[0]).name}: cannot generate {name} at {tasks} tasks ({exc}): "
                 f"ask for more with --tasks")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        workflow.write_json(path)
    except OSError as exc:
        sys.exit(f"{Path(sys.argv[0]).name}: cannot write {exc.filename or path} ({exc.strerror or exc}): "
                 f"choose another --out")
    return path


def workload(name: str, seed: int, tasks: int, folder: Path) -> Workload:
    if name in WFCOMMONS:
        return load_workload(str(wfcommons_instance(name, seed, tasks, folder)))
    return load_workload(name, seed)


def run_one(wl_name: str, wl: Workload, spec: str, cluster: ClusterModel, seed: int, bound: float) -> dict:
    c = cluster.model_copy(update={"horizon_s": min(cluster.horizon_s, CUTOFF_FACTOR * bound)})
    t0 = time.perf_counter()
    s = Simulation(wl, make_policy(spec), c, seed=seed).run(wl_name)
    return {"runtime_s": s.runtime_s, "waste_core_s": s.waste_core_s, "waste_after_core_s": s.teardown_waste_core_s,
            "node_s": s.node_s, "shortage_core_s": s.shortage_core_s, "finished": s.exit_code == 0,
            "wall_s": round(time.perf_counter() - t0, 2)}


#: how stored runs counted waste and shortage: 2 since a task that declares nothing counts
#: its category's measured cores, not the whole worker it is given (the same runs'
#: runtimes and node·s, not their waste). A line of another (or none, 1) is
#: run again.
ACCOUNTING = 2


class Store:
    """runs.jsonl: one run a line (unfinished ones too, marked), keyed by workload, cluster,
    label, seed; only the lines of this ``tasks`` count (the WfCommons instances' size;
    a line without one was written at the default, 600), of this ``declared`` and of this
    ``whole_worker`` (a line without either was written without it), of this ``world``
    (:func:`world_key`: the costs charged), counted by this :data:`ACCOUNTING`."""

    def __init__(self, path: Path, tasks: int = 600, declared: bool = False, whole_worker: bool = False,
                 world: str = ""):
        self.path = path
        self.tasks = tasks
        self.world = world
        self.declared = declared
        self.whole_worker = whole_worker
        self.runs: dict[tuple, dict] = {}
        #: stored runs of this world counted by another :data:`ACCOUNTING`: run again
        self.outdated: set[tuple] = set()
        if path.is_file():
            for n, line in enumerate(path.read_text().splitlines(), start=1):
                try:
                    d = json.loads(line)
                    key = (d["workload"], d["cluster"], d["label"], d["seed"])
                except (ValueError, TypeError, KeyError):
                    raise ValueError(f"{path}, line {n}, is not a stored run (cut short?): delete that line "
                                     "or the file, or choose another --out") from None
                if (d.get("tasks", 600) == tasks and d.get("declared", False) == declared
                        and d.get("whole_worker", False) == whole_worker and d.get("world", "") == world):
                    if d.get("accounting", 1) == ACCOUNTING:
                        self.runs[key] = d
                    else:
                        self.outdated.add(key)
        self.outdated -= self.runs.keys()

    def get(self, key: tuple, make, settings: str | None = None) -> dict:
        """The stored run, or ``make()``'s, stored. ``settings`` (:func:`settings_of`) is what
        an HTA label stood for when it ran: a run of a preset whose definition has changed
        since, or stored before runs said (no ``settings``), is run again."""
        if key not in self.runs or self.runs[key].get("settings") != settings:
            d = {"workload": key[0], "cluster": key[1], "label": key[2], "seed": key[3], "tasks": self.tasks,
                 "accounting": ACCOUNTING, **({"world": self.world} if self.world else {}),
                 **({"declared": True} if self.declared else {}),
                 **({"whole_worker": True} if self.whole_worker else {}), **({"settings": settings} if settings else {}),
                 **make()}
            with self.path.open("a") as f:
                f.write(json.dumps(d) + "\n")
            self.runs[key] = d
        return self.runs[key]


def dial_label(factor: float) -> str:
    return f"hta deadline {factor:g}× its runtime"


def dial_goal(points: list[Point], kept: int, runs: int) -> Goal:
    """The dial's deadlines kept, and its node·s never rising (within ``DIAL_RISE``) as the
    deadline grows (points in the order of ``DIAL_FACTORS``)."""
    rises = [b.node_s / a.node_s for a, b in itertools.pairwise(points) if a.node_s > 0]
    worst = max(rises, default=1.0)
    met = kept >= DIAL_KEPT * runs and worst <= DIAL_RISE
    figures = (f"{kept}/{runs} by their deadline; node·s from the tightest deadline to the loosest "
               + " → ".join(f"{p.node_s:,.0f}" for p in points) + f" (largest rise {worst:.3f} ×)")
    return Goal(f"the dial keeps its deadlines (≥ {DIAL_KEPT:.0%}) and its node·s fall as they grow "
                f"(≤ {DIAL_RISE:g} ×)", met, figures, f"{worst:.2f}")


def settings_of(spec: str) -> str | None:
    """An HTA setting's every field (estimator options included), as text; None for a rival.
    Stored beside its runs, so that a changed preset is never read from an older store. (A
    field added to HTA's policy or estimator changes every setting's text: their stored runs
    are run again, whether or not the field changes what they do.)"""
    policy = make_policy(spec)
    if not isinstance(policy, HTAPolicy):
        return None
    return repr({f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)
                 if not f.name.startswith("_") and f.name != "name"
                 and not (f.name in DIAL_FIELDS and getattr(policy, f.name) == 0)})


#: what a table or front of scaled means says of its figures
SCALED = ", each seed's times × median critical path / its own, costs × median work / its own"


def seed_size(w: Workload) -> tuple[float, float]:
    """How long and how large a seed's workflow is, whatever the cluster: its critical path
    (s; no cluster runs it sooner) and its work (core·s; no cluster pays less)."""
    return critical_path_s(w), sum(t.runtime_s * t.cores for t in w.tasks)


@dataclass(frozen=True)
class SeedScale:
    """What a seed's figures are multiplied by before the mean over seeds: times (runtime)
    by the median critical path over its own, costs (node·s, waste, shortage) by the median
    work over its own. Every seed then weighs alike, read as a seed of median length and
    size, and a workload's rows on both clusters are in the same units. WfCommons draws
    runtimes from wide distributions: Montage seed 2 drew one 44,657 s task, a critical
    path of 46,154 s against 1,539–5,086 s for the other four, and a plain mean of seconds
    was that one seed's."""

    time: float = 1.0
    cost: float = 1.0


def seed_scales(sizes: list[tuple[float, float]]) -> list[SeedScale]:
    """One :class:`SeedScale` a seed, from each seed's :func:`seed_size`."""
    if any(not (length > 0 and work > 0) for length, work in sizes):
        raise ValueError("a seed's workflow has no critical path or no work: nothing to scale it by")
    length = statistics.median(n for n, _ in sizes)
    work = statistics.median(w for _, w in sizes)
    return [SeedScale(length / n, work / w) for n, w in sizes]


def scale_references(scales: list[SeedScale], bounds: list[float], floors: list, *lists: list[float]) -> tuple:
    """The case's references in the seeds' common units: the mean scaled bound, the floors
    scaled (:meth:`~hta.sim.oracle.NodeSecondsFloor.scaled`), and each list of per-seed
    times (the list schedules) scaled."""
    bound = statistics.fmean(b * k.time for b, k in zip(bounds, scales, strict=True))
    floors = [f.scaled(k.time, k.cost) for f, k in zip(floors, scales, strict=True)]
    return (bound, floors, *([t * k.time for t, k in zip(ts, scales, strict=True)] for ts in lists))


def mean_point(label: str, runs: list[dict], scales: list[SeedScale] | None = None) -> Point:
    """The mean over seeds of each figure, seed i's scaled by ``scales[i]`` (:class:`SeedScale`)."""
    w = [SeedScale()] * len(runs) if scales is None else scales
    def m(key: str, costs: bool = True) -> float:
        return statistics.fmean(r[key] * (x.cost if costs else x.time) for r, x in zip(runs, w, strict=True))
    return Point(label, m("runtime_s", costs=False), m("waste_core_s"), m("node_s"), m("waste_after_core_s"),
                 m("shortage_core_s"), sum(1 for r in runs if not r["finished"]))


# -- report ----------------------------------------------------------------------------------

#: the table's first column: the longest rival's name with "(5 unfinished)" fits
LABEL_WIDTH = 36


def row(p: Point, tag: str = "") -> str:
    during = p.waste_core_s - p.waste_after_core_s
    unf = f" ({p.unfinished} unfinished)" if p.unfinished else ""
    name = p.label + unf
    if len(name) > LABEL_WIDTH:  # its own line, the figures in their columns below it
        return f"  {tag:1} {name}\n" + row(Point("", p.runtime_s, p.waste_core_s, p.node_s, p.waste_after_core_s,
                                                      p.shortage_core_s), " ")
    return (f"  {tag:1} {name:{LABEL_WIDTH}} {p.runtime_s:9,.0f} {during:11,.0f} {p.waste_after_core_s:10,.0f} "
            f"{p.node_s:10,.0f} {p.shortage_core_s:12,.0f}")


HEADER = (f"    {'setting':{LABEL_WIDTH}} {'runtime s':>9} {'waste run':>11} {'waste end':>10} {'node·s':>10} "
          f"{'shortage':>12}")


SHORT = {"busy_runtimes=": "busy ", "busy_latencies=": "latencies ", "busy_latencies_runtime=": "rounds in ",
         "unmeasured_per_worker=": "unmeasured ", "worker_shape=learned,probe_split=3": "probes",
         "worker_shape=node": "whole nodes", "probe_split=1": "no probes"}


def short_label(spec: str) -> str:
    """A tuned setting's name on a front: ``busy 3``, ``unmeasured 2``, ``hta-cost, busy 3``,
    ``whole nodes``."""
    policy, _, settings = spec.partition(":")
    for key, word in SHORT.items():
        settings = settings.replace(key, word)
    return ", ".join([*([policy] if policy != "hta" else []), *settings.split(",")])


class Mark(NamedTuple):
    """A point on a front and its label."""
    node_s: float
    runtime_s: float
    text: str
    size: float
    weight: str = "normal"


#: a joint label breaks its line between names past this many characters (io-bound with 20 nodes: 12 settings
#: on one point)
LABEL_LINE = 48

#: points this close on both log axes (1.5 %) share one label: apart, their labels would
#: be drawn over each other (the factory at 2 and 3 tasks a worker, costing alike)
SAME_POINT = 0.015


def labels_of(marks: list[Mark]) -> list[Mark]:
    """One label per group of points within :data:`SAME_POINT` of the group's first, at that
    point: its members' names joined by " = " (by " ≈ " once any differs), in the group's
    largest font; a line breaks before a name that would take it past :data:`LABEL_LINE`
    characters (its trailing separator, or one long name, may)."""
    groups: list[list[Mark]] = []
    for m in marks:
        for g in groups:
            if (abs(math.log(max(m.node_s, 1e-9) / max(g[0].node_s, 1e-9))) <= SAME_POINT
                    and abs(math.log(max(m.runtime_s, 1e-9) / max(g[0].runtime_s, 1e-9))) <= SAME_POINT):
                g.append(m)
                break
        else:
            groups.append([m])
    out = []
    for g in groups:
        exact = all((m.node_s, m.runtime_s) == (g[0].node_s, g[0].runtime_s) for m in g)
        names = list(dict.fromkeys(m.text for m in g))
        big = max(g, key=lambda m: m.size)
        sep = " = " if exact else " ≈ "
        lines = [names[0]]
        for name in names[1:]:
            if len(lines[-1] + sep + name) > LABEL_LINE:
                lines[-1] += sep.rstrip()
                lines.append(name)
            else:
                lines[-1] += sep + name
        out.append(Mark(g[0].node_s, g[0].runtime_s, "\n".join(lines), big.size, big.weight))
    return out


def draw(path: Path, title: str, htas: list[Point], rivs: list[Point], refs: dict[str, Point], bound: float,
         free: list[Point], tuned: Sequence[Point] = (), floors: Sequence = (), scaled: bool = False) -> None:
    """One case's front; ``scaled``: its means are of scaled figures (:class:`SeedScale`), as both axes say."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from adjustText import adjust_text

    fig, ax = plt.subplots(figsize=(9, 6))
    # log axes: the settings worth comparing crowd near the bound, the slowest rivals run 5-10x longer
    ax.set_xscale("log")
    ax.set_yscale("log")
    colours = {"hpa": "tab:blue", "keda": "tab:orange", "factory": "tab:green", "max": "tab:purple",
               "static": "tab:brown"}
    marks: list[Mark] = []
    for r in rivs:
        if r.unfinished:
            continue
        c = next((v for k, v in colours.items() if r.label.startswith(k)), "grey")
        ax.scatter(r.node_s, r.runtime_s, color=c, marker="o", s=60 if r in free else 25,
                   edgecolors="red" if r in free else "none", linewidths=1.5)
        marks.append(Mark(r.node_s, r.runtime_s, r.label.replace(" (ScaledObject)", " SO"), 6))
    dial = sorted((h for h in htas if h.label == "hta" or h.label.startswith("hta deadline")),
                  key=lambda h: h.runtime_s)
    if len(dial) > 1:  # the dial as a curve, from the default's point through its deadlines
        ax.plot([h.node_s for h in dial], [h.runtime_s for h in dial], color="black", linewidth=1, zorder=1)
    for h in htas:
        ax.scatter(h.node_s, h.runtime_s, color="black", marker="*", s=160)
        label = h.label.replace("hta deadline ", "deadline ").replace(" its runtime", "")
        marks.append(Mark(h.node_s, h.runtime_s, label, 8, "bold"))
    for t in tuned:
        ax.scatter(t.node_s, t.runtime_s, color="black", marker="^", s=40)
        marks.append(Mark(t.node_s, t.runtime_s, short_label(t.label), 7))
    for name, p in refs.items():
        ax.scatter(p.node_s, p.runtime_s, color="grey", marker="s", s=50)
        marks.append(Mark(p.node_s, p.runtime_s, name, 7))
    # HTA's own first, so a joint label starts with the preset a reader looks for
    marks.sort(key=lambda m: m.weight != "bold")
    texts = [ax.text(m.node_s, m.runtime_s, m.text, fontsize=m.size, weight=m.weight)
             for m in labels_of(marks)]
    ax.axhline(bound, color="grey", linestyle="--", linewidth=1)
    ax.annotate("lower bound", (ax.get_xlim()[0], bound), fontsize=7, xytext=(2, 2), textcoords="offset points")
    if floors:  # the node·s floor: no policy lies left of it (fewer node·s at that runtime)
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        ys = [max(bound, y0) * (y1 / max(bound, y0)) ** (i / 60) for i in range(61)]
        xs = [mean_node_seconds_floor(floors, y) for y in ys]
        ax.plot(xs, ys, color="grey", linestyle=":", linewidth=1.2)
        ax.annotate("node·s floor", (xs[30], ys[30]), fontsize=7, xytext=(-4, 0), textcoords="offset points",
                    color="dimgrey", ha="right", rotation=90)
        ax.set_xlim(min(x0, min(xs) / 1.1), x1)
        ax.set_ylim(y0, y1)
    # labels pushed off each other and off the points, a thin line back to their point
    adjust_text(texts, x=[m.node_s for m in marks], y=[m.runtime_s for m in marks], ax=ax,
                expand=(1.1, 1.4), force_text=(0.8, 1.2), iter_lim=300,  # (not a time limit: the same figure each time)
                arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    ax.set_xlabel(f"node·s paid (mean over seeds{', scaled' if scaled else ''}, log scale)")
    ax.set_ylabel(f"runtime s (mean over seeds{', scaled' if scaled else ''}, log scale)")
    ax.set_title(title.replace(", each seed", ",\neach seed").replace("; HTA's presets", ";\nHTA's presets")
                 + "\ncircled red: not dominated by any HTA setting",
                 fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 seed; blast-3stage, io-bound, montage")
    ap.add_argument("--workloads", default=None, help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    ap.add_argument("--clusters", default=",".join(CLUSTERS), help=f"comma-separated, of: {', '.join(CLUSTERS)}")
    ap.add_argument("--tasks", type=int, default=600, help="tasks per WfCommons instance (500–1,000)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/hta-pareto"))
    ap.add_argument("--markdown", type=Path, metavar="FILE",
                    help="also write one summary table (a row per workload × cluster) as Markdown")
    ap.add_argument("--preset", action="append", metavar="SPEC", default=[],
                    help="hold HTA's default and this setting (at most two, e.g. hta-cost:busy_runtimes=3) "
                         "against the rivals in place of hta-time and hta-cost: what the goals would say with "
                         "other presets")
    ap.add_argument("--declared", action="store_true",
                    help="every task declares its cores and memory (Makeflow's .MAKEFLOW CORES and MEMORY per "
                         "category): none takes a whole worker before its category is measured; stored apart")
    ap.add_argument("--packed", action="store_true",
                    help="a measured category's tasks are allocated its peak and share a worker (the simulator's "
                         "world where Work Queue sizes tasks itself; makeflow -T wq gives every task that declares "
                         "nothing a whole worker, CCTools 8.0); stored apart")
    ap.add_argument("--node-hold", choices=list(NODE_HOLDS), default="cluster-autoscaler",
                    help="what the node autoscaler does with an empty node: the cluster-autoscaler keeps it 10 min "
                         "(default), Karpenter's consolidation removes it at once; stored apart")
    ap.add_argument("--rivals", metavar="NAMES", default=None,
                    help="comma-separated: only the rival settings whose label starts with one of these (e.g. "
                         "max-then-drain,static; every shape of each), for a quicker look at one world; the goals' "
                         "reference, max-then-drain, must be among them")
    ap.add_argument("--sweep", action="store_true",
                    help=f"also run HTA as {', '.join(SWEEP)} (tuned settings, "
                         f"shown beside the presets, not counted in the goals)")
    ap.add_argument("--dial", action="store_true",
                    help=f"also run HTA's default with a deadline of {', '.join(f'{f:g}' for f in DIAL_FACTORS)} × "
                         f"its own runtime (the time–cost dial): its points count in the dominance, and its goal "
                         f"is that ≥ {DIAL_KEPT:.0%} of them end by their deadline, their node·s never rising "
                         f"(within {DIAL_RISE:g} ×) as the deadline grows")
    args = ap.parse_args(argv)
    seeds = 1 if args.quick and args.seeds == 5 else args.seeds
    if seeds < 1:
        ap.error(f"--seeds {seeds}: at least 1 seed, e.g. --seeds 5")
    names = args.workloads.split(",") if args.workloads else (QUICK_WORKLOADS if args.quick else WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS] + [c for c in args.clusters.split(",") if c not in CLUSTERS]
    if unknown:
        ap.error(f"unknown workload or cluster: {', '.join(unknown)}")
    hta_settings = preset_settings(ap, args.preset)
    chosen = chosen_rivals(ap, args.rivals)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        if args.markdown:  # before an hour of runs, not after
            args.markdown.touch()
    except OSError as exc:
        ap.error(f"cannot write {exc.filename} ({exc.strerror}): choose another --out or --markdown")
    store = open_store(ap, args.out, args.tasks, args.declared, whole_worker=not args.packed,
                       world=world_key(world(20, args.packed, args.node_hold)))
    misses: list[str] = []
    summary: list[str] = []
    table: list[str] = []
    started = time.perf_counter()
    rival_runs = free_total = still_total = 0  # rival settings held against HTA's, left undominated
    scaled_any = False  # some seed's figures were scaled (a case with seeds of unequal size)
    sweep_cases: dict[str, tuple[list[Point], dict[str, Point]]] = {}  # case → rivals, HTA settings (--sweep)
    over_floor: dict[str, float] = {}  # case → HTA default's node·s over the floor at its runtime
    dial_kept = [0, 0]  # --dial: runs that ended by their deadline, runs
    budget_ratios: list[float] = []  # --dial: spend over budget, per run
    for name in names:
        for cname in args.clusters.split(","):
            cap = CLUSTERS[cname]
            cluster = world(cap, args.packed, args.node_hold)
            settings = {**hta_settings, **(SWEEP if args.sweep else {}),
                        **{k: v for k, v in rivals(cap, cluster.node_cores).items() if chosen(k)}}
            fixed_spec = shaped("static", "1-core", cluster.node_cores)  # (k nodes there at t = 0, pods on them)
            ids = {label: settings_of(spec) for label, spec in settings.items()}
            per: dict[str, list[dict]] = {k: [] for k in settings}
            fixed: dict[int, list[dict]] = {k: [] for k in FIXED_SIZES[cap]}
            # static pools of each size asked for at t = 0 from the one starting node (they pay
            # the latency, as HTA does): the goal's pools, unlike the fixed sizes above
            pools: dict[str, list[dict]] = {f"static pool {k} nodes [{shape}]": []
                                            for k in FIXED_SIZES[cap] for shape in POOL_SHAPES}
            bounds: list[float] = []
            floors: list[NodeSecondsFloor] = []
            sizes: list[tuple[float, float]] = []
            dial: dict[str, list[dict]] = {dial_label(f): [] for f in (DIAL_FACTORS if args.dial else ())}
            budgets: list[dict] = []  # --dial: HTA given the cheapest rival's node·s as its budget
            for seed in range(seeds):
                wl = workload(name, seed, args.tasks, args.out / "workloads")
                if args.declared:
                    wl = dataclasses.replace(wl, declared=True)
                bound = oracle_runtime_s(wl, cluster)
                bounds.append(bound)
                sizes.append(seed_size(wl))
                floors.append(node_seconds_floor(wl, cluster))
                for label, spec in settings.items():
                    per[label].append(store.get((name, cname, label, seed), settings=ids[label], make=
                                                lambda: run_one(name, wl, spec, cluster, seed, bound)))
                for f in DIAL_FACTORS if args.dial else ():
                    deadline = round(f * per["hta"][seed]["runtime_s"], 1)
                    spec = f"hta:deadline_s={deadline}"
                    run = store.get((name, cname, dial_label(f), seed), settings=settings_of(spec),
                                    make=lambda: run_one(name, wl, spec, cluster, seed, bound))
                    dial[dial_label(f)].append({**run, "deadline_s": deadline})
                if args.dial:  # a budget of the cheapest rival setting's node·s that finished
                    cheapest = min((per[k][seed]["node_s"] for k in settings
                                    if k not in hta_settings and per[k][seed]["finished"]), default=None)
                    if cheapest is not None:
                        budget = round(cheapest)
                        spec = f"hta:budget_node_s={budget}"
                        run = store.get((name, cname, BUDGET_LABEL, seed), settings=settings_of(spec),
                                        make=lambda: run_one(name, wl, spec, cluster, seed, bound))
                        budgets.append({**run, "budget_node_s": budget})
                for k in FIXED_SIZES[cap]:
                    c = cluster.model_copy(update={"max_nodes": k, "start_nodes": k})
                    fixed[k].append(store.get((name, cname, f"fixed-{k}", seed),
                                              lambda: run_one(name, wl, fixed_spec, c, seed, bound)))
                    pool_cluster = cluster.model_copy(update={"max_nodes": k})
                    for shape in POOL_SHAPES:
                        spec = shaped("static", shape, cluster.node_cores)
                        pools[f"static pool {k} nodes [{shape}]"].append(store.get(
                            (name, cname, f"pool-{k}-{shape}", seed),
                            lambda: run_one(name, wl, spec, pool_cluster, seed, bound)))
            scales = seed_scales(sizes)  # every seed weighs alike, in the same units on both clusters
            scaled = any(k != SeedScale() for k in scales)
            scaled_any |= scaled
            per_seed = [r["runtime_s"] / b for r, b in zip(per["hta"], bounds, strict=True)]
            bound, floors = scale_references(scales, bounds, floors)
            points = {label: mean_point(label, runs, scales) for label, runs in per.items()}
            dial_pts = [mean_point(label, runs, scales) for label, runs in dial.items()]
            budget_pts = [mean_point(BUDGET_LABEL, budgets, scales)] if len(budgets) == seeds else []
            htas = [points[k] for k in hta_settings] + dial_pts + budget_pts
            tuned = [points[k] for k in SWEEP if k in points and k not in hta_settings]
            rivs = [p for k, p in points.items() if k not in hta_settings and k not in SWEEP]
            fixed_pts = {k: mean_point(f"fixed {k} nodes from t=0, 1-core pods", runs, scales) for k, runs in fixed.items()}
            biggest = fixed_pts[cap]
            best = min((p for p in fixed_pts.values() if p.runtime_s <= BEST_FIXED_WITHIN * biggest.runtime_s),
                       key=lambda p: p.node_s)
            free = undominated(rivs, htas)
            rival_runs += len(rivs)
            free_total += len(free)
            still = [r for r in free if not any(dominates(t, r) for t in tuned)] if tuned else free
            still_total += len(still)
            if tuned:
                sweep_cases[f"{name}/{cname}"] = (rivs, {p.label: p for p in [*htas, *tuned]})
            title = (f"{name}, {cname} ({cap} nodes)" + (", every task declared" if args.declared else "")
                     + (", measured tasks packed at their peak" if args.packed else "")
                     + f", mean of {seeds} seed(s)" + (SCALED if scaled else "")
                     + (f"; HTA's presets replaced by {' and '.join(list(hta_settings)[1:])}" if args.preset else ""))
            print(f"\n{title}")
            print(HEADER)
            print(f"    {'lower bound':{LABEL_WIDTH}} {bound:9,.0f}")
            hta = points["hta"]
            floor_hta = mean_node_seconds_floor(floors, hta.runtime_s)
            print(f"    {'node·s floor at HTA default runtime':{LABEL_WIDTH}} {hta.runtime_s:9,.0f} {'':11} {'':10} "
                  f"{floor_hta:10,.0f}   (HTA default pays {hta.node_s / floor_hta:.2f} × it)")
            over_floor[f"{name}/{cname}"] = hta.node_s / floor_hta
            print(row(biggest, "="))
            print(row(best, "="))
            for h in htas:
                print(row(h, "H"))
            for t in tuned:
                print(row(t, "h"))
            for r in rivs:
                print(row(r, "*" if r in free else ""))
            print("  (= static reference, H: HTA setting, h: HTA tuned (--sweep, not in the goals), "
                  "*: rival setting no HTA setting dominates on runtime and node·s)")
            print("  fixed sizes from t=0 (nodes: runtime s / node·s): "
                  + ", ".join(f"{k}: {p.runtime_s:,.0f} / {p.node_s:,.0f}" for k, p in fixed_pts.items()))
            unfinished = [r for r in rivs if r.unfinished]
            if unfinished:
                print("  unfinished within 30 × the bound (no competitor): "
                      + ", ".join(f"{r.label} ({r.unfinished}/{seeds})" for r in unfinished))
            for r in free:
                cheap = least_mean_runtime_s(floors, r.node_s)  # above the bound: only a slower setting can match it
                print(f"  not dominated: {r.label}" + (
                    f" (as cheap as it, {r.node_s:,.0f} node·s, no policy runs under {cheap:,.0f} s: "
                    f"{cheap / hta.runtime_s:.2f} × HTA default's runtime)" if cheap > bound * (1 + 1e-6) else ""))
                for h in htas:
                    print(f"      vs {h.label}: " + "; ".join(losses(h, r)))
                by = [t.label for t in tuned if dominates(t, r)]
                if tuned:
                    print(f"      a tuned setting dominates it: {', '.join(by)}" if by else
                          "      no tuned setting dominates it either")
            mtd = points[MTD_SAME_PODS]
            pool_pts = [mean_point(label, runs, scales) for label, runs in pools.items()]
            print("  static pools asked for at t=0 (nodes [pods]: runtime s / node·s): "
                  + ", ".join(f"{p.label.split(' ', 2)[2].replace(' nodes', '')}: {p.runtime_s:,.0f} / "
                              f"{p.node_s:,.0f}" for p in pool_pts))
            lines = [*goals(hta, mtd, capped=cap < max(CLUSTERS.values())), pool_goal(hta, pool_pts)]
            if dial:
                kept = [r["runtime_s"] <= r["deadline_s"] for runs in dial.values() for r in runs]
                dial_kept[0] += sum(kept)
                dial_kept[1] += len(kept)
                lines.append(dial_goal(dial_pts, sum(kept), len(kept)))
            if budgets:
                ratios = [r["node_s"] / r["budget_node_s"] for r in budgets]
                budget_ratios.extend(ratios)
                worst = max(ratios)
                lines.append(Goal(f"HTA given the cheapest rival's node·s as its budget spends ≤ {BUDGET_SLACK:g} × it",
                                  worst <= BUDGET_SLACK, "per seed " + ", ".join(
                                      f"{r['node_s']:,.0f} of {r['budget_node_s']:,.0f} ({r['runtime_s']:,.0f} s"
                                      + ("" if r["finished"] else ", unfinished") + ")" for r in budgets),
                                  f"{worst:.2f}"))
            for g in lines:
                print(f"  goal {'met ' if g.met else 'MISS'}: {g.text}: {g.figures}")
                if not g.met:
                    misses.append(f"{name}/{cname}: {g.text}: {g.figures}")
            print(f"  reference, not a goal: the lower bound (pods of at least one core: "
                  f"hta/sim/oracle.py), HTA default {hta.runtime_s / bound:.2f} × it"
                  + (f" (per seed {min(per_seed):.2f}–{max(per_seed):.2f} ×)" if seeds > 1 else "")
                  + f", {MTD_SAME_PODS} "
                  f"{mtd.runtime_s / bound:.2f} ×; the maximum cluster from t=0 (no latency paid) "
                  f"{biggest.runtime_s / bound:.2f} ×")
            if free:
                misses.append(f"{name}/{cname}: {len(free)} rival setting(s) not dominated: "
                              + ", ".join(r.label for r in free))
            png = args.out / f"front-{name}-{cname}{'-preset' if args.preset else ''}.png"  # (not HTA's fronts)
            refs = {"max from t=0 (= best fixed)": biggest} if best is biggest else \
                {"max from t=0": biggest, f"best fixed ({best.label.split()[1]})": best}
            draw(png, title, htas, rivs, refs, bound, free, tuned, floors, scaled)
            fig = lambda p: f"{p.runtime_s:,.0f} s / {p.node_s / 1000:,.1f}k / {p.waste_core_s / 1000:,.1f}k"
            table.append(f"| {name} | {cap} | {bound:,.0f} | " + " | ".join(fig(points[k]) for k in hta_settings)
                         + f" | {fig(mtd)} | {fig(best)} | {floor_hta / 1000:,.1f}k "
                         + f"({hta.node_s / floor_hta:.2f}×) | {len(free)}"
                         + (f" ({len(still)})" if tuned else "") + " | "
                         + "".join(f"{g.ratio}× {'✓' if g.met else '✗'} | " for g in lines)
                         + f"{hta.runtime_s / bound:.2f}× |")
            summary.append(f"{name}/{cname}: {len(free)} not dominated"
                           + (f" ({len(still)} by no tuned setting either)" if tuned else "") + f", front {png}")
            print(f"  front: {png}", flush=True)
    if args.markdown:
        head = ("| workload | nodes | bound s | " + " | ".join(hta_settings) + f" | {MTD_SAME_PODS} | "
                "best fixed from t=0 | node·s floor at hta's runtime (hta / it) | "
                "rivals not dominated" + (" (by no tuned setting either)" if args.sweep else "")
                + f" | hta runtime / {MTD_SAME_PODS} ≤ {RUNTIME_SLACK:g} "
                + f"| hta node·s / {MTD_SAME_PODS} ≤ {1 - MTD_SAVING:g} uncapped, ≤ 1 capped "
                + f"| hta node·s / a static pool from t=0 as fast ≤ {POOL_NODE_S:g} | "
                + ("the dial's largest node·s rise as the deadline grows | the budget's spend / it | "
                   if args.dial else "")
                + "hta / bound |")
        args.markdown.write_text(f"Each cell: runtime / node·s / waste (core·s, during + after the run), mean of "
                                 f"{seeds} seed(s)" + (SCALED + " (every seed weighs alike)" if scaled_any else "")
                                 + ("; every task declares its cores and memory (--declared)" if args.declared else "")
                                 + ("; measured tasks packed at their peak (--packed)" if args.packed else "")
                                 + f".\n\n{head}\n|" + "---|" * (head.count("|") - 1) + "\n"
                                 + "\n".join(table) + "\n")
    print(f"\n{len(store.runs)} runs in {args.out / 'runs.jsonl'}; this call {time.perf_counter() - started:,.0f} s")
    for s in summary:
        print("  " + s)
    print(f"  {free_total} of {rival_runs} rival settings not dominated by HTA's "
          + ("default and presets" if not args.preset else "default and --preset settings")
          + (f" ({still_total} by no tuned setting either)" if args.sweep else ""))
    if over_floor:
        median = statistics.median(over_floor.values())
        worst = max(over_floor, key=over_floor.__getitem__)
        print(f"  HTA default's node·s over the floor at its runtime: median {median:.2f} × (goal ≤ {FLOOR_MEDIAN:g}), "
              f"worst {over_floor[worst]:.2f} × on {worst} (goal ≤ {FLOOR_WORST:g})")
        if median > FLOOR_MEDIAN or over_floor[worst] > FLOOR_WORST:
            misses.append(f"node·s over the floor: median {median:.2f} ×, worst {over_floor[worst]:.2f} × ({worst})")
    if dial_kept[1]:
        share = dial_kept[0] / dial_kept[1]
        print(f"  the dial's deadlines kept: {dial_kept[0]} of {dial_kept[1]} runs ({share:.0%}; goal ≥ {DIAL_KEPT:.0%})")
        if share < DIAL_KEPT:
            misses.append(f"the dial's deadlines kept in {share:.0%} of runs")
    if budget_ratios:
        kept_b = sum(1 for r in budget_ratios if r <= BUDGET_SLACK)
        print(f"  the dial's budgets kept (≤ {BUDGET_SLACK:g} ×): {kept_b} of {len(budget_ratios)} runs; "
              f"spend over budget median {statistics.median(budget_ratios):.2f} ×, worst {max(budget_ratios):.2f} ×")
    if sweep_cases:
        print_covers(sweep_cases, list(hta_settings)[1:])
    if args.preset:
        print(f"\nHTA's presets replaced by {' and '.join(list(hta_settings)[1:])} (--preset): "
              "not the goals' hta-time and hta-cost")
    if misses:
        print(f"\n{len(misses)} goal(s) missed:")
        for m in misses:
            print("  " + m)
        return 1
    print("\nevery goal met")
    return 0


def print_covers(sweep_cases: dict[str, tuple[list[Point], dict[str, Point]]], presets: list[str],
                 top: int = 3) -> None:
    """Which two of the settings run (presets and ``--sweep``'s) would leave rivals undominated
    beside the default on fewest cases, the presets' own rank, the best single setting, and the
    cases no pair clears with the rivals no setting run dominates."""
    candidates = [label for label in next(iter(sweep_cases.values()))[1] if label != "hta"]
    pairs = covers(sweep_cases, candidates)
    if not pairs:
        return
    said = lambda c: (f"{c.rivals_left} rival setting(s) on {c.cases_left} case(s)"
                      + (": " + ", ".join(f"{case} {len(labels)}" for case, labels in c.left.items() if labels)
                         if c.cases_left else ""))
    print(f"\nwhich two of the {len(candidates)} HTA settings run beside the default (presets and --sweep's) "
          "would leave rivals undominated on fewest cases, then fewest rivals (not a goal: the goal's presets "
          "are fixed):")
    for c in pairs[:top]:
        print(f"  #{rank(c, pairs)} {' and '.join(c.settings)}: {said(c)}")
    for c in pairs if presets else []:
        if set(presets) <= set(c.settings):  # the presets' own pair, or one preset's best partner
            what = f"the presets, {' and '.join(presets)}" if len(presets) == 2 else \
                f"the preset {presets[0]} at its best, with {' and '.join(k for k in c.settings if k != presets[0])}"
            print(f"  {what} (#{rank(c, pairs)} of {len(pairs)}): {said(c)}")
            break
    single = covers(sweep_cases, candidates, size=1)[0]
    print(f"  the best one setting alone: {single.settings[0]}: {said(single)}")
    stuck = [case for case in sweep_cases if all(c.left[case] for c in pairs)]
    by_none = "; ".join(f"{case}: {', '.join(r.label for r in free)}" for case, (rivs, htas) in sweep_cases.items()
                        if (free := undominated(rivs, list(htas.values()))))
    if stuck:
        print(f"  no pair clears {', '.join(stuck)}" + (f"; no setting run dominates {by_none}" if by_none else ""))


def preset_settings(ap: argparse.ArgumentParser, presets: list[str]) -> dict[str, str]:
    """HTA's settings held against the rivals: its default and named presets, or (``--preset``)
    its default and at most two settings of the user's; a setting that is not one is one usage line."""
    if not presets:
        return dict(HTA_SETTINGS)
    if len(presets) > 2:
        ap.error(f"--preset {' '.join(presets)}: at most two settings besides HTA's default")
    named = {settings_of(label): label for label in [*SWEEP, *HTA_SETTINGS]}  # stored under these names
    out = {"hta": "hta"}
    for spec in presets:
        try:
            policy = make_policy(spec)
        except (ValueError, LookupError, ImportError) as exc:
            ap.error(f"--preset {spec}: {exc}")
        if not isinstance(policy, HTAPolicy):  # a rival as a preset would leave the rivals' table
            ap.error(f"--preset {spec}: not an HTA setting; give hta, hta-time or hta-cost with settings, "
                     "e.g. hta-cost:busy_runtimes=3")
        label = named.get(settings_of(spec), spec)
        if label in out:
            ap.error(f"--preset {spec}: the same setting as {label}: give settings that differ from "
                     "HTA's default and from each other")
        out[label] = label if label in named.values() else spec
    return out


def open_store(ap: argparse.ArgumentParser, out: Path, tasks: int, declared: bool = False,
               whole_worker: bool = False, world: str = "") -> Store:
    """``OUT/runs.jsonl``, ``OUT`` made if missing; a folder that cannot be written or a
    file that is not a store is one usage line."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        store = Store(out / "runs.jsonl", tasks, declared, whole_worker, world)
        if store.outdated:
            print(f"{len(store.outdated)} run(s) stored in {store.path} counted waste before a task that "
                  "declares nothing counted its category's measured cores: they are run again", flush=True)
        return store
    except OSError as exc:
        ap.error(f"cannot write {exc.filename} ({exc.strerror}): choose another --out")
    except ValueError as exc:
        ap.error(str(exc))


def run_main(main_fn, name: str, interrupted: str = "interrupted") -> None:
    """A bench's ``__main__``: its exit code; Ctrl-C is one line, a closed pipe (piped
    into head) a quiet 141."""
    try:
        sys.exit(main_fn())
    except KeyboardInterrupt:
        sys.exit(f"{name}: {interrupted}")
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(141)

