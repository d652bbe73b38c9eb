"""Run several policies on one workload over several seeds, side by side.

Used by ``hta simulate`` and ``bench/autoscale.py``. Each run gets a fresh
policy object and writes its own scaling log (same format as ``hta makeflow``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hta.policies.base import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.oracle import oracle_runtime_s
from hta.sim.workload import load_workload
from hta.sim.run import Simulation
from hta.sim.world import ClusterModel
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

    def by_policy(self) -> dict[str, list[RunSummary]]:
        out: dict[str, list[RunSummary]] = {}
        for r in self.runs:
            out.setdefault(r.policy, []).append(r)
        return out

    def mean(self, policy: str, metric: str) -> float:
        return statistics.fmean(getattr(r, metric) for r in self.by_policy()[policy])

    def as_json(self) -> dict:
        runs = []
        for r in self.runs:
            d = {"workload": r.workload, "policy": r.policy, "seed": r.seed, "finished": r.exit_code == 0}
            d.update({m: round(getattr(r, m), 3) if isinstance(getattr(r, m), float) else getattr(r, m)
                      for m in METRICS})
            d["log"] = r.source
            runs.append(d)
        return {"runs": runs, "oracle": {"workload": self.workload, "runtime_s": round(self.oracle_runtime_s, 3)}}


def compare(workload: str, policies: list[str], seeds: int, cluster: ClusterModel | None = None,
            out: Path | None = None) -> Comparison:
    cluster = cluster or ClusterModel()
    for p in policies:
        make_policy(p)  # fail fast on a bad name
    runs = []
    oracle = []
    label = Path(workload).stem if workload.endswith(".json") else workload
    for seed in range(seeds):
        wl = load_workload(workload, seed)
        bound = oracle_runtime_s(wl, cluster)
        oracle.append(bound)
        # a run far slower than the lower bound is reported unfinished (a policy that never
        # scales); 30 ×, since the barrier-aware bound is tighter than the old one, under
        # which HPA on io-bound (8,845 s, 20.4 × today's bound) finished within 20 ×
        run_cluster = cluster.model_copy(update={"horizon_s": min(cluster.horizon_s, CUTOFF_FACTOR * bound)})
        for p in policies:
            path = out / f"{label}-{p}-seed{seed}.jsonl" if out else None
            sim = Simulation(load_workload(workload, seed), make_policy(p), run_cluster, seed=seed,
                             log=ScalingLogWriter(path))
            runs.append(sim.run(label))
    return Comparison(label, runs, statistics.fmean(oracle))


def _ms(values: list[float]) -> str:
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:,.0f}"
    return f"{m:,.0f} ± {statistics.stdev(values):,.0f}"


def comparison_table(c: Comparison) -> Table:
    """One row per policy. Waste and node·s count through the teardown (the cluster left
    after the workflow's last task, until the policy let it go); "after the end" is that part."""
    t = Table(title=f"{c.workload}: mean ± sd over {len(next(iter(c.by_policy().values())))} seeds",
              title_justify="left")
    for col in ("policy", "runtime s", "waste core·s", "on idle workers", "after the end", "shortage core·s",
                "node·s", "node·s after the end", "lost core·s", "actions"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for policy, runs in c.by_policy().items():
        unfinished = sum(1 for r in runs if r.exit_code != 0)
        name = policy + (f" ({unfinished} unfinished)" if unfinished else "")
        t.add_row(name, *(_ms([getattr(r, m) for r in runs]) for m in METRICS))
    t.add_row("oracle bound", f"{c.oracle_runtime_s:,.0f}", *[""] * (len(METRICS) - 1))
    return t


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    (console or Console(width=170)).print(comparison_table(c))
