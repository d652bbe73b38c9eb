"""How long the simulator takes, and how much memory, as the workflow grows.

Runs HTA's policy through the simulator (production's controller, observation
builder, lookahead and estimator, as ``hta simulate`` does) on the BLAST 3-stage
shape scaled to 1k, 10k and 100k tasks (widths in the thesis's 200/34/164
proportions; 3-core nodes, at most 20, the thesis's preparation latency), each
size in its own process, and prints the wall-clock seconds and the process's
peak resident memory (``getrusage`` maxrss). Exits 1 if a goal is missed:
10k tasks under 60 s, 100k under 600 s.

    .venv/bin/python bench/sim_scale.py [--quick]     # --quick: 1k and 10k only
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOALS_S = {10_000: 60.0, 100_000: 600.0}


def widths(n: int) -> tuple[int, ...]:
    """Stage widths in BLAST's 200/34/164 proportions, for n tasks in all (3 splits, 3 reduces)."""
    k = (n - 6) / 398
    w = [max(1, round(x * k)) for x in (200, 34, 164)]
    w[0] += n - 6 - sum(w)
    return tuple(w)


def one(n: int, policy: str, seed: int) -> dict:
    from hta.policies.registry import make_policy
    from hta.sim.cluster import ClusterModel
    from hta.sim.run import Simulation
    from hta.sim.workload import blast_3stage, parse_wfformat

    wl = parse_wfformat(blast_3stage(seed, widths(n)), f"blast-3stage-{n}")
    t0 = time.perf_counter()
    sim = Simulation(wl, make_policy(policy), ClusterModel(horizon_s=1e8), seed=seed)
    s = sim.run()
    wall = time.perf_counter() - t0
    return {"tasks": len(wl.tasks), "seconds": wall, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "finished": s.exit_code == 0, "simulated_runtime_s": s.runtime_s,
            "steps": len(sim.controller.samples), "decisions": len(sim.controller.decisions)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k and 10k tasks only")
    ap.add_argument("--policy", default="hta")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.policy, args.seed)))
        return 0
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    missed = []
    print(f"policy {args.policy}, BLAST 3-stage scaled, seed {args.seed}, 20 nodes x 3 cores")
    print(f"{'tasks':>8} {'widths':>20} {'wall s':>9} {'peak RSS MB':>12} {'sim runtime s':>14} {'records':>8}  goal")
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--policy", args.policy,
                              "--seed", str(args.seed)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{n:>8} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            missed.append(n)
            continue
        r = json.loads(out.stdout)
        goal = GOALS_S.get(n)
        passed = goal is not None and r["seconds"] < goal and r["finished"]
        verdict = "" if goal is None else ("PASS" if passed else "MISS") + f" (< {goal:.0f} s)"
        if goal is not None and verdict.startswith("MISS"):
            missed.append(n)
        print(f"{r['tasks']:>8} {'/'.join(map(str, widths(n))):>20} {r['seconds']:>9.1f} {r['maxrss_mb']:>12.0f} "
              f"{r['simulated_runtime_s']:>14.0f} {r['steps']:>8}  {verdict}"
              + ("" if r["finished"] else "  (unfinished)"))
    if missed:
        print(f"missed: {', '.join(map(str, missed))} tasks")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
