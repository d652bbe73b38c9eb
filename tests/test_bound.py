"""The oracle is a lower bound: no policy, not even the largest cluster present from
t = 0, finishes a workflow sooner, nor pays fewer node·s than the floor at its own
runtime (hta/sim/oracle.py). Random small DAGs on random clusters, every policy; and
the bounds' parts by hand."""

from __future__ import annotations

import math
import random

import pytest

from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel
from hta.sim.oracle import (
    NodeSecondsFloor,
    barriers,
    critical_path_s,
    least_mean_runtime_s,
    mean_node_seconds_floor,
    node_seconds_floor,
    oracle_runtime_s,
    phases,
)
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload, WorkloadError, parse_wfformat, topological_order

POLICIES = ["observe", "static", "max-then-drain", "hta", "factory", "hpa-20", "keda-2", "hta-cost",
            "hta:worker_shape=node", "hta-time:worker_shape=node", "hta:probe_split=1", "hta-time",
            # rivals on pods as HTA's default cuts nodes (the bound's domain: workers of at
            # least one core; a 1-core pod never runs a task that declares more)
            "max-then-drain[pods=learned]", "keda-job-1[pods=learned]", "factory[pods=learned]"]


def random_workload(rng: random.Random) -> Workload:
    """Stages of alike tasks; a stage hangs on all or some tasks of earlier stages, and
    sometimes on a single join task (a barrier)."""
    tasks: list[SimTask] = []
    stages: list[list[str]] = []
    for s in range(rng.randint(1, 4)):
        width = rng.choice([1, 1, 2, 3, 5, 8])
        cat = rng.choice(["a", "b", "c"])
        parents: list[str] = []
        if stages:
            prev = stages[-1]
            parents = prev if rng.random() < 0.7 else rng.sample(prev, k=rng.randint(1, len(prev)))
            if rng.random() < 0.3 and len(stages) > 1:
                parents = parents + rng.sample(stages[-2], k=1)
        ids = []
        for i in range(width):
            tid = f"s{s}_{i}"
            own = parents if rng.random() < 0.8 else parents[:1]
            files = rng.choice([(), (), (("db", 300.0),), (("db", 300.0), (tid, 20.0))])
            tasks.append(SimTask(tid, cat, runtime_s=round(rng.uniform(1, 120), 2), cores=rng.choice([1, 1, 2, 3]),
                                 memory_mb=rng.choice([100, 512, 4000]), cpu_util=rng.uniform(0.1, 1.0),
                                 parents=sorted(set(own)), inputs=files, output_mb=rng.choice([0.0, 5.0])))
            ids.append(tid)
        stages.append(ids)
    return Workload("random", tasks, declared=rng.random() < 0.3)


def random_cluster(rng: random.Random) -> ClusterModel:
    max_nodes = rng.randint(1, 5)
    return ClusterModel(
        max_nodes=max_nodes, start_nodes=rng.randint(0, max_nodes), node_cores=3.0, node_memory_mb=15000.0,
        latency_mean_s=rng.choice([5.0, 30.0, 157.4]), latency_sd_s=rng.choice([0.0, 0.0, 4.2, 40.0]),
        pull_s=rng.choice([0.0, 3.0]), pod_start_s=rng.choice([0.0, 2.0]),
        task_overhead_s=rng.choice([0.0, 0.5]), teardown_s=0.0, horizon_s=20000.0,
        # the measured world's costs: transfers, and empty nodes kept (and paid) 10 min
        transfer_mb_per_s=rng.choice([0.0, 0.0, 500.0]), empty_node_ttl_s=rng.choice([0.0, 0.0, 600.0]))


@pytest.mark.parametrize("seed", range(300))
def test_no_policy_beats_the_bound(seed):
    rng = random.Random(seed)
    wl = random_workload(rng)
    cluster = random_cluster(rng)
    bound = oracle_runtime_s(wl, cluster)
    policy = POLICIES[seed % len(POLICIES)]
    if policy == "observe":  # the largest cluster, there from t = 0, never scaled
        cluster = cluster.model_copy(update={"start_nodes": cluster.max_nodes})
        bound = oracle_runtime_s(wl, cluster)
    s = Simulation(wl, make_policy(policy), cluster, seed=seed, log=ScalingLogWriter()).run()
    assert s.exit_code == 0, (policy, cluster)
    assert s.runtime_s >= bound - 1e-6, (policy, cluster, s.runtime_s, bound)
    floor = node_seconds_floor(wl, cluster).at(s.runtime_s)
    assert s.node_s >= floor - 1e-6, (policy, cluster, s.runtime_s, s.node_s, floor)


@pytest.mark.bound
@pytest.mark.parametrize("seed", range(300, 2300))
def test_no_policy_beats_the_bound_many(seed):
    test_no_policy_beats_the_bound(seed)


def test_the_largest_cluster_from_the_start_meets_the_bound_on_a_chain():
    # a chain: every task is a barrier, the bound is the critical path, and it is reached
    wl = Workload("chain", [SimTask("a", "x", 10), SimTask("b", "x", 20, parents=["a"]),
                            SimTask("c", "y", 5, parents=["b"])])
    cluster = ClusterModel(max_nodes=2, start_nodes=2, teardown_s=0.0)
    assert oracle_runtime_s(wl, cluster) == 35
    s = Simulation(wl, make_policy("observe"), cluster, log=ScalingLogWriter()).run()
    assert s.runtime_s == 35


def test_barriers_cut_the_workflow_into_phases_that_add_up():
    # split → 6 × 100 s → reduce → 6 × 100 s → reduce on 2 nodes of 3 cores from the start:
    # each wide stage needs 600 core·s / 6 cores = 100 s; the old bound (max of the critical
    # path, 250 s, and all the work over the cores, 1225/6 ≈ 204 s) missed that they cannot overlap
    t = [SimTask("split", "s", 10)]
    t += [SimTask(f"a{i}", "a", 100, parents=["split"]) for i in range(6)]
    t += [SimTask("r1", "r", 10, parents=[f"a{i}" for i in range(6)])]
    t += [SimTask(f"b{i}", "a", 100, parents=["r1"]) for i in range(6)]
    t += [SimTask("r2", "r", 5, parents=[f"b{i}" for i in range(6)])]
    wl = Workload("w", t)
    assert [x.id for x, b in zip(topological_order(wl), barriers(topological_order(wl))) if b] == \
        ["split", "r1", "r2"]
    assert [p.tasks for p in phases(wl)] == [1, 6, 1, 6, 1]
    assert oracle_runtime_s(wl, ClusterModel(max_nodes=2, start_nodes=2)) == 10 + 100 + 10 + 100 + 5
    # one node at the start, the second no sooner than a fixed 50 s latency: the first wide
    # stage has 3 cores for 40 s (120 core·s), then 6 cores for the other 480 (80 s); but its
    # tasks are whole: 3 of the 6 cannot start before the second node comes (at 50 s), and
    # end 100 s after it
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=0)
    assert oracle_runtime_s(wl, c) == 10 + (40 + 100) + 10 + 100 + 5
    # with a spread the world's draw is clipped 4 sd below the mean (50 − 16 = 34 s): the
    # wide stage's last tasks start on the second node at 34 s at the soonest
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=4)
    assert oracle_runtime_s(wl, c) == 10 + (24 + 100) + 10 + 100 + 5
    # short tasks in a row all start on the starting node before it: 6 × 10 s on 3 cores
    # from t = 10 to the 34 s arrival (two rounds of 10 s): no whole-task term
    short = Workload("s", [SimTask("split", "s", 10)] + [SimTask(f"a{i}", "a", 10, parents=["split"])
                                                         for i in range(6)])
    assert oracle_runtime_s(short, c) == 10 + 20
    # a spread so wide the clip is below 1 s: a node may connect after 1 s, so the second
    # node is there before the split has ended
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=20)
    assert oracle_runtime_s(wl, c) == 10 + 100 + 10 + 100 + 5
    # no node at the start: nothing runs before the first one can connect
    c = ClusterModel(max_nodes=2, start_nodes=0, latency_mean_s=50, latency_sd_s=0, pull_s=5)
    assert oracle_runtime_s(wl, c) == 55 + 10 + 100 + 10 + 100 + 5


def test_the_node_seconds_floor_by_hand():
    # 6 tasks of 100 s on 1 core; one node of 3 cores from the start, a second one after a
    # fixed 50 s: the starting node alone runs them in two rounds (200 s, 200 node·s: the
    # work itself, the floor from then on); to finish by 150 s (the bound: three start on
    # the second node at 50 s) the bought node must run 200 − 150 = 50 of the 200 node·s
    # of work, so half a node's 100 s from 50 s to 150 s, paying L = 50 s for it: 225
    wl = Workload("w", [SimTask(f"a{i}", "a", 100) for i in range(6)], declared=True)  # no whole-worker first task
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=0, teardown_s=0.0)
    floor = node_seconds_floor(wl, c)
    assert (floor.busy_node_s, floor.work_node_s, floor.latency_s, floor.runtime_bound_s) == (200, 200, 50, 150)
    assert floor.at(149) == math.inf  # sooner than the bound: no policy
    assert floor.at(150) == 225 and floor.at(175) == pytest.approx(200 + 50 * 25 / 125)
    assert floor.at(200) == floor.at(10_000) == 200
    # the one node that never scales is the floor exactly; buying the second at once costs more
    s = Simulation(wl, make_policy("observe"), c, log=ScalingLogWriter()).run()
    assert (s.runtime_s, s.node_s) == (200, 200) == (s.runtime_s, floor.at(s.runtime_s))
    s = Simulation(wl, make_policy("max-then-drain"), c, log=ScalingLogWriter()).run()
    assert s.runtime_s < 200 and s.node_s >= floor.at(s.runtime_s)
    # a chain on no starting node: one node bought (L) and connected for the whole path
    chain = Workload("chain", [SimTask("a", "x", 10), SimTask("b", "x", 20, parents=["a"])])
    c0 = ClusterModel(max_nodes=2, start_nodes=0, latency_mean_s=50, latency_sd_s=0)
    assert node_seconds_floor(chain, c0).at(80) == 30 + 50 * 10 / 30  # 30/3 node·s of work by 80 s
    assert node_seconds_floor(chain, c0).at(1e12) == pytest.approx(30)  # the path, not 30/3: one task at a time
    # no node can be bought: the starting nodes alone, or no policy
    fixed = ClusterModel(max_nodes=1, start_nodes=1)
    assert node_seconds_floor(wl, fixed).at(200) == 200 and node_seconds_floor(wl, fixed).at(199) == math.inf
    # no deadline, no work: no NaN from 0 × inf
    none = NodeSecondsFloor(busy_node_s=0, work_node_s=0, start_nodes=0, latency_s=50, runtime_bound_s=50)
    assert node_seconds_floor(chain, c0).at(math.inf) == 30 and none.at(math.inf) == 0
    assert mean_node_seconds_floor([none], 100) == 0 and mean_node_seconds_floor([none], math.inf) == 0
    # the starting node alone finishes (100 s) before any bought node could come (140 s):
    # sooner than that, no policy can, whatever the runtime bound says
    alone = NodeSecondsFloor(busy_node_s=100, work_node_s=100, start_nodes=1, latency_s=140, runtime_bound_s=90)
    assert alone.at(95) == math.inf and alone.at(100) == 100
    assert mean_node_seconds_floor([alone], 95) > 1e6 and mean_node_seconds_floor([alone], 100) == 100


def test_the_mean_floor_lets_one_run_be_slower_than_another():
    # two seeds: a mean runtime may come from one fast, dear run and one slow, cheap one;
    # the dual finds the cheapest split, as a search over every split does
    a = NodeSecondsFloor(busy_node_s=300, work_node_s=250, start_nodes=1, latency_s=140.6, runtime_bound_s=160)
    b = NodeSecondsFloor(busy_node_s=1000, work_node_s=900, start_nodes=0, latency_s=140.6, runtime_bound_s=300)
    for mean in (230, 300, 500, 1000, 5000):
        split = min((a.at(t) + b.at(2 * mean - t)) / 2 for t in [160 + i / 4 for i in range(int((2 * mean - 160) * 4))])
        got = mean_node_seconds_floor([a, b], mean)
        assert got <= split + 1e-6 and got == pytest.approx(split, rel=1e-3), mean
        assert got <= (a.at(mean) + b.at(mean)) / 2 + 1e-6  # never above both at the mean
    assert mean_node_seconds_floor([a, b], 229) == math.inf  # the bounds' mean is 230
    assert mean_node_seconds_floor([a, b], math.inf) == 650  # the work (and paths) alone
    # and back: the least mean runtime at a mean node·s
    t = least_mean_runtime_s([a, b], 700)
    assert mean_node_seconds_floor([a, b], t) >= 700 - 1e-6 and mean_node_seconds_floor([a, b], t * 1.001) <= 700
    assert least_mean_runtime_s([a, b], 649) == math.inf and least_mean_runtime_s([a, b], 1e9) == 230


def test_a_floor_scaled_to_other_units_is_the_same_floor_in_them():
    # bench/pareto.py weighs seeds alike by scaling each one's times to the median length and
    # its node·s to the median work: scaled(t, c).at(t × T) = c × at(T) wherever at is defined
    f = NodeSecondsFloor(busy_node_s=300, work_node_s=250, start_nodes=1, latency_s=140.6, runtime_bound_s=160)
    for k, c in ((0.1, 0.1), (0.5, 2.0), (3.0, 1.0), (27.6, 0.8)):
        g = f.scaled(k, c)
        for t in (159, 160, 200, 250, 1000, math.inf):
            assert g.at(k * t) == pytest.approx(c * f.at(t)), (k, c, t)
        assert g.runtime_bound_s == k * 160 and g._cheapest_past() == pytest.approx(k * f._cheapest_past())
        for price in (0.01, 1.0, 100.0):  # the same deadline, at the price in the new units
            assert g._best_deadline(price * c / k) == pytest.approx(k * f._best_deadline(price))
    assert f.scaled(2.0) == f.scaled(2.0, 2.0)
    # two seeds alike but one ten times as long and large: scaled back they are one floor
    long = NodeSecondsFloor(busy_node_s=3000, work_node_s=2500, start_nodes=1, latency_s=1406, runtime_bound_s=1600)
    assert long.scaled(0.1).at(200) == pytest.approx(f.at(200))
    assert mean_node_seconds_floor([f, long.scaled(0.1)], 200) == pytest.approx(f.at(200))


def test_a_cycle_is_refused_in_one_line_naming_its_tasks():
    data = {"name": "loop", "workflow": {"tasks": [
        {"id": "x", "runtime": 1, "parents": []},
        {"id": "a", "runtime": 1, "parents": ["x", "c"]},
        {"id": "b", "runtime": 1, "parents": ["a"]},
        {"id": "c", "runtime": 1, "parents": ["b"]}]}}
    with pytest.raises(WorkloadError) as e:
        parse_wfformat(data)
    msg = str(e.value)
    assert "\n" not in msg and "cycle" in msg and "remove one of these parent links" in msg
    assert all(t in msg for t in ("a", "b", "c")) and " x " not in msg


def test_a_100k_task_chain_loads_and_is_bounded_without_recursion():
    n = 100_000
    tasks = [{"id": f"t{i}", "name": "step", "runtimeInSeconds": 1.0, "parents": [f"t{i - 1}"] if i else []}
             for i in range(n)]
    wl = parse_wfformat({"name": "chain", "workflow": {"tasks": tasks}})
    assert critical_path_s(wl) == n
    assert oracle_runtime_s(wl, ClusterModel()) == n


def test_the_tasks_that_start_after_the_first_node_comes_include_a_long_one():
    # 1 node of 3 cores at the start, a second no sooner than a fixed 50 s: at most 3 of
    # the 6 tasks start before it (none ends by then), so one of the 4 longest (all 100 s)
    # starts at 50 s at the soonest: the stage ends at 150 s, not 50 + its shortest (90 s)
    durations = [100, 100, 100, 100, 100, 90]
    wl = Workload("w", [SimTask(f"a{i}", "a", d) for i, d in enumerate(durations)], declared=True)
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=0, pull_s=0, pod_start_s=0,
                     task_overhead_s=0, teardown_s=0)
    assert oracle_runtime_s(wl, c) == 150
    # and it is reached: the starting node takes three 100 s tasks, the second node the rest
    s = Simulation(wl, make_policy("max-then-drain"), c, log=ScalingLogWriter()).run()
    assert s.runtime_s == pytest.approx(150, abs=1.0)


def test_a_task_with_a_long_tail_that_must_start_late_ends_the_phase_late():
    # four chains head (60 s) → body (100 s); 1 node of 3 cores at the start, a second no
    # sooner than a fixed 50 s. No head ends by 50 s, so at most 3 heads start before it;
    # the fourth starts at 50 s at the soonest and its chain ends 160 s later: 210 s (by
    # runtimes alone the bound was the critical path, 160 s)
    tasks = [SimTask(f"h{i}", "h", 60) for i in range(4)] + \
        [SimTask(f"b{i}", "b", 100, parents=[f"h{i}"]) for i in range(4)]
    wl = Workload("w", tasks, declared=True)
    c = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=0, pull_s=0, pod_start_s=0,
                     task_overhead_s=0, teardown_s=0)
    assert [p.tasks for p in phases(wl, c)] == [8]
    assert oracle_runtime_s(wl, c) == 210
    s = Simulation(wl, make_policy("max-then-drain"), c, log=ScalingLogWriter()).run()
    assert s.runtime_s == pytest.approx(210, abs=1.0)


def test_work_that_cannot_start_before_its_ancestors_end_is_counted_after_them():
    # A (10 s) → B1..B6 (10 s each), and Z (5 s) on its own (so A is no barrier), on one
    # node of 3 cores from the start: the B's cannot start before 10 s, and their 60 core·s
    # take 20 s on 3 cores, so the run lasts 30 s — more than the critical path (20 s) and
    # all the work over the cores (75 / 3 = 25 s)
    tasks = [SimTask("A", "a", 10), SimTask("Z", "z", 5)] + \
        [SimTask(f"B{i}", "b", 10, parents=["A"]) for i in range(6)]
    wl = Workload("w", tasks, declared=True)
    c = ClusterModel(max_nodes=1, start_nodes=1, task_overhead_s=0, teardown_s=0)
    assert [p.tasks for p in phases(wl, c)] == [8]
    assert oracle_runtime_s(wl, c) == 30
    s = Simulation(wl, make_policy("observe"), c, log=ScalingLogWriter()).run()
    assert s.runtime_s == pytest.approx(30, abs=1.0)


def test_tasks_after_the_first_bought_node_come_in_whole_waves():
    # 13 tasks of 10 s, 3 cores until 10 s, 6 from then on: 3 run before, then 6 and 4 —
    # a fluid 30 + 100 / 6 would end at 26.7 s; two waves after 10 s end at 30 s, as a run does
    wl = Workload("waves", [SimTask(f"t{i}", "x", 10) for i in range(13)])
    cluster = ClusterModel(max_nodes=2, start_nodes=1, node_cores=3, latency_mean_s=10, latency_sd_s=0,
                           teardown_s=0.0, auto_allocation=True)  # (whole nodes share: the packed world)
    [ph] = phases(wl, cluster)
    assert ph.end_in_waves(0, 3, 6, 10) == 30
    assert oracle_runtime_s(wl, cluster) == 30
    s = Simulation(wl, make_policy("max-then-drain"), cluster, log=ScalingLogWriter()).run()
    assert s.runtime_s == pytest.approx(30)


def test_a_task_that_declares_nothing_counts_the_cores_a_throttled_pod_leaves_it():
    # 2-core tasks at 95 %, undeclared: a 1-core pod throttles one to 1.9 × its runtime, so
    # three share a 3-core node (one slot a core) and each occupies 1.9 cores' worth of
    # it; declared, each holds its 2 cores (one a node) — the bound is higher
    tasks = [SimTask(f"t{i}", "x", 100, cores=2, cpu_util=0.95) for i in range(6)]
    cluster = ClusterModel(max_nodes=1, start_nodes=1, node_cores=3, teardown_s=0.0)
    [ph] = phases(Workload("free", tasks), cluster)
    assert (ph.min_cores, ph.work_core_s) == (1.0, pytest.approx(6 * 100 * 1.9))
    [ph] = phases(Workload("declared", tasks, declared=True), cluster)
    assert (ph.min_cores, ph.work_core_s) == (2.0, 6 * 100 * 2)
    assert oracle_runtime_s(Workload("declared", tasks, declared=True), cluster) == 600  # one at a time
    assert oracle_runtime_s(Workload("free", tasks), cluster) == pytest.approx(6 * 100 * 1.9 / 3)


@pytest.mark.parametrize("case", ["overhead", "small-node", "small-node-declared", "small-node-shared"])
def test_throttled_tasks_do_not_beat_the_bound(case):
    # (a reviewer's cases) a throttled task's overhead is not stretched, so it occupies its
    # pod's cores, not its busy ones; and a node under one core makes pods under one core,
    # whose workers advertise a whole core: a declared 1-core task runs on half a core
    declared = case.startswith("small-node-")
    if case == "overhead":
        tasks = [SimTask(f"t{i}", "x", 100, cores=2, cpu_util=0.95) for i in range(6)]
        cluster = ClusterModel(max_nodes=2, start_nodes=0, task_overhead_s=100, teardown_s=0.0)
        policy = "hta"  # (probes: a third of a node for a never-measured task)
    elif case == "small-node":
        tasks = [SimTask(f"t{i}", "x", 100, cores=2, cpu_util=0.2) for i in range(2)]
        cluster = ClusterModel(max_nodes=2, start_nodes=2, node_cores=0.5, teardown_s=0.0)
        policy = "observe"
    elif case == "small-node-declared":
        tasks = [SimTask(f"t{i}", "x", 100, cores=1, cpu_util=0.2) for i in range(4)]
        cluster = ClusterModel(max_nodes=2, start_nodes=2, node_cores=0.5, teardown_s=0.0)
        policy = "observe"
    else:  # two half-core tasks on a pod of half a core (advertising 1) share its quota
        tasks = [SimTask(f"t{i}", "x", 100, cores=0.5, cpu_util=1.0) for i in range(2)]
        cluster = ClusterModel(max_nodes=1, start_nodes=1, node_cores=0.5, teardown_s=0.0)
        policy = "observe"
    wl = Workload(case, tasks, declared=declared)
    s = Simulation(wl, make_policy(policy), cluster, log=ScalingLogWriter()).run()
    assert s.exit_code == 0
    assert s.runtime_s >= oracle_runtime_s(wl, cluster) - 1e-6
    assert s.node_s >= node_seconds_floor(wl, cluster).at(s.runtime_s) - 1e-6


def test_tasks_that_take_no_core_are_not_counted_in_waves():
    # (a reviewer's case) 4 tasks of 10 s and 0 cores run at once, all on the starting node
    wl = Workload("free", [SimTask(f"t{i}", "x", 10, cores=0) for i in range(4)])
    cluster = ClusterModel(max_nodes=2, start_nodes=1, latency_mean_s=50, latency_sd_s=0, teardown_s=0.0)
    assert oracle_runtime_s(wl, cluster) == 10


def wave_case(rng: random.Random) -> tuple[Workload, ClusterModel]:
    """Where whole waves bind: alike tasks, a few more than a whole number of waves of the
    largest cluster's slots, sometimes after a split task; starting nodes with and without
    workers, overheads per category."""
    most = rng.randint(1, 5)
    start = rng.randint(0, most)
    cluster = ClusterModel(max_nodes=most, start_nodes=start, start_workers=rng.choice([None, None, rng.randint(0, start)]),
                           node_cores=3.0, latency_mean_s=rng.choice([5.0, 20.0, 30.0, 60.0]),
                           latency_sd_s=rng.choice([0.0, 2.0]), pull_s=rng.choice([0.0, 3.0]),
                           pod_start_s=rng.choice([0.0, 2.0]), task_overhead_s=rng.choice([0.0, 0.5]),
                           task_overhead_by_category_s=rng.choice([{}, {"a": 2.0}]), teardown_s=0.0, horizon_s=20000.0)
    cores = rng.choice([1, 1, 1, 2])
    slots = max(1, int(most * 3 // cores))
    n = slots * rng.randint(1, 4) + rng.randint(1, 3) + rng.randint(0, 6)
    base = rng.uniform(5, 80)
    split = rng.random() < 0.3
    tasks = [SimTask("split", "s", round(rng.uniform(0, 30), 2))] if split else []
    for i in range(n):
        rt = (round(base * rng.uniform(0.85, 1.15), 2) if rng.random() < 0.9
              else rng.choice([0.0, round(base * rng.uniform(0.1, 2), 2)]))
        own = cores if rng.random() < 0.9 else rng.choice([1, 2, 3])
        tasks.append(SimTask(f"t{i}", rng.choice(["a", "b"]), rt, cores=own,
                             memory_mb=rng.choice([100, 512, 4000, 9000]), parents=["split"] if split else []))
    return Workload("waves", tasks, declared=rng.random() < 0.4), cluster


@pytest.mark.parametrize("seed", range(150))
def test_no_policy_beats_the_bound_where_whole_waves_bind(seed):
    rng = random.Random(seed)
    wl, cluster = wave_case(rng)
    policy = POLICIES[seed % len(POLICIES)]
    if policy == "observe":
        cluster = cluster.model_copy(update={"start_nodes": cluster.max_nodes, "start_workers": None})
    bound = oracle_runtime_s(wl, cluster)
    s = Simulation(wl, make_policy(policy), cluster, seed=seed, log=ScalingLogWriter()).run()
    assert s.exit_code == 0, (policy, cluster)
    assert s.runtime_s >= bound - 1e-6, (policy, cluster, s.runtime_s, bound)


@pytest.mark.bound
@pytest.mark.parametrize("seed", range(150, 1500))
def test_no_policy_beats_the_bound_where_whole_waves_bind_many(seed):
    test_no_policy_beats_the_bound_where_whole_waves_bind(seed)
