"""Benchmark: the event-driven estimator vs a direct transcription of the
thesis's Algorithm 1, in one process, on the same inputs.

1. Agreement: on small random inputs (integer runtimes, so the per-second
   loop is exact) both should reach the same decision (workers to add, idle
   workers unneeded). Reported only.
2. Speed: both on growing inputs, with the ratio; the event-driven one alone
   on the sizes Algorithm 1 cannot reach (100k tasks / 1k workers: goal
   < 50 ms; 1M tasks: goal < 1 s).
3. Side by side: today's estimator and its frozen predecessor
   (``bench/estimator_before.py``) on the same large inputs, the same options,
   interleaved runs (best CPU time of 25 each, the garbage collector off while
   either runs, as :mod:`timeit` does): both must give the same estimate, and the
   new one must not be more than 1.15x slower.

Exits non-zero if a goal line (2) or a side-by-side line (3) misses.

    .venv/bin/python bench/estimator.py
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimator_before as before  # noqa: E402
from algorithm1 import algorithm1  # noqa: E402
from scenarios import scenario  # noqa: E402

from hta.estimator import EstimatorOptions, QueueDrainEstimator  # noqa: E402
from hta.model import Observation, UpcomingTasks  # noqa: E402

#: the thesis's Algorithm 1 plays the queue oldest first (its reading of the master), so the
#: estimator held to it does too
PLAIN = QueueDrainEstimator(EstimatorOptions(lookahead=False, tail_aware=False, newest_first=False))
L = 157.0
#: the new estimator may be at most this much slower than the one it replaced
MAX_SLOWDOWN = 1.15
#: goal lines take the best of this many runs: the goal is the code's, not a busy neighbour's
GOAL_REPEAT = 7


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


def main() -> int:
    agreement()
    failures = speed() + side_by_side()
    if failures:
        print(f"FAILED: {'; '.join(failures)}")
        return 1
    return 0


def agreement() -> None:
    """Reported, not a goal: it does not set the exit code (seed 185 has disagreed since before
    the estimator's refactor; tests/test_sim_rules.py holds the first 60 seeds to it)."""
    agree = 0
    cases = 200
    for seed in range(cases):
        obs = scenario(n_waiting=1 + seed % 40, n_workers=1 + seed % 12, seed=seed)
        a = algorithm1(obs, L)
        b = ours(obs)
        agree += (a[0], sorted(a[1])) == b
    print(f"agreement on {cases} small inputs: {agree}/{cases} identical decisions")


def speed() -> list[str]:
    failures = []
    print(f"{'waiting':>9} {'workers':>8} {'algorithm 1':>12} {'event-driven':>13} {'ratio':>8}")
    for n, w in [(100, 10), (1_000, 50), (5_000, 100)]:
        obs = scenario(n, w, seed=1)
        ta, _ = timed(algorithm1, obs, L, repeat=1)
        tb, _ = timed(ours, obs)
        print(f"{n:>9,} {w:>8,} {ta * 1e3:>10.1f}ms {tb * 1e3:>11.2f}ms {ta / tb:>7.0f}x")
    for n, w, goal in [(100_000, 1_000, 0.050), (1_000_000, 1_000, 1.0)]:
        obs = scenario(n, w, seed=2)
        tb, _ = timed(ours, obs, repeat=GOAL_REPEAT)
        ok = "meets" if tb < goal else "MISSES"
        print(f"{n:>9,} {w:>8,} {'—':>12} {tb * 1e3:>11.2f}ms   goal < {goal * 1e3:.0f} ms: {ok}")
        if tb >= goal:
            failures.append(f"{n:,} tasks took {tb * 1e3:.1f} ms (goal < {goal * 1e3:.0f} ms)")

    # production options (lookahead, barrier and tail awareness) with a barrier over every running task
    obs = with_barrier(scenario(100_000, 1_000, seed=2, integer_times=False))
    tb, _ = timed(lambda o: QueueDrainEstimator().estimate(o, L), obs, repeat=GOAL_REPEAT)
    print(f"{100_000:>9,} {1_000:>8,} {'—':>12} {tb * 1e3:>11.2f}ms   all options on, a barrier over "
          f"{len(obs.running):,} running tasks: {'meets' if tb < 0.050 else 'MISSES'} < 50 ms")
    if tb >= 0.050:
        failures.append(f"all options on, barrier: {tb * 1e3:.1f} ms (goal < 50 ms)")
    return failures


def side_by_side(rounds: int = 25) -> list[str]:
    """Today's estimator vs the frozen one it replaced, same inputs and options."""
    plain = dict(lookahead=False, tail_aware=False)
    cases: list[tuple[str, Observation, dict[str, bool]]] = [
        ("100,000 tasks, 1,000 workers", scenario(100_000, 1_000, seed=2), plain),
        ("1,000,000 tasks, 1,000 workers", scenario(1_000_000, 1_000, seed=2), plain),
        ("5,000 tasks + 8 stages of 5,000, all options on", with_stages(scenario(5_000, 1_000, seed=2,
                                                                                integer_times=False)), {}),
    ]
    failures = []
    print(f"side by side with bench/estimator_before.py, CPU time, best of {rounds} interleaved runs each:")
    print(f"  {'input':<48} {'before':>10} {'now':>10} {'now/before':>11}  {'same play':<10} {'workers':>17}  "
          f"stages released")
    for name, obs, opts in cases:
        # the rules added since are off (tests/test_estimator_refactor.py checks each on its own)
        new = QueueDrainEstimator(EstimatorOptions(**opts, unmeasured_floor=False, overdue_past_longest=False,
                                                   release_to_idle_first=False, newest_first=False))
        old = before.QueueDrainEstimator(before.EstimatorOptions(**opts))
        t_new, t_old, e_new, e_old = race(lambda: new.estimate(obs, L), lambda: old.estimate(obs, L), rounds)
        ratio = t_new / t_old
        same = fields(e_new) == fields(e_old)
        workers = f"{e_old.workers_needed:,} → {e_new.workers_needed:,}"
        print(f"  {name:<48} {t_old * 1e3:>8.2f}ms {t_new * 1e3:>8.2f}ms {ratio:>10.2f}x  "
              f"{'yes' if same else 'NO':<10} {workers:>17}  {len(e_new.releases)}")
        if ratio > MAX_SLOWDOWN:
            failures.append(f"{name}: {ratio:.2f}x slower than before (limit {MAX_SLOWDOWN}x)")
        if not same:
            failures.append(f"{name}: estimate differs from before")
    return failures


A = TypeVar("A")
B = TypeVar("B")


def race(a: Callable[[], A], b: Callable[[], B], rounds: int) -> tuple[float, float, A, B]:
    """Best CPU time of each, alternating a and b: on a machine shared with other jobs,
    CPU time counts this process's work, not its waits for a core. The cyclic garbage
    collector is off while either runs, as :mod:`timeit` turns it off: with a million
    tasks' observation alive, a full collection walks all of it, and it lands on whichever
    call happens to cross the allocation threshold, not on the one that made the garbage."""
    best_a = best_b = float("inf")
    out_a, out_b = a(), b()  # warm-up
    was_enabled = gc.isenabled()
    try:
        for _ in range(rounds):
            gc.collect()
            gc.disable()
            t0 = time.process_time()
            out_a = a()
            t1 = time.process_time()
            gc.collect()  # (outside both timings: a's garbage is not b's to pay)
            t1b = time.process_time()
            out_b = b()
            t2 = time.process_time()
            if was_enabled:
                gc.enable()
            best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1b)
    finally:
        if was_enabled:
            gc.enable()
    return best_a, best_b, out_a, out_b


def fields(e: object) -> tuple:
    """What the play found, in the fields the frozen Estimate has (the two modules' Estimate
    classes never compare equal as objects), all but the purchase: since the tail cap counts
    the work still in flight at the horizon, it may buy more than the frozen one did (the
    workers column; tests/test_estimator_refactor.py checks that purchase against the rule)."""
    return tuple(getattr(e, f.name) for f in dataclasses.fields(before.Estimate) if f.name != "workers_needed")


def with_barrier(obs):
    """The same input with spread runtimes and 5,000 tasks that wait for every running one."""
    cats = {k: m.model_copy(update={"runtime_min_s": 0.8 * m.runtime_mean_s, "runtime_max_s": 1.2 * m.runtime_mean_s,
                                    "runtime_p90_s": 1.16 * m.runtime_mean_s})
            for k, m in obs.categories.items()}
    after = [f"task:{t.task_id}" for t in obs.running]
    up = UpcomingTasks(id="u0", category="c0", count=5_000, request=cats["c0"].peak, after=after)
    return obs.model_copy(update={"categories": cats, "upcoming": [up]})


def with_stages(obs, stages: int = 8, stage_tasks: int = 5_000):
    """A workflow that lookahead plays out: short spread runtimes (12, 25, 40 s), the
    waiting groups named, and a chain of stages, the first after the first waiting
    group, each next one after the one before, the fourth also after every running
    task (a barrier). Within the horizon several stages are released and run."""
    cats = {k: m.model_copy(update={"runtime_mean_s": rt, "runtime_median_s": rt, "runtime_min_s": 0.8 * rt,
                                    "runtime_max_s": 1.2 * rt, "runtime_p90_s": 1.16 * rt})
            for (k, m), rt in zip(obs.categories.items(), (12.0, 25.0, 40.0))}
    waiting = [g.model_copy(update={"id": f"g{k}"}) for k, g in enumerate(obs.waiting)]
    running = [f"task:{t.task_id}" for t in obs.running]
    upcoming, after = [], [waiting[0].id]
    for k in range(stages):
        c = f"c{k % len(cats)}"
        upcoming.append(UpcomingTasks(id=f"s{k}", category=c, count=stage_tasks, request=cats[c].peak, after=after))
        after = [f"s{k}"] + (running if k == 2 else [])
    return obs.model_copy(update={"categories": cats, "waiting": waiting, "upcoming": upcoming})


if __name__ == "__main__":
    sys.exit(main())
