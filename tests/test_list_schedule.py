"""List schedules (hta/sim/list_schedule.py): the references that split a run's distance
from the runtime bound into the master's dispatch order and scaling."""

from __future__ import annotations

import random

import pytest
from test_bound import random_cluster, random_workload

from hta.sim.list_schedule import list_schedule_s
from hta.sim.oracle import oracle_runtime_s
from hta.sim.workload import SimTask, Workload, topological_order


def test_first_come_first_served_loses_to_the_critical_path_first_where_the_bound_is_reached():
    # two cores; the two short independent tasks come first in the workflow, the chain a → c after
    wl = Workload("fifo-trap", [SimTask("b1", "b", 10), SimTask("b2", "b", 10), SimTask("a", "a", 10),
                                SimTask("c", "c", 10, parents=["a"])])
    assert list_schedule_s(wl, 2, "fifo") == 30  # b1, b2; then a; then c
    assert list_schedule_s(wl, 2, "critical-path") == 20  # a, b1; then c, b2
    from hta.sim.cluster import ClusterModel

    assert oracle_runtime_s(wl, ClusterModel(max_nodes=1, start_nodes=1, node_cores=2)) == 20


def test_work_queues_order_runs_what_a_completion_released_before_the_older_waiting_tasks():
    # two cores; the chain a → c → d, and b1, b2 waiting from the start. Newest first (the
    # real master's order, tests/test_sim_rules.py, and the default): a, b1 (the file's
    # order); c, released at 10, before the older b2; d at 20; b2 when b1 ends at 15
    wl = Workload("order", [SimTask("a", "a", 10), SimTask("b1", "b", 15), SimTask("b2", "b", 15),
                            SimTask("c", "c", 10, parents=["a"]), SimTask("d", "d", 10, parents=["c"])])
    assert list_schedule_s(wl, 2) == list_schedule_s(wl, 2, "newest-first") == 30
    assert list_schedule_s(wl, 2, "fifo") == 35  # a, b1; b2 at 10; c at 15; d at 25


def test_tasks_ready_at_once_are_taken_in_the_files_order_as_the_master_takes_them():
    # two cores; a (20 s) and b (10 s) start at 0. When a ends at 20, wide (2 cores, also
    # after b) and short become ready together; wide comes first in the file, so the master
    # (makeflow submits them last in the file first, it dispatches the newest) starts it:
    # wide 20–40, then last (released at 40, the newest) and short beside it, done at 60.
    # Topological order would put short first (a's child before b's): wide then waits for
    # short, 30–50, and last ends at 70
    wl = Workload("file-order", [SimTask("wide", "w", 20, cores=2, parents=["a", "b"]), SimTask("a", "a", 20),
                                 SimTask("short", "s", 10, parents=["a"]),
                                 SimTask("last", "l", 20, parents=["a", "wide"]), SimTask("b", "b", 10)])
    assert list_schedule_s(wl, 2) == 60
    assert list_schedule_s(Workload("kahn", topological_order(wl)), 2) == 70


def test_a_task_that_does_not_fit_is_passed_over_not_waited_for():
    wl = Workload("pass", [SimTask("big", "x", 10, cores=2), SimTask("wide", "x", 10, cores=3),
                           SimTask("small", "x", 10, cores=1)])
    # 3 cores: big (2) starts, wide (3) does not fit and is passed over, small (1) starts beside big
    assert list_schedule_s(wl, 3, "fifo") == 20
    with pytest.raises(ValueError, match="more than the 2 cores"):
        list_schedule_s(wl, 2)


def test_the_cores_that_come_later_come_at_their_time():
    wl = Workload("later", [SimTask(f"t{i}", "x", 10) for i in range(4)])
    assert list_schedule_s(wl, 4) == 10
    assert list_schedule_s(wl, 4, start_cores=1, more_at_s=5) == 15  # one from 0 to 10; three from 5 to 15
    assert list_schedule_s(wl, 4, start_cores=0, more_at_s=5) == 15  # nothing runs before 5


def test_the_category_path_reads_each_task_as_its_categorys_mean_runtime():
    # two cores; category x has a 30 s task and a 10 s one (mean 20), each followed by a
    # 5 s task; category y's 25 s task comes first in the file. Knowing each task's own
    # runtime, the 30 s x1 goes first, beside y: x2 at 25, c1 at 30, c2 at 35, done at 40.
    # Knowing only the means, y (25) and both x (20 + 5) tie, so the file's order: y and
    # x2 first, x1 when x2 ends at 10, and its child ends at 45
    wl = Workload("means", [SimTask("y", "y", 25), SimTask("x2", "x", 10), SimTask("x1", "x", 30),
                            SimTask("c1", "c", 5, parents=["x1"]), SimTask("c2", "c", 5, parents=["x2"])])
    assert list_schedule_s(wl, 2, "critical-path") == 40
    assert list_schedule_s(wl, 2, "category-path") == 45


@pytest.mark.parametrize("seed", range(200))
def test_no_list_schedule_beats_the_bound_on_the_bounds_own_capacity(seed):
    from hta.sim.oracle import min_latency_s

    rng = random.Random(seed)
    wl, cluster = random_workload(rng), random_cluster(rng)
    cores = cluster.max_nodes * cluster.node_cores
    whole = cluster.model_copy(update={"start_nodes": cluster.max_nodes})
    later = {"start_cores": cluster.start_nodes * cluster.node_cores, "more_at_s": min_latency_s(cluster)}
    for c, kw in ((whole, {}), (cluster, later)):
        bound = oracle_runtime_s(wl, c)
        got = {o: list_schedule_s(wl, cores, o, c, **kw) for o in ("newest-first", "fifo", "critical-path",
                                                                   "category-path")}
        assert all(v >= bound - 1e-6 for v in got.values()), (got, bound, kw)
