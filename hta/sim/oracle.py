"""The oracle: a lower bound on any policy's runtime for a workload.

No schedule finishes before the workflow's critical path (the longest chain
of runtimes), nor before the total work spread over every core of the largest
cluster. When the starting cluster cannot hold the widest stage at once, more
nodes must be bought, and none arrives before one preparation latency.
"""

from __future__ import annotations

from functools import lru_cache

from hta.sim.workload import Workload
from hta.sim.world import ClusterModel


def critical_path_s(w: Workload) -> float:
    tasks = w.by_id()

    @lru_cache(maxsize=None)
    def finish(tid: str) -> float:
        t = tasks[tid]
        return t.runtime_s + max((finish(p) for p in t.parents), default=0.0)

    import sys
    sys.setrecursionlimit(max(10000, 4 * len(tasks)))
    return max(finish(t.id) for t in w.tasks)


def widest_stage_cores(w: Workload) -> float:
    tasks = w.by_id()
    depth: dict[str, int] = {}

    def d(tid: str) -> int:
        if tid not in depth:
            depth[tid] = 1 + max((d(p) for p in tasks[tid].parents), default=-1)
        return depth[tid]

    width: dict[int, float] = {}
    for t in w.tasks:
        width[d(t.id)] = width.get(d(t.id), 0.0) + t.cores
    return max(width.values())


def oracle_runtime_s(w: Workload, cluster: ClusterModel) -> float:
    work = sum(t.runtime_s * t.cores for t in w.tasks)
    bound = max(critical_path_s(w), work / (cluster.max_nodes * cluster.node_cores))
    if cluster.start_nodes * cluster.node_cores < widest_stage_cores(w):
        bound += cluster.latency_mean_s + cluster.pull_s
    return bound
