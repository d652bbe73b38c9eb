"""Benchmark: the event-driven estimator vs a direct transcription of the
thesis's Algorithm 1, in one process, on the same inputs.

1. Agreement: on small random inputs (integer runtimes, so the per-second
   loop is exact) both must reach the same decision (workers to add, idle
   workers unneeded).
2. Speed: both on growing inputs, with the ratio; the event-driven one alone
   on the sizes Algorithm 1 cannot reach (100k tasks / 1k workers: goal
   < 50 ms; 1M tasks: goal < 1 s).

    .venv/bin/python bench/estimator.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from algorithm1 import algorithm1  # noqa: E402
from scenarios import scenario  # noqa: E402

from hta.estimator import EstimatorOptions, QueueDrainEstimator  # noqa: E402
from hta.model import UpcomingTasks  # noqa: E402

PLAIN = QueueDrainEstimator(EstimatorOptions(lookahead=False, tail_aware=False))
L = 157.0


def timed(fn, *args, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, out


def ours(obs):
    e = PLAIN.estimate(obs, L)
    return e.packed_need, sorted(e.unused_idle)


def main() -> None:
    agree = 0
    cases = 200
    for seed in range(cases):
        obs = scenario(n_waiting=1 + seed % 40, n_workers=1 + seed % 12, seed=seed)
        a = algorithm1(obs, L)
        b = ours(obs)
        agree += (a[0], sorted(a[1])) == b
    print(f"agreement on {cases} small inputs: {agree}/{cases} identical decisions")

    print(f"{'waiting':>9} {'workers':>8} {'algorithm 1':>12} {'event-driven':>13} {'ratio':>8}")
    for n, w in [(100, 10), (1_000, 50), (5_000, 100)]:
        obs = scenario(n, w, seed=1)
        ta, _ = timed(algorithm1, obs, L, repeat=1)
        tb, _ = timed(ours, obs)
        print(f"{n:>9,} {w:>8,} {ta * 1e3:>10.1f}ms {tb * 1e3:>11.2f}ms {ta / tb:>7.0f}x")
    for n, w, goal in [(100_000, 1_000, 0.050), (1_000_000, 1_000, 1.0)]:
        obs = scenario(n, w, seed=2)
        tb, _ = timed(ours, obs)
        ok = "meets" if tb < goal else "MISSES"
        print(f"{n:>9,} {w:>8,} {'—':>12} {tb * 1e3:>11.2f}ms   goal < {goal * 1e3:.0f} ms: {ok}")

    # production options (lookahead, barrier and tail awareness) with a barrier over every running task
    obs = with_barrier(scenario(100_000, 1_000, seed=2, integer_times=False))
    tb, _ = timed(lambda o: QueueDrainEstimator().estimate(o, L), obs)
    print(f"{100_000:>9,} {1_000:>8,} {'—':>12} {tb * 1e3:>11.2f}ms   all options on, a barrier over "
          f"{len(obs.running):,} running tasks: {'meets' if tb < 0.050 else 'MISSES'} < 50 ms")


def with_barrier(obs):
    """The same input with spread runtimes and 5,000 tasks that wait for every running one."""
    cats = {k: m.model_copy(update={"runtime_min_s": 0.8 * m.runtime_mean_s, "runtime_max_s": 1.2 * m.runtime_mean_s,
                                    "runtime_p90_s": 1.16 * m.runtime_mean_s})
            for k, m in obs.categories.items()}
    after = [f"task:{t.task_id}" for t in obs.running]
    up = UpcomingTasks(id="u0", category="c0", count=5_000, request=cats["c0"].peak, after=after)
    return obs.model_copy(update={"categories": cats, "upcoming": [up]})


if __name__ == "__main__":
    main()
