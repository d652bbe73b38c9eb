"""The simulator's Work Queue / Makeflow rules, and each rival's defining behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, wait

from hta.model import (
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    ScaleDecision,
    TaskGroup,
    WorkerInfo,
)
from hta.policies.factory import FactoryPolicy
from hta.policies.hpa import HPAPolicy
from hta.policies.hta_policy import HTAPolicy
from hta.policies.keda import KEDAPolicy
from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel
from hta.sim.oracle import critical_path_s, oracle_runtime_s
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload, WorkloadError, load_workload, parse_wfformat

NODE = Resources(cores=3, memory_mb=15000, disk_mb=100000)


class Scripted:
    """A test policy: returns queued decisions in order, then nothing; records observations."""

    name = "scripted"

    def __init__(self, decisions=(), every=5.0):
        self.decisions = list(decisions)
        self.every = every
        self.seen: list[Observation] = []

    def decide(self, obs):
        self.seen.append(obs)
        d = self.decisions.pop(0) if self.decisions else ScaleDecision()
        return d.model_copy(update={"next_decision_s": self.every})


class Ledger(dict):
    """``SimWorkQueue.runs`` (task id → the run in progress) that also keeps every run it held,
    in start order: which task ran on which node, from when to when, with what allocation."""

    def __init__(self, world):
        super().__init__()
        self.world = world
        self.history: list[dict] = []

    def __setitem__(self, tid, run):
        super().__setitem__(tid, run)
        self.history.append({"task": tid, "node": run.node.id, "start": run.start, "end": None,
                             "cores": run.alloc.cores, "memory_mb": run.alloc.memory_mb})

    def _ended(self, tid):
        entry = next(e for e in reversed(self.history) if e["task"] == tid and e["end"] is None)
        entry["end"] = self.world.env.now

    def __delitem__(self, tid):
        super().__delitem__(tid)
        self._ended(tid)

    def pop(self, tid, *default):
        had = tid in self
        run = super().pop(tid, *default)
        if had:
            self._ended(tid)
        return run


def world(tasks, policy, **cluster):
    base = dict(max_nodes=4, start_nodes=1, latency_mean_s=10.0, latency_sd_s=0.0, teardown_s=0.0)
    base.update(cluster)
    sim = Simulation(Workload("t", tasks), policy, ClusterModel(**base), seed=0, log=ScalingLogWriter())
    sim.world.queue.runs = Ledger(sim.world)
    return sim


def schedule(w: Simulation, alloc: bool = False) -> list[tuple]:
    """Every run the world started, in start order: (task, node, start, end[, cores, memory])."""
    return [(e["task"], e["node"], e["start"], e["end"]) + ((e["cores"], e["memory_mb"]) if alloc else ())
            for e in w.world.queue.runs.history]


WHOLE = (NODE.cores, NODE.memory_mb)  # a whole worker's allocation (3 cores, 15000 MB)


# -- Work Queue and Makeflow rules ---------------------------------------------------------

def test_unmeasured_category_runs_alone_on_a_whole_worker_until_one_completes():
    tasks = [SimTask(f"a{i}", "a", runtime_s=10 + i, cores=1) for i in range(4)]
    w = world(tasks, Scripted(), auto_allocation=True)  # (measured: its peak; else test_measured_tasks_share…)
    s = w.run()
    assert s.exit_code == 0
    # one worker: a0 alone (0–10), then measured → three at once at 1 core each
    recs = [r for r in w.log.records if r.kind == "observation"]
    first = next(r for r in recs if r.running)
    assert first.in_use_cores == 3 and first.running == 1 and first.waiting == 3  # whole worker allocated to one task
    assert max(r.running for r in recs) == 3
    assert abs(s.runtime_s - (10 + 13)) < 1e-6


def test_waste_is_split_between_idle_workers_and_cores_beside_running_tasks():
    # two workers all along; a1 takes worker 1 whole (never measured), then a2 runs there at
    # 1 core: 2 cores sit beside it for 100 s; worker 2 idles for the whole 200 s
    tasks = [SimTask("a1", "a", runtime_s=100), SimTask("a2", "a", runtime_s=100, parents=["a1"])]
    s = world(tasks, Scripted(), start_nodes=2, auto_allocation=True).run()
    assert s.runtime_s == 200
    assert s.waste_core_s == 2 * 100 + 3 * 200 and s.idle_waste_core_s == 3 * 200


def test_a_whole_worker_task_uses_and_wants_only_its_measured_cores():
    # production's world: a task that declares nothing gets a whole worker, measured or not.
    # a1 (never measured) is counted at the whole worker; once it measured 1 core, each next
    # task uses 1 core of its 3-core worker (2 paid for and unused: waste, as beside a
    # packed task) and, waiting, wants 1 core, not the worker's 3
    tasks = [SimTask("a1", "a", runtime_s=100)] + [SimTask(f"b{i}", "a", runtime_s=100, parents=["a1"])
                                                    for i in range(3)]
    w = world(tasks, Scripted(), max_nodes=1)
    s = w.run()
    assert s.runtime_s == 400
    recs = [r for r in w.log.records if r.kind == "observation"]
    first = next(r for r in recs if r.running)
    assert (first.in_use_cores, first.waiting) == (3, 0)
    second = next(r for r in recs if r.tasks_done == 1 and r.running)
    assert (second.in_use_cores, second.waiting, second.demand_cores) == (1, 2, 1 + 2 * 1)
    assert s.waste_core_s == 3 * 2 * 100 and s.idle_waste_core_s == 0
    assert s.shortage_core_s == 2 * 100 + 1 * 100


def test_tasks_ready_together_are_dispatched_in_the_files_order_to_the_first_worker_with_room():
    tasks = [SimTask("seed", "a", runtime_s=1)] + [SimTask(f"t{i}", "a", runtime_s=100 + i, parents=["seed"])
                                                   for i in range(7)]
    w = world(tasks, Scripted(), start_nodes=2, auto_allocation=True)
    s = w.run()
    assert s.exit_code == 0
    # after "seed" is measured (1 core), the seven tasks are dispatched in the file's order, each to
    # the first worker with room: n1 takes t0,t1,t2, n2 takes t3,t4,t5; t6 waits for the first
    # core freed (t0's, on n1, at 101)
    assert [(task, node, start) for task, node, start, _ in schedule(w)] == [
        ("seed", "n1", 0), ("t0", "n1", 1), ("t1", "n1", 1), ("t2", "n1", 1),
        ("t3", "n2", 1), ("t4", "n2", 1), ("t5", "n2", 1), ("t6", "n1", 101)]
    assert s.runtime_s == pytest.approx(101 + 106)


#: a chain b1 → b2 → b3 written around six independent rules: which the master runs
#: first tells its order apart (oldest first: b1, a1…a6, b2, b3)
ORDER_DAG = [("b1", [])] + [(f"a{i}", []) for i in range(1, 7)] + [("b2", ["b1"]), ("b3", ["b2"])]


def real_dispatch_order(folder: Path) -> list[str]:
    """The order the real makeflow -T wq and its master start ORDER_DAG's rules on one
    1-core worker: each rule writes when it started."""
    lines = ["CATEGORY=one", "CORES=1", "MEMORY=100", ""]
    for name, parents in ORDER_DAG:
        lines += [f"{name}: {' '.join(parents)}".rstrip(), f"\tdate +%s%N > {name}; sleep 0.2", ""]
    (folder / "Makeflow").write_text("\n".join(lines))
    makeflow = subprocess.Popen(["makeflow", "-T", "wq", "-Z", "port", "Makeflow"], cwd=folder,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        port = wait(lambda: (folder / "port").exists() and (folder / "port").read_text().strip(), timeout=30)
        assert port, "makeflow wrote no port file"
        worker = subprocess.Popen(["work_queue_worker", "--cores", "1", "--memory", "1000", "--single-shot",
                                   f"--workdir={folder}", "localhost", port],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert makeflow.wait(timeout=60) == 0
    finally:
        for proc in (makeflow, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    started = {name: int((folder / name).read_text()) for name, _ in ORDER_DAG}
    return sorted(started, key=started.get)


def test_the_master_runs_the_newest_task_first_as_the_simulated_one_does(tmp_path: Path):
    # CCTools' master puts each task it is given at the head of its ready list and
    # makeflow submits rules ready together last-in-the-file first: b1 (the file's first
    # ready rule) runs first, b2 as soon as b1 has ended (before the older a1…a6), then b3
    real = real_dispatch_order(tmp_path)
    assert real == ["b1", "b2", "b3"] + [f"a{i}" for i in range(1, 7)]
    tasks = [SimTask(name, "one", runtime_s=1, cores=1, memory_mb=100, parents=parents) for name, parents in ORDER_DAG]
    sim = Simulation(Workload("order", tasks, declared=True), Scripted(),
                     ClusterModel(max_nodes=1, start_nodes=1, node_cores=1, latency_sd_s=0.0), seed=0)
    sim.world.queue.runs = Ledger(sim.world)
    assert sim.run().exit_code == 0
    assert [task for task, *_ in schedule(sim)] == real


@pytest.mark.parametrize("auto", [True, False])
def test_measured_tasks_share_a_worker_only_where_work_queue_allocates_their_peak(auto):
    # after "seed" is measured (1 core), three alike tasks on one 3-core worker: at once
    # with measured allocations; one at a time on the whole worker without (CCTools 8.0
    # under makeflow -T wq here)
    tasks = [SimTask("seed", "a", 1)] + [SimTask(f"t{i}", "a", 100, parents=["seed"]) for i in range(3)]
    w = world(tasks, Scripted(), max_nodes=1, auto_allocation=auto)
    s = w.run()
    starts = [start for task, _, start, _ in schedule(w) if task != "seed"]
    assert starts == ([1, 1, 1] if auto else [1, 101, 201])
    assert s.runtime_s == pytest.approx(101 if auto else 301)


def test_makeflow_releases_a_task_when_all_parents_completed():
    tasks = [SimTask("p1", "a", 5), SimTask("p2", "a", 20), SimTask("c", "b", 5, parents=["p1", "p2"])]
    w = world(tasks, Scripted(), start_nodes=2)
    s = w.run()
    assert s.runtime_s == pytest.approx(25)


@pytest.mark.parametrize("need", [dict(memory_mb=4000), dict(cores=2, memory_mb=100)], ids=["memory", "cores"])
def test_task_exceeding_its_allocation_is_retried_on_a_whole_worker(need):
    # the category's first task teaches "1 core, 100 MB"; the big one needs 4000 MB, or 2
    # cores: over an allocation of its own (the monitor's limits) it fails, whatever it is
    # (on a whole worker, a pod's CPU limit would throttle it instead: test_worker_shape)
    tasks = [SimTask("small", "a", 10, memory_mb=100), SimTask("big", "a", 10, parents=["small"], **need)]
    w = world(tasks, Scripted(), auto_allocation=True)  # (measured allocations: the packed world)
    s = w.run()
    assert s.tasks_retried == 1 and s.lost_work_core_s == pytest.approx(5 * 1)  # failed halfway at 1 core
    assert s.runtime_s == pytest.approx(10 + 5 + 10)
    assert schedule(w, alloc=True) == [
        ("small", "n1", 0, 10, *WHOLE),   # unmeasured: a whole worker
        ("big", "n1", 10, 15, 1, 100),    # the measured peak: fails halfway
        ("big", "n1", 15, 25, *WHOLE)]    # retried on a whole worker


def test_removed_busy_worker_sends_tasks_back_and_lost_work_is_counted():
    tasks = [SimTask(f"t{i}", "a", 100, cores=1) for i in range(2)]
    policy = Scripted([ScaleDecision(), ScaleDecision(), ScaleDecision(remove=["n1"]),
                       ScaleDecision(add=1)], every=20)
    w = world(tasks, policy)
    s = w.run()
    assert s.exit_code == 0
    assert s.lost_work_core_s == pytest.approx(40 * 3)  # t0 ran 40 s on a whole (3-core) worker
    removed = [r for r in w.log.records if r.kind == "worker" and r.event == "removed"]
    assert removed and removed[0].tasks_lost == 1
    # t0 went back to the queue first in line, ahead of t1: it is what the new worker (asked
    # at 60, connected at 70) runs first, from the start
    assert schedule(w) == [("t0", "n1", 0, 40), ("t0", "n2", 70, 170), ("t1", "n2", 170, 270)]


def test_policy_sees_no_ground_truth():
    tasks = [SimTask(f"t{i}", "a", 50 + i) for i in range(3)]
    policy = Scripted()
    world(tasks, policy).run()
    first = policy.seen[0]
    assert first.categories["a"].samples == 0 and first.categories["a"].runtime_mean_s is None
    assert all(g.whole_worker for g in first.waiting)  # unmeasured: what Work Queue would allocate
    later = policy.seen[-1]
    assert later.categories["a"].samples >= 1


def test_pending_workers_arrive_after_the_latency():
    tasks = [SimTask(f"t{i}", "a", 100) for i in range(3)]
    w = world(tasks, Scripted([ScaleDecision(add=2)]), latency_mean_s=30.0)
    w.run()
    connected = [r for r in w.log.records if r.kind == "worker" and r.event == "connected" and r.t > 0]
    assert [r.latency_s for r in connected] == [30.0, 30.0]
    # nothing runs on a worker before it arrives: t1, t2 wait for n2, n3 until t = 30
    assert schedule(w) == [("t0", "n1", 0, 100), ("t1", "n2", 30, 130), ("t2", "n3", 30, 130)]


# -- workloads and the oracle ------------------------------------------------------------------

def test_blast_generator_shape():
    wl = load_workload("blast-3stage", seed=3)
    cats = {}
    for t in wl.tasks:
        cats[t.category] = cats.get(t.category, 0) + 1
    assert cats == {"split": 3, "align": 200 + 34 + 164, "reduce": 3}
    aligns = [t.runtime_s for t in wl.tasks if t.category == "align"]
    assert 240 <= min(aligns) and max(aligns) <= 360
    assert critical_path_s(wl) > 3 * 240


def test_wfformat_14_and_defaults(tmp_path: Path):
    data = {"name": "x", "workflow": {"tasks": [
        {"name": "stage_ID01", "id": "a", "runtime": 10, "parents": []},
        {"name": "stage_ID02", "id": "b", "runtime": 5, "cores": 2, "avgCPU": 150, "parents": ["a"]}]}}
    wl = parse_wfformat(data)
    a, b = wl.tasks
    assert a.category == "stage" and a.cores == 1 and a.cpu_util == 1.0 and a.memory_mb == 512
    assert b.cores == 2 and b.cpu_util == pytest.approx(0.75) and b.parents == ["a"]
    with pytest.raises(WorkloadError, match="unknown parent"):
        parse_wfformat({"workflow": {"tasks": [{"id": "a", "runtime": 1, "parents": ["zz"]}]}})


def test_oracle_bound():
    # 1200 core·s of independent work: 3 cores until the second node can connect (a fixed
    # 50 s latency), 6 after: as a fluid, 150 core·s by t = 50 and the other 1050 in 175 s
    # more (225 s); as whole tasks, 3 start before 50 s and the other 9 after it on 6 cores,
    # one core running two of them: 50 + 2 × 100 (the first node's cores run one each from
    # 100 s, the second's two each from 50 s)
    wl = Workload("w", [SimTask(f"t{i}", "a", 100) for i in range(12)])
    c = ClusterModel(max_nodes=2, start_nodes=1, node_cores=3, latency_mean_s=50, latency_sd_s=0)
    assert oracle_runtime_s(wl, c) == pytest.approx(250)


# -- the rivals -----------------------------------------------------------------------------

def obs_at(t, workers=(), pending=(), waiting=0, running=()):
    return Observation(time=t, worker_shape=NODE, max_workers=20, workers=list(workers), pending=list(pending),
                       waiting=[TaskGroup(category="a", count=waiting, request=Resources(cores=1))] if waiting else [],
                       running=list(running), latency=LatencyStats(samples=[100]))


def busy_worker(wid, util, connected=0.0, running=1):
    return WorkerInfo(id=wid, capacity=NODE, in_use=Resources(cores=running), running=running,
                      connected_at=connected, cpu_utilization=util)


def test_hpa_scales_by_cpu_ratio_with_rate_limit_and_tolerance():
    d = HPAPolicy(target_percent=50).decide(obs_at(0, [busy_worker("w1", 1.0)]))
    assert d.add == 1 and d.next_decision_s == 15  # ceil(1 × 100/50) = 2: under the rate limit
    d = HPAPolicy(target_percent=10).decide(obs_at(0, [busy_worker("w1", 1.0)]))
    assert d.add == 3 and d.next_decision_s == 15  # ceil(1 × 100/10) = 10: at most max(2 × 1, 4) after a sync
    d = make_policy("hpa-10:spec_behavior=true").decide(obs_at(0, [busy_worker("w1", 1.0)]))
    assert d.add == 4  # with spec.behavior's defaults: up by max(4 pods, 100 %) per 15 s
    five = [busy_worker(f"w{i}", 1.0) for i in range(5)]
    d = HPAPolicy(target_percent=10).decide(obs_at(0, five))
    assert d.add == 5  # ceil(5 × 100/10) = 50, limited to 2 × 5
    d = HPAPolicy(target_percent=50).decide(obs_at(0, [busy_worker("w1", 0.53)]))
    assert d.add == 0 and not d.remove  # within the 10 % tolerance
    # the controller reads whole percent, rounded down: 55.9 % is 55 %, 1.1 × a 50 % target,
    # within the tolerance (55.9 / 50 = 1.118 is not: ceil(4 × 1.118) = 5)
    four = [busy_worker(f"w{i}", 0.559) for i in range(4)]
    d = HPAPolicy(target_percent=50).decide(obs_at(0, four))
    assert d.add == 0 and d.reason.startswith("cpu 55% vs target 50%")
    assert HPAPolicy(target_percent=50).decide(obs_at(0, [busy_worker(f"w{i}", 0.56) for i in range(4)])).add == 1


def test_hpa_keeps_pods_for_300s_after_load_drops_then_deletes_busy_ones():
    hpa = HPAPolicy(target_percent=50)
    ws = [busy_worker(f"w{i}", 0.5, connected=i) for i in range(4)]
    assert hpa.decide(obs_at(0, ws)).target_workers == 4
    low = [busy_worker(f"w{i}", 0.05, connected=i) for i in range(4)]
    for t in range(15, 301, 15):
        d = hpa.decide(obs_at(t, low))
        assert not d.remove, f"HPA scaled down at t={t}, inside its 300 s window"
    d = hpa.decide(obs_at(315, low))
    assert d.remove == ["w3", "w2", "w1"]  # newest first, although each runs a task
    # with spec.behavior, a recommendation counts while strictly younger than 300 s
    hpa = make_policy("hpa-50:spec_behavior=true")
    hpa.decide(obs_at(0, ws))
    assert [bool(hpa.decide(obs_at(t, low)).remove) for t in range(15, 301, 15)] == [False] * 19 + [True]


def test_an_hpa_without_behavior_scales_up_to_its_highest_recent_recommendation():
    # horizontal.go stabilizeRecommendation: the highest of the last 300 s, up as well as
    # down. 1 pod at 100 % of a 10 % target recommends 10, held to 4; at 15 s the 4 read
    # 11 % (within the tolerance: 4 wanted) and it still goes to 8 (2 × 4) for the 10
    hpa = HPAPolicy(target_percent=10)
    assert hpa.decide(obs_at(0, [busy_worker("w0", 1.0)])).add == 3
    four = [busy_worker(f"w{i}", 0.11, connected=i) for i in range(4)]
    d = hpa.decide(obs_at(15, four))
    assert d.add == 4 and d.reason.startswith("cpu 11% vs target 10%")
    bh = make_policy("hpa-10:spec_behavior=true")  # its scale-up window is 0 s: stays at 4 + 1 = 5
    bh.decide(obs_at(0, [busy_worker("w0", 1.0)]))
    assert bh.decide(obs_at(15, four)).add == 0


def test_hpa_counts_a_pod_without_a_metric_as_its_controller_does():
    # replica_calculator.go: a ready pod with no metric counts 100 % on a scale-down, 0 % on
    # a scale-up, and no change is made where that turns the direction
    hpa = HPAPolicy(target_percent=50)
    assert hpa.replicas(used=0.3, ready=3, missing=1, unready=0, current=4) == (3, 10)  # (0.3 + 1) / 4: 32 %
    assert hpa.replicas(used=1.2, ready=3, missing=1, unready=0, current=4) == (4, 40)  # 55 %: up, from down
    assert hpa.replicas(used=3.0, ready=3, missing=1, unready=0, current=4) == (6, 100)  # 3 / 4: 75 %
    assert hpa.replicas(used=3.0, ready=3, missing=0, unready=3, current=6) == (6, 100)  # 50 %: within
    ws = [busy_worker(f"w{i}", 0.1, connected=i) for i in range(3)] + [busy_worker("new", None, connected=3)]
    hpa.decide(obs_at(0, ws))
    assert hpa.decide(obs_at(315, ws)).remove == ["new"]  # 4 → 3 once the window has passed, not 4 → 1


def test_keda_follows_waiting_tasks_only():
    # from 0 replicas KEDA's own loop activates one pod whatever the backlog
    # (scaleFromZeroOrIdle); its HPA then takes 1 to ceil(30 / 3) = 10, held to max(2 × 1, 4)
    keda = KEDAPolicy(tasks_per_pod=3)
    d = keda.decide(obs_at(0, waiting=30))
    assert d.add == 1 and "KEDA activates" in d.reason
    one = [PendingWorker(id="p0", requested_at=0, shape=NODE)]
    assert keda.decide(obs_at(15, pending=one, waiting=30)).add == 3
    assert KEDAPolicy(tasks_per_pod=3).decide(obs_at(0, [busy_worker("w0", 1.0)], waiting=7)).add == 2  # ceil(7 / 3)
    # the six tasks running on its two pods count for nothing: 6 waiting / 3 per pod is what it has
    busy = [busy_worker(f"w{i}", 1.0, connected=i, running=3) for i in range(2)]
    running = [RunningTask(task_id=i, category="a", allocation=Resources(cores=1), started_at=0.0,
                           worker=f"w{i % 2}") for i in range(6)]
    d = KEDAPolicy(tasks_per_pod=3).decide(obs_at(0, busy, waiting=6, running=running))
    assert d.add == 0 and not d.remove and d.target_workers == 2


def test_keda_scales_to_zero_only_after_its_cooldown():
    # the HPA KEDA makes has minReplicas 1: it takes 2 idle pods to 1 once its 300 s window
    # has passed; KEDA's loop (every 30 s) takes the last to 0 once the trigger has been
    # inactive longer than cooldownPeriod (scaleToZeroOrIdle: lastActiveTime + 300 s before now)
    keda = KEDAPolicy(tasks_per_pod=3)
    pods = [busy_worker(f"w{i}", 0.0, connected=i, running=0) for i in range(2)]
    keda.decide(obs_at(0, pods, waiting=6))
    removed = []
    for t in range(15, 331, 15):
        d = keda.decide(obs_at(t, pods))
        if d.remove:
            removed.append((t, d.remove))
            pods = [p for p in pods if p.id not in d.remove]
    assert removed == [(315, ["w1"]), (330, ["w0"])]
    assert not keda.decide(obs_at(345)).add  # nothing waits: stays at 0
    assert keda.decide(obs_at(360, waiting=1)).add == 1  # the next poll activates it again
    # with minReplicaCount 2 KEDA keeps 2, busy or not
    d = make_policy("keda-3:min_replicas=2").decide(obs_at(0))
    assert d.add == 2 and "minReplicaCount 2" in d.reason


def test_factory_never_deletes_a_busy_worker_and_caps_pending():
    f = FactoryPolicy()
    busy = [busy_worker(f"w{i}", 1.0) for i in range(2)]
    d = f.decide(obs_at(0, busy, waiting=60))
    assert d.add == 5 and not d.drain and not d.remove  # target 21, but ≤ 5 submitted and unconnected
    pend = [PendingWorker(id=f"p{i}", requested_at=0, shape=NODE) for i in range(5)]
    assert f.decide(obs_at(30, busy, pend, waiting=60)).add == 0
    assert f.decide(obs_at(30, busy, pend[:3], waiting=60)).add == 2  # up to 5 submitted, unconnected
    idle = WorkerInfo(id="idle", capacity=NODE, running=0, idle_since=0.0)
    d = f.decide(obs_at(299, busy + [idle]))
    assert "idle" not in d.drain
    d = f.decide(obs_at(300, busy + [idle]))
    assert d.drain == ["idle"] and not d.remove


class GuardedHTA(HTAPolicy):
    """HTA, checked on every decision: it never drains a worker with running tasks."""

    def decide(self, obs):
        d = super().decide(obs)
        busy = {w.id for w in obs.workers if not w.idle}
        assert not (set(d.drain) & busy), f"HTA drained a busy worker at t={obs.time}"
        assert not d.remove
        self.drains = getattr(self, "drains", 0) + len(d.drain)
        return d


@pytest.mark.parametrize("workload", ["blast-3stage", "io-bound"])
def test_hta_never_drains_a_busy_worker_and_loses_no_work(workload):
    policy = GuardedHTA()
    sim = Simulation(load_workload(workload, 1), policy, seed=1)
    s = sim.run()
    assert s.exit_code == 0 and s.lost_work_core_s == 0 and s.workers_removed == 0
    # the guard saw drains to check, and they were carried out
    drained = [r for r in sim.log.records if r.kind == "worker" and r.event == "drained"]
    assert policy.drains > 0 and len(drained) == policy.drains


def test_simulate_command_json_and_logs(tmp_path: Path):
    hta = str(ROOT / ".venv" / "bin" / "hta")
    r = subprocess.run([hta, "simulate", "--workload", "io-bound", "--policies", "hta,factory", "--seeds", "2",
                        "--format", "json", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert len(data["runs"]) == 4
    for run in data["runs"]:
        for key in ("workload", "policy", "seed", "runtime_s", "waste_core_s", "shortage_core_s", "node_s",
                    "lost_work_core_s", "scale_actions"):
            assert key in run
        assert Path(run["log"]).exists()
    assert len(list(tmp_path.glob("*.jsonl"))) == 4
    # the node·s floor at each policy's mean runtime: below what it paid, and the same
    # figure hta.sim.oracle gives for those runtimes
    from hta.sim.cluster import ClusterModel
    from hta.sim.oracle import mean_node_seconds_floor, node_seconds_floor
    from hta.sim.workload import load_workload

    floors = [node_seconds_floor(load_workload("io-bound", s), ClusterModel()) for s in (0, 1)]
    for policy, floor in data["oracle"]["node_s_floor_at_mean_runtime"].items():
        mine = [x for x in data["runs"] if x["policy"] == policy]

        def mean(k: str, mine: list = mine) -> float:
            return sum(x[k] for x in mine) / len(mine)
        assert 0 < floor <= mean("node_s")
        assert floor == pytest.approx(mean_node_seconds_floor(floors, mean("runtime_s")), rel=1e-3)
    bad = subprocess.run([hta, "simulate", "--policies", "hta,nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown policy 'nope'" in bad.stderr


def test_estimator_agrees_with_algorithm1_on_small_inputs():
    from hta.estimator import EstimatorOptions, QueueDrainEstimator
    from hta.sim.algorithm1 import algorithm1
    from hta.sim.scenarios import scenario

    # Algorithm 1 plays the queue in the order it is given, the thesis's reading of the
    # master: given the groups newest first, it plays them as the master dispatches
    est = QueueDrainEstimator(EstimatorOptions(lookahead=False, tail_aware=False))
    for seed in range(60):
        obs = scenario(n_waiting=1 + seed % 30, n_workers=1 + seed % 8, seed=seed)
        a_add, a_unused = algorithm1(obs.model_copy(update={"waiting": obs.waiting[::-1]}), 157.0)
        e = est.estimate(obs, 157.0)
        assert (e.packed_need, sorted(e.unused_idle)) == (a_add, sorted(a_unused)), seed


def test_a_seed_gives_the_same_run_in_every_process():
    # KEDA deletes busy workers, whose tasks go back to the queue: their order must not
    # depend on Python's per-process string hashing
    code = ("from hta.sim.run import Simulation; from hta.sim.cluster import ClusterModel; "
            "from hta.sim.workload import load_workload; "
            "from hta.policies.registry import make_policy; "
            "r = Simulation(load_workload('blast-3stage', 0), make_policy('keda-3'), ClusterModel(horizon_s=4000), "
            "seed=0).run(); print(r.waste_core_s, r.lost_work_core_s, r.tasks_done)")
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PYTHONHASHSEED": str(h), "PATH": "/usr/bin:/bin"}).stdout for h in (1, 2, 3)}
    assert len(out) == 1 and float(next(iter(out)).split()[1]) > 0  # work was lost, and identically


def test_a_time_scaled_policy_decides_in_the_experiments_time():
    """factory@10 in a run compressed 10×: its 300 s idle timeout is 30 s of the run, its 30 s
    cycle 3 s; an uncompressed factory would keep the worker ten times as long."""
    from hta.policies.registry import make_policy

    idle = WorkerInfo(id="idle", capacity=NODE, running=0, idle_since=0.0)
    fast = make_policy("factory@10")
    assert fast.name == "factory@10"
    assert fast.decide(obs_at(29.9, [idle])).drain == []
    d = fast.decide(obs_at(30.0, [idle]))
    assert d.drain == ["idle"] and d.next_decision_s == pytest.approx(3.0)
    assert make_policy("factory").decide(obs_at(30.0, [idle])).drain == []
    with pytest.raises(ValueError, match="positive number"):
        make_policy("hta@0")


def test_a_worker_asked_for_lands_on_an_empty_node_in_pod_start_time_while_the_node_lasts():
    from hta.sim.world import World

    w = World(Workload("t", [SimTask("a", "a", 10)]),
              ClusterModel(pod_start_s=2.0, empty_node_ttl_s=100.0, latency_mean_s=50.0, latency_sd_s=0.0))
    w.cluster.add_empty_nodes(1)  # a starting node without a worker

    def arrival(at: float) -> float:
        w.env.run(until=at) if at > w.env.now else None
        n = w.cluster.request_node(at)
        w.env.run(until=at + 60)
        return n.connected_at - at

    assert arrival(0.0) == 2.0        # on the empty starting node
    assert arrival(60.0) == 52.0      # no empty node: a new one, a whole latency
    w.cluster.retire("n1", busy_ok=False)     # t=120: n1's node empties, and lasts until t=220
    assert arrival(150.0) == 2.0      # lands on it
    w.cluster.retire("n3", busy_ok=False)     # t=210: empties again, until t=310
    assert arrival(320.0) == 52.0     # gone by then


def test_karpenter_deletes_the_nodes_emptied_before_its_pass_together_and_no_pod_lands_on_them():
    from hta.sim.cluster import EmptinessPass
    from hta.sim.world import World

    # Karpenter's loop looks every 10 s; finding empty nodes it waits 15 s, taints those
    # still empty and deletes them (5 s). Three nodes, each with a worker from t = 50
    w = World(Workload("t", [SimTask("a", "a", 10)]),
              ClusterModel(max_nodes=3, start_nodes=0, latency_mean_s=50.0, latency_sd_s=0.0,
                           emptiness_pass=EmptinessPass(poll_s=10.0, validate_s=15.0, delete_s=5.0)))
    c = w.cluster

    def at(t: float) -> None:
        w.env.run(until=t)

    workers = [c.request_node(0.0) for _ in range(3)]
    at(61)
    c.retire("n1", busy_ok=False)
    at(67)
    c.retire("n2", busy_ok=False)  # both found at t = 70, tainted at 85, gone at 90
    at(72)
    c.retire("n3", busy_ok=False)  # emptied while that batch is validated: found at 85
    at(87)
    late = c.request_node(87.0)    # lands on node 3, still open: it is not deleted at 100
    at(88)
    waits = c.request_node(88.0)   # nodes 1 and 2 are tainted, 3 is full: waits at the cap
    at(120)
    assert c.held_until == {1: 90.0, 2: 90.0}, c.held_until  # paid to their end, together
    assert late.connected_at == 87.0 and late.host == 3 and 3 in c.hosts
    assert waits.placed_at == 90.0 and waits.host not in (1, 2)  # placed once they went
    at(160)
    assert waits.connected_at == 140.0  # on a new node, a whole latency after
    at(203)
    c.end_of_run(203.0)  # both remaining nodes empty now: found at 210, deleted at 230
    assert c.held_until[3] == c.held_until[waits.host] == 230.0
    # (emptied, tainted, gone), as a node watch sees them
    assert sorted(c.disruptions) == [(61.0, 85.0, 90.0), (67.0, 85.0, 90.0), (203.0, 225.0, 230.0),
                                     (203.0, 225.0, 230.0)]
    assert [n.connected_at for n in workers] == [50.0] * 3


def test_the_nodes_still_empty_at_the_runs_end_go_in_karpenters_next_passes():
    from hta.sim.cluster import EmptinessPass
    from hta.sim.world import World

    # a batch is being validated at the end (found at 30, tainted at 45); a node still being
    # prepared then (ready at 100, its pod cancelled) is found by the first poll after it is
    # up: the loop looks at 45, then every 10 s, so at 105; tainted at 120, gone at 125
    w = World(Workload("t", [SimTask("a", "a", 10)]),
              ClusterModel(max_nodes=2, start_nodes=0, latency_mean_s=20.0, latency_sd_s=0.0,
                           emptiness_pass=EmptinessPass(poll_s=10.0, validate_s=15.0, delete_s=5.0)))
    c = w.cluster
    c.request_node(0.0)
    w.env.run(until=10)
    c.model.latency_mean_s = 90.0
    c.request_node(10.0)  # its node comes up at 100
    w.env.run(until=25)
    c.retire("n1", busy_ok=False)
    w.env.run(until=32)
    c.retire("n2", busy_ok=False)
    w.env.run(until=33)
    c.end_of_run(33.0)
    assert c.held_until == {1: 50.0, 2: 125.0}


def test_plain_pods_spread_over_the_nodes_and_pods_that_pack_fill_the_oldest_first():
    from hta.sim.world import World

    third = Resources(cores=1.0, memory_mb=5000.0, disk_mb=1000.0)

    def hosts(spread: bool) -> list[int | None]:
        w = World(Workload("t", [SimTask("a", "a", 10)]), ClusterModel(max_nodes=2, empty_node_ttl_s=100.0))
        w.cluster.add_empty_nodes(2)
        w.cluster.spread = spread
        return [w.cluster.request_node(0.0, shape=third).host for _ in range(3)]
    assert hosts(spread=False) == [1, 1, 1]  # (HTA's pod affinity: one node fills, the other stays empty)
    assert hosts(spread=True) == [1, 2, 1]   # (the default scheduler: the least allocated node)


def test_a_pod_that_leaves_on_its_own_holds_its_room_until_it_has_exited():
    from hta.sim.world import World

    def placed(exiting_s: float) -> float | None:
        w = World(Workload("t", [SimTask("a", "a", 10)]),
                  ClusterModel(max_nodes=1, start_nodes=0, empty_node_ttl_s=100.0, latency_mean_s=50.0,
                               latency_sd_s=0.0))
        w.cluster.request_node(0.0)
        w.env.run(until=60)
        w.cluster.retire("n1", busy_ok=False, exiting_s=exiting_s)
        w.env.run(until=61)
        n2 = w.cluster.request_node(61.0)  # one node at most: it waits for n1's room
        w.env.run(until=80)
        return n2.placed_at
    assert placed(0.0) == 61.0
    assert placed(5.0) == 65.0


def test_a_worker_on_its_way_says_when_its_pod_started_running_once_it_has():
    from hta.sim.backend import SimBackend
    from hta.sim.world import World

    # pod start 10 s, of which its last 4 s the pod runs (the worker starting, connecting)
    w = World(Workload("t", [SimTask("a", "a", 10)]),
              ClusterModel(start_nodes=1, empty_node_ttl_s=100.0, pod_start_s=10.0, pod_connect_s=4.0))
    w.cluster.add_empty_nodes(1)
    backend = SimBackend(w)
    w.cluster.request_node(0.0)
    w.env.run(until=5)
    assert [p.started_at for p in backend.pending()] == [None]
    w.env.run(until=7)
    assert [p.started_at for p in backend.pending()] == [6.0]
    w.env.run(until=11)
    assert backend.pending() == []  # connected at 10


def test_each_observation_tells_how_long_the_oldest_worker_on_its_way_has_waited():
    policy = Scripted([ScaleDecision(add=1)], every=5.0)
    world([SimTask("a", "a", 10)], policy, start_nodes=0, latency_mean_s=50.0).run()
    waited = [(o.time, o.latency.waiting_s) for o in policy.seen if o.pending]
    assert waited and all(w == pytest.approx(t) for t, w in waited), waited  # (asked for at t = 0)
    assert all(o.latency.waiting_s == 0.0 for o in policy.seen if not o.pending)


def test_without_an_empty_node_a_worker_waits_a_whole_latency_and_tasks_carry_their_overhead():
    tasks = [SimTask("a", "a", 10)]
    sim = world(tasks, Scripted([ScaleDecision(add=1)]), start_nodes=0, pod_start_s=2.0, latency_mean_s=50.0,
                task_overhead_s=0.5)
    s = sim.run()
    (conn,) = [r for r in sim.log.records if r.kind == "worker" and r.event == "connected"]
    assert conn.latency_s == 52.0 and s.runtime_s == pytest.approx(52.0 + 10.5)


def test_an_input_is_sent_to_a_worker_once_and_the_master_sends_one_file_at_a_time():
    # 100 MB at 100 MB/s: a second.  a then b on the starting worker (the database cached by
    # then); c and d together on two new workers, each with a file of its own: d's waits for c's
    db, own_c, own_d = ("db", 100.0), ("c.in", 100.0), ("d.in", 100.0)
    tasks = [SimTask("a", "a", 10, inputs=(db,)), SimTask("b", "a", 10, inputs=(db,), parents=["a"]),
             SimTask("c", "c", 10, inputs=(own_c,), parents=["b"]), SimTask("d", "c", 10, inputs=(own_d,), parents=["b"])]
    sim = world(tasks, Scripted(), transfer_mb_per_s=100.0, start_nodes=2, start_workers=None)
    sim.run()
    runs = {t: (start, end) for t, _, start, end in schedule(sim)}
    assert runs["a"] == (0.0, 11.0) and runs["b"] == (11.0, 21.0)  # sent once
    assert runs["c"][1] - runs["c"][0] == pytest.approx(11.0) and runs["d"][1] - runs["d"][0] == pytest.approx(12.0)
    assert sim.world.queue.transferred_mb == 300.0


def test_the_observation_says_which_shared_inputs_each_worker_holds():
    # every task of "a" reads the database; "c"'s two tasks read files of their own. The
    # worker that runs a holds the database from then on, the other worker nothing
    db = ("db", 100.0)
    tasks = [SimTask("a", "a", 10, inputs=(db,)), SimTask("b", "a", 10, inputs=(db,), parents=["a"]),
             SimTask("c", "c", 10, inputs=(("c.in", 1.0),), parents=["b"]),
             SimTask("d", "c", 10, inputs=(("d.in", 1.0),), parents=["b"])]
    policy = Scripted()  # (two workers: the second never runs an "a")
    world(tasks, policy, transfer_mb_per_s=100.0, start_nodes=2, start_workers=None).run()
    assert {o.shared_inputs == {"a": {"db": 100.0}} for o in policy.seen} == {True}
    holds = [w.cached_inputs for o in policy.seen for w in o.workers]
    assert frozenset() in holds and frozenset({"db"}) in holds and set(holds) <= {frozenset(), frozenset({"db"})}
    # ... and keeps it once a and b are done (Work Queue keeps a worker's cache until it leaves)
    after = [o for o in policy.seen if o.tasks_done >= 2 and o.workers]
    assert after and all(any(w.cached_inputs == {"db"} for w in o.workers) for o in after)
    # a world where files cost nothing sends none: nothing to cache
    free = Scripted()
    world(tasks, free).run()
    assert free.seen and all(not o.shared_inputs and not any(w.cached_inputs for w in o.workers) for o in free.seen)


def test_hta_keeps_the_workers_that_hold_the_database_for_the_next_stage():
    # BLAST in the measured world, 12/2/12 aligns, each reading the 500 MB database: between
    # stages 1 and 2 the aligns' workers wait on a reduce never measured before. Drained, they
    # are bought back for stage 3 and each new one fetches the database again
    from hta.sim.costs import MEASURED
    from hta.sim.workload import blast_3stage

    def sent_mb(spec: str) -> float:
        sim = Simulation(parse_wfformat(blast_3stage(0, (12, 2, 12)), "b"), make_policy(spec),
                         ClusterModel(max_nodes=200, **MEASURED.cluster_update()), seed=0)
        sim.run()
        return sim.world.queue.transferred_mb

    held, drained = sent_mb("hta"), sent_mb("hta:hold_cached_mb=0")
    assert drained - held >= 4 * 500.0


def test_outputs_are_brought_back_before_the_task_completes():
    sim = world([SimTask("a", "a", 10, output_mb=50.0)], Scripted(), transfer_mb_per_s=100.0)
    assert sim.run().runtime_s == pytest.approx(10.5)


def test_a_node_kept_empty_is_paid_until_it_goes():
    # max-then-drain's one worker, drained once its 100 s task ends. With the cluster
    # autoscaler's hold it starts at once on the empty starting node and that node is paid
    # 600 s after; with Karpenter's none the empty starting node goes at once, and the worker
    # waits 10 s for a node of its own, which goes with it
    def node_s(hold: float) -> float:
        sim = world([SimTask("a", "a", 100, cores=3)], make_policy("max-then-drain"), max_nodes=1,
                    start_workers=0, empty_node_ttl_s=hold, teardown_s=2000.0)
        return sim.run().node_s

    assert node_s(0.0) == pytest.approx(10.0 + 100.0)
    assert node_s(600.0) == pytest.approx(100.0 + 600.0)


def test_a_node_emptied_by_the_runs_end_is_paid_its_hold_as_one_emptied_before_it():
    # a static pool's worker is still up when its 100 s workflow ends and the run stops it;
    # max-then-drain drains its own at the same moment. Either way the node empties then and
    # the cluster keeps it its hold (Karpenter's consolidateAfter, Slurm's SuspendTime), paid
    def node_s(policy: str, hold: float) -> float:
        sim = world([SimTask("a", "a", 100, cores=3)], make_policy(policy), max_nodes=1, start_workers=1,
                    empty_node_ttl_s=hold)
        return sim.run().node_s

    assert node_s("static", 0.0) == pytest.approx(100.0)
    assert node_s("static", 600.0) == pytest.approx(100.0 + 600.0)
    assert node_s("max-then-drain", 600.0) == pytest.approx(node_s("static", 600.0))


def test_a_node_whose_pod_is_cancelled_while_it_is_prepared_comes_up_and_then_stays_its_hold():
    from hta.sim.world import World

    w = World(Workload("t", [SimTask("a", "a", 10)]),
              ClusterModel(max_nodes=2, start_nodes=0, empty_node_ttl_s=100.0, latency_mean_s=200.0,
                           latency_sd_s=0.0))
    n = w.cluster.request_node(0.0)
    w.env.run(until=50)
    w.cluster.retire(n.id, busy_ok=False)  # its node is ready at 200: then empty for 100 s
    assert w.cluster.held_until == {1: 300.0}
    w.env.run(until=299)
    assert 1 in w.cluster.hosts
    w.env.run(until=301)
    assert 1 not in w.cluster.hosts


def test_static_starting_nodes_never_go_and_are_paid_only_while_a_worker_holds_them():
    def run(static: bool):
        sim = world([SimTask("a", "a", 100, cores=3)], make_policy("max-then-drain"), max_nodes=1, start_workers=1,
                    empty_node_ttl_s=600.0, static_start_nodes=static)
        return sim, sim.run()

    sim, s = run(True)
    assert 1 in sim.world.cluster.hosts and not sim.world.cluster.held_until
    assert s.node_s == pytest.approx(100.0) and s.teardown_node_s == 0.0
    sim, s = run(False)  # a cloud node: paid its hold after the end, counted as after the end
    assert s.node_s == pytest.approx(700.0) and s.teardown_node_s == pytest.approx(600.0)


def test_policy_settings_from_the_spec_and_clear_errors():
    from hta.policies.registry import make_policy

    f = make_policy("factory:tasks_per_worker=2,idle_timeout_s=60")
    assert (f.tasks_per_worker, f.idle_timeout_s, f.name) == (2.0, 60.0, "factory:tasks_per_worker=2,idle_timeout_s=60")
    idle = WorkerInfo(id="idle", capacity=NODE, running=0, idle_since=0.0)
    assert f.decide(obs_at(60.0, [idle])).drain == ["idle"]  # the setting is in force
    assert make_policy("hta:drain_after=3,latency_statistic=last").drain_after == 3
    with pytest.raises(ValueError, match="'nope' is not a setting of factory; it has: idle_timeout_s"):
        make_policy("factory:nope=1")
    with pytest.raises(ValueError, match="is not a float"):
        make_policy("factory:idle_timeout_s=soon")
    observe = make_policy("observe")
    assert not observe.decide(obs_at(0, waiting=50)).acts  # watches only


# -- work_queue_factory as its source has it (bench/factory_check.py runs the real one beside it) --

def test_factory_target_counts_the_resources_tasks_declare():
    """work_queue_factory.c l. 321: need = MAX(tasks / tasks_per_worker, what the declared
    cores, memory and disk of the waiting tasks and the workers' use fill)."""
    big = Observation(time=0, worker_shape=NODE, max_workers=20,
                      waiting=[TaskGroup(category="big", count=6, request=Resources(cores=2, memory_mb=6000))])
    assert FactoryPolicy().target(big) == 4  # 6 tasks / 3 per worker = 2, but 12 cores / 3 = 4
    assert FactoryPolicy(tasks_per_worker=1).target(big) == 6
    fat = big.model_copy(update={"waiting": [TaskGroup(category="fat", count=6,
                                                       request=Resources(cores=1, memory_mb=12000))]})
    assert FactoryPolicy().target(fat) == 5  # 72000 MB / 15000 MB per worker
    busy = big.model_copy(update={"waiting": [], "workers": [busy_worker("w", 1.0, running=3)]})
    assert FactoryPolicy().target(busy) == 1  # the cores in use count too


def test_factory_counts_as_its_version_does():
    """Before 7.4.0: new = needed - submitted - |submitted - connected|, ≤ 5; from 7.4.0 (d823c53d3)
    new = needed - submitted with at most 5 waiting to connect."""
    busy = [busy_worker(f"w{i}", 1.0) for i in range(2)]
    pend = [PendingWorker(id=f"p{i}", requested_at=0, shape=NODE) for i in range(3)]
    many = obs_at(30, busy, pend, waiting=60)  # needed 20, submitted 5, connected 2
    assert FactoryPolicy().decide(many).add == 2
    assert FactoryPolicy(pre_7_4_count=True).decide(many).add == 5  # 20 - 5 - 3 = 12, ≤ 5
    some = obs_at(30, busy, pend, waiting=20)  # needed ceil(22 cores / 3) = 8
    assert FactoryPolicy().decide(some).add == 2  # 8 - 5 = 3, but 3 already wait to connect
    assert FactoryPolicy(pre_7_4_count=True).decide(some).add == 0  # 8 - 5 - 3: the pending count twice


def test_factory_cycles_every_35_s_and_an_idle_worker_leaves_at_its_expiry():
    """After its submissions the factory waits 5 s for exited workers, then sleeps 30 s (l. 1007-1038);
    the worker's own -t timeout ends it whenever it falls, and a worker that left between cycles
    is reaped only after the next cycle's submissions: until then it still counts as submitted."""
    f = FactoryPolicy(idle_timeout_s=60, pre_7_4_count=True)
    w = [busy_worker(f"b{i}", 1.0) for i in range(2)]
    idle = WorkerInfo(id="i", capacity=NODE, running=0, idle_since=-50.0)  # expires at t=10
    d = f.decide(obs_at(0, w + [idle]))
    assert (d.add, d.drain, d.next_decision_s) == (0, [], 10)  # a cycle; called back at the expiry
    d = f.decide(obs_at(10, w + [idle], waiting=9))
    assert (d.add, d.drain, d.next_decision_s) == (0, ["i"], 25)  # an idle check submits nothing; cycle at 35
    d = f.decide(obs_at(35, w, waiting=9))  # needed ceil(11 cores / 3) = 4; submitted 3 (i unreaped), connected 2
    assert (d.add, d.target_workers, d.next_decision_s) == (0, 4, 35)
    assert FactoryPolicy(idle_timeout_s=60, pre_7_4_count=True).decide(obs_at(35, w, waiting=9)).add == 2
    d = f.decide(obs_at(70, w, waiting=9))  # reaped after the last cycle's submissions
    assert d.add == 2

    # its last worker exits within the 5 s wait: the wait ends there and the 30 s sleep starts
    f = FactoryPolicy(idle_timeout_s=60)
    last = WorkerInfo(id="last", capacity=NODE, running=0, idle_since=-57.0)  # expires at t=3
    assert f.decide(obs_at(0, [last])).next_decision_s == 3
    d = f.decide(obs_at(3, [last]))
    assert d.drain == ["last"] and d.next_decision_s == 30
    d = f.decide(obs_at(33, [], waiting=2))
    assert d.add == 1 and d.next_decision_s == 35
    assert FactoryPolicy().decide(obs_at(0)).next_decision_s == 30  # no worker: no wait


def test_an_idle_factory_worker_reads_its_timer_every_5_s():
    """work_queue_worker sleeps 5 s at a time while idle (l. 1861) and leaves at the first wake-up
    past T + 1 s (``time(0) > idle_stoptime``): 65 s after its last task for -t 60."""
    f = FactoryPolicy(idle_timeout_s=60, worker_wakeup_s=5)
    idle = WorkerInfo(id="i", capacity=NODE, running=0, idle_since=0.0)
    d = f.decide(obs_at(30, [idle]))
    assert d.drain == [] and d.next_decision_s == 35  # the next cycle (t=65) is its expiry too
    assert f.decide(obs_at(60, [idle])).drain == []
    assert f.decide(obs_at(65, [idle])).drain == ["i"]
    assert FactoryPolicy(idle_timeout_s=62, worker_wakeup_s=5).idle_for() == 65
    assert FactoryPolicy(idle_timeout_s=59, worker_wakeup_s=5).idle_for() == 60
    assert FactoryPolicy(idle_timeout_s=60).idle_for() == 60


def test_no_node_seconds_floor_for_a_policy_whose_runs_were_cut_off():
    # "observe" never scales: on io-bound it is cut off at 30 × the bound, so its runtime
    # is the cutoff, not a finishing time, and a floor there would be no floor
    from hta.sim.cluster import ClusterModel
    from hta.sim.compare import _floor, compare

    c = compare("io-bound", ["observe", "hta"], 1, ClusterModel(max_nodes=200))
    assert c.by_policy()["observe"][0].exit_code != 0
    assert c.floor_node_s("observe") is None and _floor(c, "observe") == "–"
    assert c.as_json()["oracle"]["node_s_floor_at_mean_runtime"]["observe"] is None
    assert 0 < c.floor_node_s("hta") <= c.mean("hta", "node_s")


def test_the_node_seconds_floor_is_given_where_empty_nodes_are_kept_and_paid():
    # the measured world keeps an empty node 10 min, and pays it: the floor holds there
    # (tests/test_bound.py plays kept nodes and transfers), so it is printed there too
    from hta.sim.cluster import ClusterModel
    from hta.sim.compare import _floor, compare
    from hta.sim.costs import MEASURED

    c = compare("io-bound", ["hta", "max-then-drain"], 1, ClusterModel(max_nodes=20, **MEASURED.cluster_update()))
    for policy in ("hta", "max-then-drain"):
        assert 0 < c.floor_node_s(policy) <= c.mean(policy, "node_s")
        assert _floor(c, policy).endswith("×)")
