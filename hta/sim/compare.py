"""Run several policies on one workload over several seeds, side by side.

Used by ``hta simulate`` and ``bench/autoscale.py``. Each run gets a fresh
policy object and writes its own scaling log (same format as ``hta makeflow``).
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hta.console import PipeConsole
from hta.plural import counted
from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel, unrunnable
from hta.sim.oracle import NodeSecondsFloor, mean_node_seconds_floor, node_seconds_floor
from hta.sim.run import Simulation
from hta.sim.workload import Workload, load_workload
from hta.summary import RunSummary

#: a run slower than this many times the oracle bound is cut off and marked unfinished
CUTOFF_FACTOR = 30.0

METRICS = ("runtime_s", "waste_core_s", "idle_waste_core_s", "teardown_waste_core_s", "shortage_core_s", "node_s",
           "teardown_node_s", "lost_work_core_s", "scale_actions")


@dataclass
class Comparison:
    workload: str
    runs: list[RunSummary]
    oracle_runtime_s: float
    #: one per seed (the floor holds in every world: ``tests/test_bound.py`` plays holds and transfers)
    floors: list[NodeSecondsFloor] = field(default_factory=list)

    def by_policy(self) -> dict[str, list[RunSummary]]:
        out: dict[str, list[RunSummary]] = {}
        for r in self.runs:
            out.setdefault(r.policy, []).append(r)
        return out

    def mean(self, policy: str, metric: str) -> float:
        return statistics.fmean(getattr(r, metric) for r in self.by_policy()[policy])

    def floor_node_s(self, policy: str) -> float | None:
        """The fewest node·s any policy pays at ``policy``'s mean runtime. None where there is
        no floor (no seed run) or no finishing time (a run cut off unfinished: its
        runtime is the cutoff)."""
        if not self.floors or any(r.exit_code != 0 for r in self.by_policy()[policy]):
            return None
        return mean_node_seconds_floor(self.floors, self.mean(policy, "runtime_s"))

    def as_json(self) -> dict:
        runs = []
        for r in self.runs:
            d = {"workload": r.workload, "policy": r.policy, "seed": r.seed, "finished": r.exit_code == 0}
            d.update({m: round(getattr(r, m), 3) if isinstance(getattr(r, m), float) else getattr(r, m)
                      for m in METRICS})
            d["log"] = r.source
            runs.append(d)
        floors = {p: self.floor_node_s(p) for p in self.by_policy()}
        return {"runs": runs, "oracle": {"workload": self.workload, "runtime_s": round(self.oracle_runtime_s, 3),
                                         "node_s_floor_at_mean_runtime": {
                                             p: round(f, 3) if f is not None and math.isfinite(f) else None
                                             for p, f in floors.items()}}}


def compare(workload: str | Workload, policies: list[str], seeds: int, cluster: ClusterModel | None = None,
            out: Path | None = None) -> Comparison:
    """``workload``: a generator's name or a WfFormat file (drawn per seed), or a workload
    already read (a user's Makeflow: the seeds draw only the world's latencies)."""
    cluster = cluster or ClusterModel()
    names = [make_policy(p).name for p in policies]  # fail fast on a bad name
    for name in names:
        if names.count(name) > 1:  # (its runs would be counted as more seeds of one row)
            twice = [q for q, n in zip(policies, names) if n == name]
            raise ValueError(f"policy {name!r} is named {len(twice)} times ({', '.join(twice)}): name each policy once")
    runs = []
    oracle = []
    floors = []
    label, load = _source(workload)
    for seed in range(seeds):  # (refused before any run, not after some)
        if (why := unrunnable(load(seed), cluster)) is not None:
            raise ValueError(why)
    for seed in range(seeds):
        wl = load(seed)
        floor = node_seconds_floor(wl, cluster)  # (it holds the runtime bound too)
        bound = floor.runtime_bound_s
        oracle.append(bound)
        floors.append(floor)
        # a run far slower than the lower bound is reported unfinished (a policy that never
        # scales); 30 ×, since the barrier-aware bound is tighter than the old one, under
        # which HPA on io-bound (8,845 s, 20.4 × today's bound) finished within 20 ×
        run_cluster = cluster.model_copy(update={"horizon_s": min(cluster.horizon_s, CUTOFF_FACTOR * bound)})
        for p in policies:
            path = out / f"{label}-{p}-seed{seed}.jsonl" if out else None
            log: ScalingLogWriter | None = None
            try:
                log = ScalingLogWriter(path)  # (the file exists from here: a Ctrl-C while the
                # simulation is still being built, a 400-task world, must not leave it empty)
                sim = Simulation(load(seed), make_policy(p), run_cluster, seed=seed, log=log)
                runs.append(sim.run(label))
            except BaseException:  # Ctrl-C: no half-written log is left to be read as a run
                if log is not None and path is not None:
                    log.close()
                    path.unlink(missing_ok=True)
                raise
    return Comparison(label, runs, statistics.fmean(oracle), floors)


def _source(workload: str | Workload) -> tuple[str, Callable[[int], Workload]]:
    """The workload's name in tables and file names, and its draw for a seed."""
    if isinstance(workload, Workload):
        return workload.name, lambda seed: copy.deepcopy(workload)  # (a run must not see another's changes)
    return (Path(workload).stem if workload.endswith(".json") else workload), lambda seed: load_workload(workload, seed)


def _ms(values: list[float]) -> str:
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:,.0f}"
    return f"{m:,.0f} ± {statistics.stdev(values):,.0f}"


def _floor(c: Comparison, policy: str) -> str:
    floor = c.floor_node_s(policy)
    if floor is None:
        return "–"
    if not math.isfinite(floor) or floor <= 0:
        return "–"
    return f"{floor:,.0f} ({c.mean(policy, 'node_s') / floor:.2f}×)"


def comparison_table(c: Comparison) -> Table:
    """One row per policy. Waste and node·s count through the teardown (the cluster left
    after the workflow's last task, until the policy let it go); "after the end" is that part.
    "node·s floor" is the fewest node·s any policy pays at the row's mean runtime, and how
    many times it the row paid (``hta.sim.oracle.mean_node_seconds_floor``)."""
    n = len(next(iter(c.by_policy().values())))
    t = Table(title=f"{c.workload}: mean ± sd over {counted(n, 'seed')}",
              title_justify="left")
    for col in ("policy", "runtime s", "waste core·s", "on idle workers", "after the end", "shortage core·s",
                "node·s", "node·s after the end", "node·s floor", "lost core·s", "actions"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for policy, runs in c.by_policy().items():
        unfinished = sum(1 for r in runs if r.exit_code != 0)
        name = policy + (f" ({unfinished} unfinished)" if unfinished else "")
        cells = [_ms([getattr(r, m) for r in runs]) for m in METRICS]
        cells.insert(METRICS.index("teardown_node_s") + 1, _floor(c, policy))
        t.add_row(name, *cells)
    t.add_row("oracle bound", f"{c.oracle_runtime_s:,.0f}", *[""] * len(METRICS))
    return t


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    (console or PipeConsole(width=190)).print(comparison_table(c))
