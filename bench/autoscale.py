"""Benchmark: HTA against HPA, KEDA and work_queue_factory in the simulator,
side by side in one process (5 seeds, same cluster model), with the ratios
the issue sets as goals, then what each of HTA's options buys.

Two reference points say how far the goals can be reached at all in this
cluster model: the waste that sits beside running tasks on busy workers (no
policy that drains only idle workers can remove it), and the runtime of the
largest cluster present from the start with no preparation latency.

    .venv/bin/python bench/autoscale.py [--seeds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from hta.estimator import EstimatorOptions
from hta.model import Observation, ScaleDecision
from hta.policies.hta_policy import HTAPolicy
from hta.sim.cluster import ClusterModel
from hta.sim.compare import compare, print_comparison
from hta.sim.run import Simulation
from hta.sim.workload import load_workload

POLICIES = ["hta", "hpa-20", "hpa-50", "keda-3", "factory"]


class StaticCluster:
    """Reference, not a rival: keeps whatever cluster it starts with."""

    name = "static"

    def decide(self, obs: Observation) -> ScaleDecision:
        return ScaleDecision(next_decision_s=600.0, target_workers=len(obs.workers))


MISSED: list[str] = []  # the goals missed so far: the process exits 1 if any


def check(label: str, value: float, goal: float, better: str = "below") -> str:
    ok = value <= goal if better == "below" else value >= goal
    if not ok:
        MISSED.append(label)
    return f"  {'PASS' if ok else 'MISS'}  {label}: {value:,.3g} (goal {'≤' if better == 'below' else '≥'} {goal:,.3g})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    console = Console(width=130)
    results = {}
    for wl in ("blast-3stage", "io-bound"):
        c = compare(wl, POLICIES, args.seeds)
        results[wl] = c
        print_comparison(c, console)

    b, io = results["blast-3stage"], results["io-bound"]
    m = lambda c, p, k: c.mean(p, k)
    print("\nGoals (means over seeds):")
    best_hpa = min(m(b, "hpa-20", "runtime_s"), m(b, "hpa-50", "runtime_s"))
    print(check("BLAST  HTA waste / HPA-20 waste", m(b, "hta", "waste_core_s") / m(b, "hpa-20", "waste_core_s"), 1 / 8))
    print(check("BLAST  HTA runtime / best HPA runtime", m(b, "hta", "runtime_s") / best_hpa, 1.03))
    print(check("I/O    HTA runtime / HPA-20 runtime", m(io, "hta", "runtime_s") / m(io, "hpa-20", "runtime_s"), 1 / 4))
    print(check("I/O    HTA shortage / HPA-20 shortage",
                m(io, "hta", "shortage_core_s") / m(io, "hpa-20", "shortage_core_s"), 1 / 10))
    for c in (b, io):
        for rival in ("factory", "keda-3"):
            unfinished = sum(1 for r in c.by_policy()[rival] if r.exit_code != 0)
            note = f"   ({rival} did not finish {unfinished} of {args.seeds} runs: its waste stops at the cut-off)" \
                if unfinished else ""
            print(check(f"{c.workload:12s} HTA waste / {rival} waste",
                        m(c, "hta", "waste_core_s") / m(c, rival, "waste_core_s"), 0.5) + note)
            print(check(f"{c.workload:12s} HTA runtime / {rival} runtime",
                        m(c, "hta", "runtime_s") / m(c, rival, "runtime_s"), 1.0))
        print(check(f"{c.workload:12s} HTA runtime / oracle bound", m(c, "hta", "runtime_s") / c.oracle_runtime_s,
                    1.15))

    print("\nHow far the goals can go in this cluster model (means over the same seeds):")
    busy = m(b, "hta", "waste_core_s") - m(b, "hta", "idle_waste_core_s")
    print(f"  BLAST  HTA waste beside running tasks (no policy that drains only idle workers removes it):"
          f" {busy:,.0f} core·s = {busy / m(b, 'hpa-20', 'waste_core_s'):.3f} × HPA-20 waste (the goal is 0.125 for"
          f" all of it); on idle workers {m(b, 'hta', 'idle_waste_core_s'):,.0f} core·s")
    full = ClusterModel(start_nodes=ClusterModel().max_nodes)
    for c in (b, io):
        static = [Simulation(load_workload(c.workload, s), StaticCluster(), full, seed=s).run().runtime_s
                  for s in range(args.seeds)]
        st = statistics.fmean(static)
        print(f"  {c.workload:12s} largest cluster from t=0, no latency: runtime {st:,.0f} s = "
              f"{st / c.oracle_runtime_s:.2f} × oracle bound; HTA = {m(c, 'hta', 'runtime_s') / st:.2f} × it")

    print("\nWhat each HTA option buys (same seeds; default = all on, median latency):")
    variants = {
        "default": HTAPolicy,
        "no lookahead": lambda: HTAPolicy(options=EstimatorOptions(lookahead=False)),
        "no tail awareness": lambda: HTAPolicy(options=EstimatorOptions(tail_aware=False)),
        "no barrier awareness": lambda: HTAPolicy(options=EstimatorOptions(barrier_aware=False)),
        "no stabilisation": lambda: HTAPolicy(stabilize=False),
        "last latency": lambda: HTAPolicy(latency_statistic="last"),
        "drain after 2 checks": lambda: HTAPolicy(drain_after=2),
        "idle check every 15 s": lambda: HTAPolicy(check_s=15.0),
    }
    for wl in ("blast-3stage", "io-bound"):
        for name, make in variants.items():
            rs = [Simulation(load_workload(wl, s), make(), seed=s).run() for s in range(args.seeds)]

            def f(k: str, rs: list = rs) -> float:
                return statistics.fmean(getattr(r, k) for r in rs)

            print(f"  {wl:13s} {name:22s} runtime {f('runtime_s'):7,.0f} s  waste {f('waste_core_s'):8,.0f}"
                  f" (idle {f('idle_waste_core_s'):7,.0f})"
                  f"  shortage {f('shortage_core_s'):9,.0f}  node {f('node_s'):8,.0f}")

    if MISSED:
        print(f"\n{len(MISSED)} goal(s) missed: {'; '.join(' '.join(m.split()) for m in MISSED)}")
        sys.exit(1)
    print("\nevery goal met")


if __name__ == "__main__":
    main()
