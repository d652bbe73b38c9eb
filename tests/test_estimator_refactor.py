"""The readable estimator (``hta/estimator.py``) gives exactly the answers of the
one it replaced (``bench/estimator_before.py``, a frozen copy), but for the
rules changed since, each checked on its own: ``unmeasured_floor``,
``overdue_past_longest`` and ``release_to_idle_first`` (off here; their own tests are
in ``test_policy_hta.py``), and
tail awareness (:func:`tail_cap_now`: the work tasks running at the horizon still hold
their cores for, never-measured tasks capped apart from measured ones, and the work
over the share of a worker's cores the tasks that fit in it use).

Inputs are ``bench/scenarios.py``'s random observations, widened with what those
lack: lookahead (upcoming groups waiting for waiting groups, for other upcoming
groups, for running tasks — barriers over many — or for nothing), categories
never measured (waiting, upcoming and running), whole-worker groups, disk
requests, spread runtimes, pending workers arriving at every point of the
horizon, and (across the seeds) every combination of options.

What the inputs keep as the scenarios do: a worker's resources in use are its
running tasks' allocations. That is the one known place the two can differ, on
purpose: the new one asks the shared Work Queue rule
(:func:`workqueue_bridge.dispatch.fit_count`), for which a whole-worker task
needs a worker with *all* its disk free too; the old one only looked at cores
and memory. Only disk in use with no core or memory held (cache, a disk-only
task) tells them apart.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import pytest

from hta.estimator import Estimate, EstimatorOptions, QueueDrainEstimator, outrun_categories
from hta.model import (CategoryModel, Observation, PendingWorker, Resources, RunningTask, TaskGroup, UpcomingTasks,
                       WorkerInfo)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import estimator_before as before  # noqa: E402  (the frozen copy)
from scenarios import scenario  # noqa: E402

OPTIONS = [dict(lookahead=la, tail_aware=ta, barrier_aware=ba) for la in (True, False) for ta in (True, False)
           for ba in (True, False)]


def _spread(m: CategoryModel, rng: random.Random) -> CategoryModel:
    """Runtimes spread around the mean (barriers then wait for stragglers)."""
    mean = m.runtime_mean_s or 1.0
    lo, hi = mean * rng.uniform(0.5, 1.0), mean * rng.uniform(1.0, 2.0)
    return m.model_copy(update={"runtime_min_s": lo, "runtime_max_s": hi, "runtime_p90_s": lo + 0.9 * (hi - lo)})


def _disk_workers(rng: random.Random, obs: Observation, first_task: int) -> tuple[list[WorkerInfo], list[RunningTask]]:
    """A few more workers running tasks that hold disk (with cores), in use = their allocations."""
    workers, running = [], []
    shape, tid = obs.worker_shape, first_task
    names = list(obs.categories) + ["never"]
    for i in range(rng.randint(0, 4)):
        used = Resources()
        for _ in range(rng.randint(0, 3)):
            a = Resources(cores=rng.choice([1, 2]), memory_mb=rng.choice([250, 1000]),
                          disk_mb=rng.choice([0, 5000, 20000]))
            if not a.plus(used).fits_in(shape):
                break
            used = used.plus(a)
            running.append(RunningTask(task_id=tid, category=rng.choice(names), allocation=a,
                                       started_at=obs.time - rng.uniform(0, 500), worker=f"d{i}"))
            tid += 1
        workers.append(WorkerInfo(id=f"d{i}", capacity=shape, in_use=used,
                                  running=sum(1 for t in running if t.worker == f"d{i}")))
    return workers, running


def _waiting(rng: random.Random, obs: Observation) -> list[TaskGroup]:
    """The scenario's groups, some named, with whole-worker, never-measured and disk groups mixed in."""
    out = []
    for k, g in enumerate(obs.waiting):
        out.append(g.model_copy(update={"id": f"g{k}" if rng.random() < 0.6 else None}))
        roll = rng.random()
        n = rng.randint(1, 30)
        if roll < 0.15:  # whole worker, measured category
            out.append(TaskGroup(category=rng.choice(list(obs.categories)), count=n, id=f"g{k}w"))
        elif roll < 0.25:  # never measured: a whole worker, held through the horizon
            out.append(TaskGroup(category="never", count=n, id=f"g{k}n"))
        elif roll < 0.35:
            out.append(TaskGroup(category=rng.choice(list(obs.categories)), count=n, id=f"g{k}d",
                                 request=Resources(cores=1, memory_mb=500, disk_mb=rng.choice([1000, 20000]))))
    return out


def _upcoming(rng: random.Random, waiting: list[TaskGroup], running: list[RunningTask],
              categories: list[str]) -> list[UpcomingTasks]:
    """The DAG's next stages: each waits for waiting groups, earlier upcoming groups,
    running tasks (a few, or a barrier over many), something unknown, or nothing."""
    refs = [g.id for g in waiting if g.id]
    task_refs = [f"task:{t.task_id}" for t in running]
    out: list[UpcomingTasks] = []
    for k in range(rng.randint(0, 6)):
        after: list[str] = []
        if refs and rng.random() < 0.6:
            after += rng.sample(refs, rng.randint(1, min(3, len(refs))))
        if task_refs and rng.random() < 0.5:
            after += rng.sample(task_refs, rng.randint(1, len(task_refs)))
        if out and rng.random() < 0.3:
            after.append(rng.choice(out).id)
        if rng.random() < 0.05:
            after.append("task:999999")  # never completes within the play
        cat = rng.choice(categories + ["never"])
        request = rng.choice([Resources(), Resources(cores=1, memory_mb=500), Resources(cores=2, memory_mb=2000),
                              Resources(cores=1, memory_mb=250, disk_mb=10000)])
        out.append(UpcomingTasks(id=f"u{k}", category=cat, count=rng.randint(1, 200), request=request, after=after))
    return out


def random_observation(seed: int) -> tuple[Observation, float]:
    rng = random.Random(seed)
    light = rng.random() < 0.35  # little waiting: idle workers left unused, queues that drain
    obs = scenario(n_waiting=rng.randint(0, 12 if light else 400), n_workers=rng.randint(0, 40), seed=seed,
                   categories=rng.randint(1, 4), integer_times=rng.random() < 0.5)
    cats = {k: (_spread(m, rng) if rng.random() < 0.5 else m) for k, m in obs.categories.items()}
    cats["never"] = CategoryModel(name="never")  # known, never measured
    running = [t.model_copy(update={"category": "never"}) if rng.random() < 0.1 else t for t in obs.running]
    more_workers, more_running = _disk_workers(rng, obs, first_task=len(running) + 1)
    running += more_running
    horizon = rng.choice([10.0, 60.0, 157.0, rng.uniform(1, 400)])
    pending = [p.model_copy(update={"requested_at": obs.time - rng.uniform(0, 1.5 * horizon)}) for p in obs.pending]
    pending += [PendingWorker(id=f"q{i}", requested_at=obs.time - horizon, shape=obs.worker_shape)
                for i in range(rng.randint(0, 2))]  # arrive now
    waiting = _waiting(rng, obs)
    upcoming = _upcoming(rng, waiting, running, list(obs.categories))
    obs = obs.model_copy(update={"categories": cats, "running": running, "workers": obs.workers + more_workers,
                                 "pending": pending, "waiting": waiting, "upcoming": upcoming})
    return obs, horizon


#: what the play gives; workers_needed is checked on its own (see same_estimate)
PLAY_FIELDS = [f.name for f in dataclasses.fields(before.Estimate) if f.name != "workers_needed"]


def as_fields(e: object) -> tuple:
    """An Estimate's play fields (the two modules' Estimate classes never compare equal as objects)."""
    return tuple(getattr(e, name) for name in PLAY_FIELDS)


def same_estimate(new: Estimate, old: object, obs: Observation, opts: dict) -> bool:
    """The same play, and the same purchase by the old rule — except where tail awareness
    changed since (:func:`tail_cap_now`)."""
    if as_fields(new) != as_fields(old):
        return False
    if not opts["tail_aware"] or new.packed_need == 0:
        return new.workers_needed == old.workers_needed  # type: ignore[attr-defined]
    return new.workers_needed == min(new.packed_need, tail_cap_now(new, obs))


def tail_cap_now(e: Estimate, obs: Observation) -> int:
    """Tail awareness as it is now, from the old rule (these inputs keep busy_runtimes 1):
    never-measured tasks get one worker each and no longer lift the cap on measured ones,
    which the old rule caps on their own with, added to their backlog, each running task's
    cores times how long it runs past the horizon, up to one of their mean runtimes."""
    runtime = before._runtime
    measured = [g for g in e.left_waiting if runtime(obs.categories, g.category) is not None]
    unmeasured = [g for g in e.left_waiting if runtime(obs.categories, g.category) is None]
    cap = before.QueueDrainEstimator._pack(unmeasured, obs.worker_shape) if unmeasured else 0
    tasks = sum(g.count for g in measured)
    if tasks == 0 or e.backlog_core_s <= 0:
        return cap
    r = sum(runtime(obs.categories, g.category) * g.count for g in measured) / tasks
    work = e.backlog_core_s + sum(c * min(s, r) for c, s in e.inflight)
    # ... over the share of a worker's cores those tasks can use, as many as fit in one
    shape, used, taken = obs.worker_shape, 0.0, 0.0
    for g in measured:
        per = 1 if g.whole_worker else min(int(shape.cores / g.request.cores + 1e-9) if g.request.cores else 10**9,
                                           int(shape.memory_mb / g.request.memory_mb + 1e-9)
                                           if g.request.memory_mb else 10**9,
                                           int(shape.disk_mb / g.request.disk_mb + 1e-9) if g.request.disk_mb else 10**9)
        if per > 0:
            w = g.count * runtime(obs.categories, g.category)
            used += w * (shape.cores if g.whole_worker else g.request.cores)
            taken += w * shape.cores / per
    if used > 0 and taken > 0:
        work /= min(1.0, used / taken)
    return cap + before.QueueDrainEstimator._tail_cap(obs, measured, work)


def running_inflight(obs: Observation, horizon: float) -> list[tuple[float, float]]:
    """Worked out apart from the play: (cores, seconds past the horizon) of each measured
    running task on a known worker that is expected to end after the horizon."""
    from hta.estimator import expected_remaining, outrun_categories

    known, outrun = {w.id for w in obs.workers}, outrun_categories(obs)
    out = []
    for t in obs.running:
        model = obs.categories.get(t.category)
        if model is None or before._runtime(obs.categories, t.category) is None or t.worker not in known:
            continue
        at = obs.time + max(expected_remaining(obs.time - t.started_at, model, t.category in outrun), 0.0)
        if at > obs.time + horizon:
            out.append((t.allocation.cores, at - obs.time - horizon))
    return out


SEEDS = range(300)


@pytest.mark.parametrize("chunk", range(6))
def test_same_estimate_as_before_on_random_observations(chunk: int) -> None:
    for seed in SEEDS[chunk::6]:
        obs, horizon = random_observation(seed)
        for opts in (OPTIONS[seed % 8], OPTIONS[(seed * 5 + 3) % 8]):
            # the rules added since (unmeasured_floor, overdue_past_longest,
            # release_to_idle_first, newest_first) are off: the rest must be the old estimator's
            new = QueueDrainEstimator(EstimatorOptions(**opts, unmeasured_floor=False, overdue_past_longest=False,
                                                       release_to_idle_first=False, newest_first=False)).estimate(obs, horizon)
            old = before.QueueDrainEstimator(before.EstimatorOptions(**opts)).estimate(obs, horizon)
            assert same_estimate(new, old, obs, opts), (seed, opts)


def test_inflight_of_running_tasks_is_what_they_hold_past_the_horizon() -> None:
    """With nothing waiting or upcoming the play starts no task: what it finds in flight at
    the horizon is the running tasks' part alone, worked out here apart from it."""
    checked = 0
    for seed in SEEDS:
        obs, horizon = random_observation(seed)
        bare = obs.model_copy(update={"waiting": [], "upcoming": []})
        got = sorted(QueueDrainEstimator().estimate(bare, horizon).inflight)
        want = sorted(running_inflight(bare, horizon))
        assert len(got) == len(want) and all(abs(a[0] - b[0]) < 1e-9 and abs(a[1] - b[1]) < 1e-6
                                             for a, b in zip(got, want)), seed
        checked += bool(want)
    assert checked >= 50


def test_the_random_observations_reach_every_branch() -> None:
    """The comparison above means something only if the inputs make the play do everything."""
    seen = dict(releases=0, barrier=0, left=0, whole_left=0, unused=0, tail_capped=0, never_left=0, nothing_left=0,
                inflight_counts=0, inflight_clamped=0, mixed_left=0, past_longest=0, part_of_worker=0)
    for seed in SEEDS:
        obs, horizon = random_observation(seed)
        e = QueueDrainEstimator().estimate(obs, horizon)
        seen["releases"] += bool(e.releases)
        seen["barrier"] += any(len([r for r in u.after if r.startswith("task:")]) >= 2 for u in obs.upcoming)
        seen["left"] += bool(e.left_waiting)
        seen["whole_left"] += any(g.whole_worker for g in e.left_waiting)
        seen["never_left"] += any(g.category == "never" for g in e.left_waiting)
        seen["unused"] += bool(e.unused_idle)
        seen["tail_capped"] += e.workers_needed < e.packed_need
        seen["nothing_left"] += not e.left_waiting
        old_cap = min(e.packed_need, before.QueueDrainEstimator._tail_cap(obs, e.left_waiting, e.backlog_core_s))
        seen["inflight_counts"] += e.workers_needed > old_cap
        r = [before._runtime(obs.categories, g.category) for g in e.left_waiting]
        seen["inflight_clamped"] += any(s > max((x for x in r if x), default=0.0) for _, s in e.inflight)
        seen["mixed_left"] += None in r and any(x is not None for x in r) and e.workers_needed < e.packed_need
        seen["past_longest"] += bool(outrun_categories(obs))
        measured = [(g, x) for g, x in zip(e.left_waiting, r) if x is not None]
        seen["part_of_worker"] += bool(measured) and QueueDrainEstimator._usable_share(measured, obs.worker_shape) < 1
    assert all(n >= 10 for n in seen.values()), seen


def test_same_estimate_as_before_at_bench_scale() -> None:
    for seed, (n, w) in enumerate([(20_000, 300), (100_000, 1_000)]):
        big = scenario(n, w, seed=seed, integer_times=False)
        waiting = [g.model_copy(update={"id": f"g{k}"}) for k, g in enumerate(big.waiting)]
        upcoming = _upcoming(random.Random(seed), waiting, big.running, list(big.categories))
        obs = big.model_copy(update={"waiting": waiting, "upcoming": upcoming})
        for opts in OPTIONS:
            new = QueueDrainEstimator(EstimatorOptions(**opts, overdue_past_longest=False,
                                                       release_to_idle_first=False, newest_first=False)).estimate(obs, 157.0)
            old = before.QueueDrainEstimator(before.EstimatorOptions(**opts)).estimate(obs, 157.0)
            assert same_estimate(new, old, obs, opts), (n, opts)
