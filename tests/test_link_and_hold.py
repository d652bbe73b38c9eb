"""The world HTA's forecast sees beyond cores: the master's link (its bandwidth by the
master's own counters, each category's input sizes), how long an empty node stays, and
which node each worker runs on."""

import json
from pathlib import Path

import pytest

from hta.estimator import EstimatorOptions, QueueDrainEstimator
from hta.estimator.link import link_limit
from hta.model import (
    CategoryModel,
    LatencyStats,
    LinkStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    WorkerInfo,
)
from hta.policies.hta_policy import HTAPolicy
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload
from workqueue_bridge.dag import Dag, Rule
from workqueue_bridge.status_json import parse_queue_status

SHAPE = Resources(cores=1, memory_mb=1000, disk_mb=1000)
DATA = Path(__file__).parent / "data"


def measured(name: str, runtime: float) -> CategoryModel:
    return CategoryModel(name=name, samples=5, peak=SHAPE, runtime_mean_s=runtime, runtime_median_s=runtime,
                         runtime_p90_s=runtime)


def busy(n: int) -> dict:
    """``n`` workers, each running one individuals task."""
    return dict(workers=[WorkerInfo(id=f"w{i}", capacity=SHAPE, in_use=SHAPE, running=1) for i in range(n)],
                running=[RunningTask(task_id=i, category="individuals", allocation=SHAPE, started_at=0.0,
                                     worker=f"w{i}") for i in range(n)])


def genome(**kw) -> Observation:
    """1000Genome's individuals: 1.7 GB of inputs a task, 76 s of work, a 450 MB/s link."""
    base = dict(time=0.0, worker_shape=SHAPE, max_workers=1000, latency=LatencyStats(samples=[150.0]),
                waiting=[TaskGroup(category="individuals", count=360, request=SHAPE)],
                task_inputs_mb={"individuals": 1750.0}, link=LinkStats(mb=9000.0, busy_s=20.0))
    base.update(kw)
    return Observation(**base)


def test_the_master_counters_give_the_link_its_bandwidth():
    q = parse_queue_status(json.loads((DATA / "queue_status_running.json").read_text()))
    assert q.bytes_sent == 433804 and q.time_send_s == pytest.approx(521e-6)
    # a few small files measure per-file latency, not the link: the prior stands until 32 MB
    assert LinkStats(mb=0.4, busy_s=0.0005, prior_mb_per_s=450).mb_per_s == 450
    assert LinkStats(mb=640, busy_s=2.0).mb_per_s == pytest.approx(320)


def test_a_category_s_own_inputs_are_what_its_rules_read_beyond_the_shared_ones():
    dag = Dag([Rule(0, "align", Resources(), [], inputs=["db", "q0"]),
               Rule(1, "align", Resources(), [], inputs=["db", "q1"]),
               Rule(2, "reduce", Resources(), [0, 1], inputs=["out"])])
    sizes = {"db": 500.0, "q0": 2.0, "q1": 4.0}.get
    assert dag.shared_input_sizes(sizes) == {"align": {"db": 500.0}}
    assert dag.task_input_sizes(sizes) == {"align": 3.0}  # ("out" does not exist yet: unknown, nothing)


def test_never_measured_tasks_get_no_more_workers_than_the_link_feeds_in_a_latency():
    lim = link_limit(genome(), genome().waiting, 150.0)
    # 450 MB/s × 150 s / 1750 MB: 38 first inputs within a latency of the workers' arrival
    assert lim is not None and lim.workers == 38
    assert "link-bound: 1.7 GB a worker's first inputs at 450 MB/s" in lim.reason
    # workers on their way are owed their own first inputs before a new one's
    def coming(n):
        return genome(pending=[PendingWorker(id=f"p{i}", requested_at=0.0, shape=SHAPE) for i in range(n)])
    # 60 on their way owe 233 s: of the 300 s after the arrival, 67 s are left for new ones
    assert link_limit(coming(60), genome().waiting, 150.0).workers == 17
    assert link_limit(coming(80), genome().waiting, 150.0).workers == 0


def test_measured_tasks_get_no_more_workers_than_the_link_keeps_busy():
    o = genome(categories={"individuals": measured("individuals", 76.0)}, **busy(15))
    lim = link_limit(o, o.waiting, 150.0)
    # each worker needs 1750 MB every 76 s: the link keeps ⌈76 × 450 / 1750⌉ + 1 = 21 busy
    assert lim.workers == 21 - 15
    assert "the link keeps 21 tasks busy, 15 running" in lim.reason
    # and HTA buys that many, not a worker per waiting task, and says why
    d = HTAPolicy(worker_shape="node").decide(o)
    assert d.add == 6 and "link-bound" in d.reason
    assert HTAPolicy(worker_shape="node", options=EstimatorOptions(link_aware=False)).decide(o).add > 100


def test_nothing_sent_sets_no_limit():
    o = genome(task_inputs_mb={})
    assert link_limit(o, o.waiting, 150.0) is None
    est = QueueDrainEstimator().estimate(o, 150.0)
    assert est.limit is None and est.workers_needed == 360


def link_world(hold_s: float = 0.0) -> ClusterModel:
    return ClusterModel(max_nodes=50, start_workers=0, transfer_mb_per_s=100.0, empty_node_ttl_s=hold_s,
                        latency_mean_s=30.0, latency_sd_s=0.0, pod_start_s=0.5)


def big_inputs(n: int = 40) -> Workload:
    return Workload("big-inputs", [SimTask(f"t{i}", "read", 20.0, inputs=((f"in{i}", 500.0),)) for i in range(n)])


def test_the_simulated_master_counts_its_link_as_a_real_one_and_hta_learns_it(caplog):
    sim = Simulation(big_inputs(), HTAPolicy(worker_shape="node"), link_world(), seed=1)
    with caplog.at_level("INFO", logger="hta.world"):
        s = sim.run()
    # said once, with -v
    assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "hta.world"
            and "link" in r.getMessage()] == ["the master's link: 100 MB/s"]
    assert s.exit_code == 0
    obs = sim.controller.last_observation
    assert obs.link.learned and obs.link.mb_per_s == pytest.approx(100.0)
    assert obs.task_inputs_mb == {"read": 500.0}
    # the resource monitor measures a task's command, not the wait for its inputs
    assert sim.controller.learner.models()["read"].runtime_mean_s == pytest.approx(20.0, abs=0.01)


def test_hta_buys_what_the_link_feeds_and_finishes_as_soon():
    runs = {}
    for aware in (True, False):
        policy = HTAPolicy(worker_shape="node", options=EstimatorOptions(link_aware=aware))
        runs[aware] = Simulation(big_inputs(), policy, link_world(), seed=1).run()
    # 5 s of link a task against 20 s of work: a handful of workers keeps the link busy
    assert runs[True].node_s < 0.6 * runs[False].node_s
    assert runs[True].runtime_s <= 1.05 * runs[False].runtime_s


def test_the_simulated_backend_tells_how_long_an_empty_node_stays():
    for hold in (0.0, 40.0):
        # the short branch's worker is drained at once, and its node empties while the long one runs
        sim = Simulation(Workload("two", [SimTask("a", "x", 5.0), SimTask("b", "y", 300.0)]),
                         HTAPolicy(worker_shape="node", hold_latencies=0), link_world(hold), seed=1)
        assert sim.run().exit_code == 0
        assert sim.backend.node_hold_s() == pytest.approx(hold)


def test_the_play_gives_work_to_an_idle_worker_beside_busy_ones_and_drains_the_one_alone():
    busy = WorkerInfo(id="b", capacity=SHAPE, in_use=SHAPE, running=1)
    beside, alone = (WorkerInfo(id=i, capacity=SHAPE, running=0) for i in ("z-beside", "a-alone"))
    o = Observation(time=0.0, worker_shape=SHAPE, max_workers=10, latency=LatencyStats(samples=[30.0]),
                    workers=[busy, beside, alone], waiting=[TaskGroup(category="x", count=1, request=SHAPE)],
                    categories={"x": measured("x", 5.0)}, worker_nodes={"b": "n1", "z-beside": "n1", "a-alone": "n2"})
    assert QueueDrainEstimator().estimate(o, 30.0).unused_idle == ["a-alone"]
    # without nodes, by name
    assert QueueDrainEstimator().estimate(o.model_copy(update={"worker_nodes": {}}), 30.0).unused_idle == ["z-beside"]


def test_the_link_limits_the_workers_of_tasks_that_wait_on_it_not_those_of_a_stage_beside_them(monkeypatch):
    # 15 workers run individuals; 40 frequency tasks (0.7 MB each) wait beside 360 individuals
    o = genome(categories={"individuals": measured("individuals", 76.0), "frequency": measured("frequency", 300.0)},
               **busy(15),
               waiting=[TaskGroup(category="frequency", count=40, request=SHAPE),
                        TaskGroup(category="individuals", count=360, request=SHAPE)],
               task_inputs_mb={"individuals": 1750.0, "frequency": 0.7})
    est = QueueDrainEstimator().estimate(o, 150.0)
    assert est.limit is not None and "link-bound" in est.limit
    # the link keeps 21 individuals busy (6 more workers); frequency's workers come on top
    assert est.workers_needed > 6 + 15
    # were frequency's tasks held to the link as well, only the 6 would be bought
    monkeypatch.setattr("hta.estimator.queue_drain.waits_on_link", lambda obs, g, latency_s: True)
    assert QueueDrainEstimator().estimate(o, 150.0).workers_needed < est.workers_needed - 10


def test_a_stage_only_the_link_limits_still_gets_a_worker():
    # tasks of 3 s that each read 2 GB: a new worker would wait longer for its inputs than it
    # works, but with none here or coming the stage would never run
    o = genome(categories={"individuals": measured("individuals", 3.0)}, task_inputs_mb={"individuals": 2048.0})
    assert link_limit(o, o.waiting, 150.0).workers >= 1
    assert HTAPolicy(worker_shape="node").decide(o).add >= 1


def test_a_worker_that_holds_several_tasks_counts_as_their_inputs():
    # 4-core workers, 1-core tasks that declare their core: each worker takes 4 tasks at once,
    # 4 × 1750 MB for its first round: within a round (76 s) the link sends that to 4 of
    # them (and keeps 21 tasks busy: 5 such workers), where 1-core workers get 19
    four = Resources(cores=4, memory_mb=4000, disk_mb=4000)
    o = genome(worker_shape=four, categories={"individuals": measured("individuals", 76.0)})
    lim = link_limit(o, o.waiting, 150.0)
    assert lim.workers == 4 and "6.8 GB a worker's first inputs" in lim.reason
    one = genome(categories={"individuals": measured("individuals", 76.0)})
    assert link_limit(one, one.waiting, 150.0).workers == 19
