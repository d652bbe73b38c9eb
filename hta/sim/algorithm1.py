"""A direct transcription of the thesis's Algorithm 1 (Zheng 2019, ch. 7;
Zheng et al., CLUSTER 2020): the baseline the event-driven estimator beats.

Every second of the horizon, every running task ticks down and frees its
worker's resources when done, then every waiting task, in queue order, is
tried on every worker. O(L · n · w). It takes the same Observation as
:class:`hta.estimator.QueueDrainEstimator` and answers the same two numbers:
workers to add (leftover tasks packed into the worker shape) and idle workers
the play never used. No lookahead, no tail awareness.
"""

from __future__ import annotations

import math

from hta.model import CategoryModel, Observation


def expected_remaining(elapsed: float, model: CategoryModel) -> float:
    """How much longer a running task should take. Algorithm 1 counts a running task down
    from its category's mean runtime; a task already past it gets the estimator's straggler
    rule (10 % of the mean more; past 2 × p90 an outlier, as long again as it has run),
    restated here so that this file imports nothing from the estimator it is compared with."""
    mean = model.runtime_mean_s or 0.0
    if elapsed < mean:
        return mean - elapsed
    p90 = model.runtime_p90_s or mean
    if elapsed <= 2.0 * p90:
        return 0.1 * mean
    return max(elapsed, 0.1 * mean)


def algorithm1(obs: Observation, horizon_s: float) -> tuple[int, list[str]]:
    shape = obs.worker_shape
    models = obs.categories

    def runtime(cat: str) -> float | None:
        m = models.get(cat)
        return m.runtime_mean_s if m is not None and m.measured else None

    workers = sorted(obs.workers, key=lambda w: (w.idle, w.id))
    free = [[w.free.cores, w.free.memory_mb, w.free.disk_mb] for w in workers]
    cap = [[w.capacity.cores, w.capacity.memory_mb, w.capacity.disk_mb] for w in workers]
    used = [False] * len(workers)
    arrive: list[tuple[float, int]] = []  # pending workers: (arrival second, index)
    for p in obs.pending:
        cap.append([p.shape.cores, p.shape.memory_mb, p.shape.disk_mb])
        free.append([0.0, 0.0, 0.0])
        used.append(False)
        arrive.append((max(0.0, p.requested_at + horizon_s - obs.time), len(cap) - 1))
    index = {w.id: i for i, w in enumerate(workers)}
    running: list[list[float]] = []  # [remaining seconds, worker, cores, memory, disk]
    for t in obs.running:
        rt = runtime(t.category)
        if rt is None or t.worker is None or t.worker not in index:
            continue
        remaining = expected_remaining(obs.time - t.started_at, models[t.category])
        a = t.allocation
        running.append([remaining, index[t.worker], a.cores, a.memory_mb, a.disk_mb])
    queue: list[tuple[str, float, float, float, bool]] = []  # one entry per waiting task
    for g in obs.waiting:
        for _ in range(g.count):
            queue.append((g.category, g.request.cores, g.request.memory_mb, g.request.disk_mb, g.whole_worker))

    for second in range(0, int(horizon_s) + 1):
        for at, i in arrive:
            if second - 1 < at <= second:
                free[i] = list(cap[i])
        still = []
        for r in running:
            r[0] -= 1 if second > 0 else 0
            if r[0] <= 0 and second > 0:
                f = free[int(r[1])]
                f[0] += r[2]
                f[1] += r[3]
                f[2] += r[4]
            else:
                still.append(r)
        running = still
        left: list[tuple[str, float, float, float, bool]] = []
        for task in queue:
            cat, c, m, d, whole = task
            placed = False
            for i in range(len(free)):
                f = free[i]
                if whole:
                    if f[0] >= cap[i][0] - 1e-9 and f[1] >= cap[i][1] - 1e-9:
                        c, m, d = cap[i]
                    else:
                        continue
                if c <= f[0] + 1e-9 and m <= f[1] + 1e-9 and d <= f[2] + 1e-9:
                    f[0] -= c
                    f[1] -= m
                    f[2] -= d
                    used[i] = True
                    rt = runtime(cat)
                    running.append([rt if rt is not None else math.inf, i, c, m, d])
                    placed = True
                    break
            if not placed:
                left.append(task)
        queue = left

    need = 0.0
    for _cat, c, m, d, whole in queue:
        if whole:
            need += 1
            continue
        per = min(x for x in (
            math.floor(shape.cores / c + 1e-9) if c > 0 else math.inf,
            math.floor(shape.memory_mb / m + 1e-9) if m > 0 else math.inf,
            math.floor(shape.disk_mb / d + 1e-9) if d > 0 else math.inf,
        ))
        if per > 0 and per != math.inf:
            need += 1 / per
    unused = [w.id for i, w in enumerate(workers) if w.idle and not used[i]]
    return math.ceil(need - 1e-9), unused
