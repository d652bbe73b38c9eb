"""max-then-drain: the maximum at once, idle workers drained once nothing is left to start."""

from __future__ import annotations

from hta.model import (
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)
from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload

NODE = Resources(cores=3, memory_mb=15000, disk_mb=100000)


def worker(wid, running=0):
    return WorkerInfo(id=wid, capacity=NODE, in_use=Resources(cores=running), running=running)


def obs(workers=(), pending=0, waiting=0, upcoming=0, min_workers=0):
    return Observation(
        time=100.0, worker_shape=NODE, max_workers=10, min_workers=min_workers, workers=list(workers),
        pending=[PendingWorker(id=f"p{i}", requested_at=90.0, shape=NODE) for i in range(pending)],
        waiting=[TaskGroup(category="a", count=waiting, request=Resources(cores=1))] if waiting else [],
        upcoming=[UpcomingTasks(id="u0", category="b", count=upcoming)] if upcoming else [],
        running=[RunningTask(task_id=1, category="a", allocation=Resources(cores=1), started_at=0.0, worker="w1")],
        latency=LatencyStats(samples=[150.0]))


def test_one_waiting_task_buys_the_whole_maximum_at_once():
    d = make_policy("max-then-drain").decide(obs([worker("w1", running=1)], pending=2, waiting=1))
    assert d.add == 10 - 3 and d.target_workers == 10 and not d.drain


def test_work_still_upcoming_keeps_idle_workers():
    d = make_policy("max-then-drain").decide(obs([worker("w1", running=1), worker("w2")], upcoming=5))
    assert d.add == 8 and not d.drain


def test_nothing_waiting_or_upcoming_drains_every_idle_worker_but_keeps_busy_ones_and_the_minimum():
    p = make_policy("max-then-drain")
    d = p.decide(obs([worker("w1", running=1), worker("w3"), worker("w2")]))
    assert d.add == 0 and d.drain == ["w2", "w3"]
    d = p.decide(obs([worker("w1", running=1), worker("w3"), worker("w2")], min_workers=2))
    assert d.drain == ["w2"]


def test_in_the_simulator_it_buys_the_cap_at_once_and_ends_at_zero():
    tasks = [SimTask(f"a{i}", "a", runtime_s=100) for i in range(30)]
    sim = Simulation(Workload("t", tasks), make_policy("max-then-drain"),
                     ClusterModel(max_nodes=4, start_nodes=1, latency_mean_s=10.0, latency_sd_s=0.0),
                     seed=0, log=ScalingLogWriter())
    s = sim.run()
    assert s.exit_code == 0
    ups = [d for d in sim.controller.decisions if d.add]
    assert len(ups) == 1 and ups[0].t == 0 and ups[0].add == 3
    assert s.workers_drained == 4 and s.teardown_node_s == 0
