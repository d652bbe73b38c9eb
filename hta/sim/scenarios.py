"""Random estimator inputs, for the tests and the benchmarks: observations of a queue with
workers, running tasks and waiting groups (:func:`scenario`), and the same widened with
what the estimator must also handle (:func:`random_observation`): DAG lookahead (upcoming
groups waiting for waiting groups, for other upcoming groups, for running tasks, barriers
over many, or for nothing), categories never measured, whole-worker groups, disk requests,
spread runtimes, and pending workers arriving at every point of the horizon."""

from __future__ import annotations

import random

from hta.model import (
    CategoryModel,
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)


def scenario(n_waiting: int, n_workers: int, seed: int = 0, categories: int = 3,
             integer_times: bool = True) -> Observation:
    rng = random.Random(seed)
    shape = Resources(cores=4, memory_mb=16000, disk_mb=50000)
    cats = {}
    for k in range(categories):
        rt = float(rng.randint(20, 400)) if integer_times else rng.uniform(20, 400)
        cats[f"c{k}"] = CategoryModel(name=f"c{k}", samples=10, runtime_mean_s=rt, runtime_median_s=rt,
                                      runtime_p90_s=rt, peak=Resources(cores=rng.choice([1, 1, 2]),
                                                                        memory_mb=rng.choice([500, 1000, 2000])))
    now = 1000.0
    workers, running = [], []
    tid = 0
    for i in range(n_workers):
        busy = rng.randint(0, 4)
        used = Resources()
        for _ in range(busy):
            c = f"c{rng.randrange(categories)}"
            a = cats[c].peak
            if not a.plus(used).fits_in(shape):
                break
            used = used.plus(a)
            started = now - (rng.randint(0, 300) if integer_times else rng.uniform(0, 300))
            running.append(RunningTask(task_id=tid, category=c, allocation=a, started_at=started, worker=f"w{i}"))
            tid += 1
        workers.append(WorkerInfo(id=f"w{i}", capacity=shape, in_use=used,
                                  running=sum(1 for t in running if t.worker == f"w{i}")))
    waiting, left = [], n_waiting
    while left > 0:
        c = f"c{rng.randrange(categories)}"
        n = min(left, rng.randint(1, max(1, n_waiting // 5)))
        waiting.append(TaskGroup(category=c, count=n, request=cats[c].peak))
        left -= n
    pending = [PendingWorker(id=f"p{i}", requested_at=now - rng.randint(0, 100), shape=shape)
               for i in range(max(1, n_workers // 10))]
    return Observation(time=now, waiting=waiting, running=running, workers=workers, pending=pending,
                       categories=cats, worker_shape=shape, max_workers=10 * n_workers + 100,
                       latency=LatencyStats(samples=[157.0]))


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


def upcoming_groups(rng: random.Random, waiting: list[TaskGroup], running: list[RunningTask],
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
    upcoming = upcoming_groups(rng, waiting, running, list(obs.categories))
    obs = obs.model_copy(update={"categories": cats, "running": running, "workers": obs.workers + more_workers,
                                 "pending": pending, "waiting": waiting, "upcoming": upcoming})
    return obs, horizon
