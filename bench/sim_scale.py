"""How long the simulator takes, and how much memory, as the workflow grows.

Runs HTA's policy through the simulator (production's controller, observation
builder, lookahead and estimator, as ``hta simulate`` does), each case in its own
process, and prints the wall-clock seconds and the process's peak resident memory
(``getrusage`` maxrss):

- the BLAST 3-stage shape scaled to 1k, 10k and 100k tasks (widths in the thesis's
  200/34/164 proportions; 3-core nodes, at most 20, the thesis's preparation latency),
  built in memory;
- a BLAST-shaped WfFormat file of its own making, read as ``hta simulate --workflow``
  reads one (loading included): three stages of 4,000, 2,000 and 4,000 tasks between
  their split and reduce tasks (10,006 tasks), and ten times that, on 200 nodes: a
  wider cluster, more running tasks and workers in every observation.

Exits 1 if a goal is missed: 10k tasks under 60 s, 100k under 600 s, either way.

    .venv/bin/python bench/sim_scale.py [--quick]     # --quick: the 10k cases only
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS_S = {10_000: 60.0, 100_000: 600.0}
#: the WfFormat cases: (stage widths, nodes)
WFFORMAT = {10_006: ((4_000, 2_000, 4_000), 200), 100_006: ((40_000, 20_000, 40_000), 200)}


def widths(n: int) -> tuple[int, ...]:
    """Stage widths in BLAST's 200/34/164 proportions, for n tasks in all (3 splits, 3 reduces)."""
    k = (n - 6) / 398
    w = [max(1, round(x * k)) for x in (200, 34, 164)]
    w[0] += n - 6 - sum(w)
    return tuple(w)


def one(n: int, policy: str, seed: int, wfformat: Path | None = None, nodes: int = 20) -> dict:
    from hta.policies.registry import make_policy
    from hta.sim.cluster import ClusterModel
    from hta.sim.run import Simulation
    from hta.sim.workload import blast_3stage, load_workload, parse_wfformat

    t0 = time.perf_counter()
    if wfformat is not None:  # (loading counted: as hta simulate --workflow reads it)
        wl = load_workload(str(wfformat))
    else:
        wl = parse_wfformat(blast_3stage(seed, widths(n)), f"blast-3stage-{n}")
        t0 = time.perf_counter()
    sim = Simulation(wl, make_policy(policy), ClusterModel(max_nodes=nodes, horizon_s=1e8), seed=seed)
    s = sim.run()
    wall = time.perf_counter() - t0
    return {"tasks": len(wl.tasks), "seconds": wall, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "finished": s.exit_code == 0, "simulated_runtime_s": s.runtime_s,
            "steps": len(sim.controller.samples), "decisions": len(sim.controller.decisions)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 10k cases only")
    ap.add_argument("--policy", default="hta")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--wfformat", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--nodes", type=int, default=20, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.policy, args.seed, args.wfformat, args.nodes)))
        return 0
    missed: list[str] = []
    sizes = [10_000] if args.quick else [1_000, 10_000, 100_000]
    print(f"policy {args.policy}, seed {args.seed}")
    print(f"{'tasks':>8} {'shape':>36} {'wall s':>9} {'peak RSS MB':>12} {'sim runtime s':>14} {'records':>8}  goal")
    cases = [(n, f"scaled {'/'.join(map(str, widths(n)))}, 20 nodes", ["--one", str(n)]) for n in sizes]
    with tempfile.TemporaryDirectory() as tmp:
        for n, (stages, nodes) in WFFORMAT.items():
            if args.quick and n > 20_000:
                continue
            from hta.sim.workload import blast_3stage

            path = Path(tmp) / f"blast-{n}.json"
            path.write_text(json.dumps(blast_3stage(args.seed, stages)))
            cases.append((n, f"WfFormat {'/'.join(map(str, stages))}, {nodes} nodes",
                          ["--one", str(n), "--wfformat", str(path), "--nodes", str(nodes)]))
        for n, shape, argv in cases:
            run_case(n, shape, argv, args, missed)
    if missed:
        print(f"missed: {', '.join(missed)}")
    return 1 if missed else 0


def run_case(n: int, shape: str, argv: list[str], args: argparse.Namespace, missed: list[str]) -> None:
    """Run one case in its own process (its own peak RSS) and print its row."""
    out = subprocess.run([sys.executable, __file__, *argv, "--policy", args.policy, "--seed", str(args.seed)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{n:>8} {shape:>36} failed: "
              f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
        missed.append(f"{n} ({shape})")
        return
    r = json.loads(out.stdout)
    goal = GOALS_S.get(round(n, -3))
    passed = goal is not None and r["seconds"] < goal and r["finished"]
    verdict = "" if goal is None else ("PASS" if passed else "MISS") + f" (< {goal:.0f} s)"
    if goal is not None and not passed:
        missed.append(f"{n} ({shape})")
    print(f"{r['tasks']:>8} {shape:>36} {r['seconds']:>9.1f} {r['maxrss_mb']:>12.0f} "
          f"{r['simulated_runtime_s']:>14.0f} {r['steps']:>8}  {verdict}"
          + ("" if r["finished"] else "  (unfinished)"))


if __name__ == "__main__":
    sys.exit(main())
