"""Random estimator inputs, shared by bench/estimator.py and the tests."""

from __future__ import annotations

import random

from hta.model import (CategoryModel, LatencyStats, Observation, PendingWorker, Resources, RunningTask,
                       TaskGroup, WorkerInfo)


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
