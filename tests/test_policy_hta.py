"""HTA's policy and its estimator on small, hand-checked scenarios."""

from collections import Counter

import pytest

from hta.estimator import EstimatorOptions, QueueDrainEstimator
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
from hta.policies import make_policy
from hta.policies.hta_policy import HTAPolicy

SHAPE = Resources(cores=2, memory_mb=2000, disk_mb=2000)
ONE = Resources(cores=1, memory_mb=100, disk_mb=100)


def cat(name, runtime):
    return CategoryModel(name=name, samples=5, peak=ONE, runtime_mean_s=runtime, runtime_median_s=runtime,
                         runtime_p90_s=runtime)


def worker(wid, running=0, busy_cores=0):
    return WorkerInfo(id=wid, capacity=SHAPE, in_use=Resources(cores=busy_cores, memory_mb=100 * busy_cores,
                                                                disk_mb=100 * busy_cores), running=running)


def obs(**kw):
    base = dict(time=100.0, worker_shape=SHAPE, max_workers=10, latency=LatencyStats(samples=[10.0]))
    base.update(kw)
    return Observation(**base)


def test_buys_for_what_still_waits_after_one_latency():
    # 1 worker (2 cores) busy until t=105 with 2 tasks of 100 s; 10 more waiting.
    o = obs(
        workers=[worker("w1", 2, 2)],
        running=[RunningTask(task_id=i, category="a", allocation=ONE, started_at=5.0, worker="w1") for i in (1, 2)],
        waiting=[TaskGroup(category="a", count=10, request=ONE)],
        categories={"a": cat("a", 100.0)},
    )
    est = QueueDrainEstimator(EstimatorOptions(tail_aware=False)).estimate(o, 10.0)
    # at t=105 the two running tasks end and two waiting ones start: 8 still wait at t=110
    assert est.left_count == 8 and est.packed_need == 4
    d = HTAPolicy(options=EstimatorOptions(tail_aware=False), worker_shape="node").decide(o)
    assert d.add == 4 and not d.drain
    # asked again at the next idle check (5 s), before the cycle (10 s) ends
    assert d.next_decision_s == 5.0
    # tail-aware: w1's 2 cores took two of the waiting tasks at t=105 and hold them until
    # t=205, so they cannot drain the 8 left at the horizon; 4 new workers run them in one
    # round (each busy one task runtime: it earns its keep). With 3, two tasks would wait
    # for w1 and the queue would end at t=305 instead of 210.
    est = QueueDrainEstimator().estimate(o, 10.0)
    assert est.inflight_core_s == 2 * 95.0
    assert HTAPolicy(worker_shape="node").decide(o).add == 4  # (learned shapes: 8 pods of 1 core)
    assert (d := HTAPolicy().decide(o)).add == 8 and d.shape == SHAPE.split(2)
    assert "8 tasks still waiting at the horizon" in d.reason and "0 idle workers unneeded" in d.reason


def test_the_reason_says_one_task_and_one_idle_worker_in_the_singular():
    # read by people in the run's log (it said "1 tasks still waiting", "1 idle workers")
    o = obs(workers=[worker("w1", 2, 2), worker("w2")], categories={"a": cat("a", 100.0)},
            running=[RunningTask(task_id=i, category="a", allocation=ONE, started_at=95.0, worker="w1") for i in (1, 2)],
            waiting=[TaskGroup(category="a", count=3, request=ONE)])
    d = HTAPolicy(options=EstimatorOptions(tail_aware=False), worker_shape="node").decide(o)
    assert "1 task still waiting at the horizon" in d.reason, d.reason
    o = obs(workers=[worker("w1"), worker("w2")], categories={"a": cat("a", 100.0)})
    d = HTAPolicy(worker_shape="node").decide(o)
    assert "; 2 idle workers unneeded" in d.reason, d.reason
    o = obs(workers=[worker("w1")], categories={"a": cat("a", 100.0)})
    d = HTAPolicy(worker_shape="node").decide(o)
    assert "; 1 idle worker unneeded" in d.reason, d.reason


def test_pending_workers_count_as_coming_capacity():
    o = obs(
        waiting=[TaskGroup(category="a", count=4, request=ONE)],
        pending=[PendingWorker(id="p1", requested_at=95.0, shape=SHAPE),
                 PendingWorker(id="p2", requested_at=95.0, shape=SHAPE)],
        categories={"a": cat("a", 100.0)},
    )
    assert HTAPolicy().decide(o).add == 0  # both arrive at t=105 and take all four


def test_drains_only_idle_unneeded_workers_and_respects_min():
    o = obs(
        workers=[worker("busy", 1, 1), worker("idle1"), worker("idle2")],
        running=[RunningTask(task_id=1, category="a", allocation=ONE, started_at=95.0, worker="busy")],
        categories={"a": cat("a", 100.0)},
        min_workers=2,
    )
    d = HTAPolicy().decide(o)
    assert d.add == 0 and d.drain == ["idle1"]  # one may go: min_workers keeps two
    assert "busy" not in d.drain


def test_idle_worker_needed_for_waiting_work_is_kept():
    o = obs(workers=[worker("w1"), worker("w2")], waiting=[TaskGroup(category="a", count=3, request=ONE)],
            categories={"a": cat("a", 100.0)})
    d = HTAPolicy().decide(o)
    assert d.drain == [] and d.add == 0


def test_unmeasured_category_takes_whole_workers_up_to_max():
    o = obs(waiting=[TaskGroup(category="new", count=30)], max_workers=6)  # nothing declared, never measured
    d = HTAPolicy(worker_shape="node").decide(o)
    assert d.add == 6 and d.shape == SHAPE
    d = HTAPolicy().decide(o)  # probes: half a node each (2 cores split at most 3 ways: 2)
    assert d.add == 12 and d.shape == SHAPE.split(2)


def test_tail_awareness_skips_workers_that_would_arrive_too_late():
    # 20 busy 1-core slots: 15 free within the horizon (and take waiting tasks until
    # t=160-170), 5 free at t=111-115; 7 tasks of 60 s are left at the horizon.
    workers = [worker(f"w{i}", 2, 2) for i in range(10)]
    running = [RunningTask(task_id=i, category="a", allocation=ONE, started_at=100.0 - 45 - i, worker=f"w{i // 2}")
               for i in range(20)]
    o = obs(workers=workers, running=running, waiting=[TaskGroup(category="a", count=22, request=ONE)],
            categories={"a": cat("a", 60.0)}, latency=LatencyStats(samples=[10.0]), max_workers=20)
    plain = HTAPolicy(options=EstimatorOptions(tail_aware=False), worker_shape="node").decide(o)
    aware = HTAPolicy(worker_shape="node").decide(o)
    assert plain.add == 4  # the 7 packed into 2-core workers
    # the 5 cores freeing just after the horizon take 5 of the 7: only the last 2 would
    # wait (until t=160) — one new worker runs them, busy one task runtime; more would idle
    assert aware.add == 1


def _frees_just_after_the_horizon():
    return obs(
        workers=[worker(f"w{i}", 2, 2) for i in range(4)],
        running=[RunningTask(task_id=i, category="a", allocation=ONE, started_at=12.0, worker=f"w{i // 2}")
                 for i in range(8)],
        waiting=[TaskGroup(category="a", count=4, request=ONE)],
        categories={"a": cat("a", 100.0)},
    )


def test_tail_awareness_buys_nothing_when_the_cluster_frees_just_after_the_horizon():
    # 4 workers (8 cores) whose tasks end at t=112; 4 tasks wait. Bought workers would
    # arrive at t=110 and end the queue 2 s sooner, then idle: not worth a worker.
    o = _frees_just_after_the_horizon()
    est = QueueDrainEstimator().estimate(o, 10.0)
    assert est.packed_need == 2 and est.inflight_core_s == 8 * 2.0
    assert HTAPolicy().decide(o).add == 0


def test_a_task_running_far_past_the_horizon_counts_as_a_missing_core_not_as_backlog():
    # the case above, plus a 5th worker that started two 2,000 s tasks of another category
    # at t=99: its 2 cores are missing from the drain (W counts them one runtime each),
    # not 3,978 core·s of backlog that would buy workers to end the queue 2 s sooner
    base = _frees_just_after_the_horizon()
    o = base.model_copy(update={
        "workers": base.workers + [worker("w4", 2, 2)],
        "running": base.running + [RunningTask(task_id=100 + i, category="long", allocation=ONE, started_at=99.0,
                                               worker="w4") for i in range(2)],
        "categories": {**base.categories, "long": cat("long", 2000.0)},
    })
    est = QueueDrainEstimator().estimate(o, 10.0)
    assert est.inflight_core_s == 8 * 2.0 + 2 * 1989.0  # they end at t=2,099
    assert HTAPolicy().decide(o).add == 0


def test_the_queue_is_played_newest_first_as_the_master_dispatches():
    # one idle 2-core worker; the waiting groups in submission order (task ids): the master
    # dispatches the newest first (workqueue_bridge/dispatch.py), so b's two tasks take the
    # worker and a's two wait at the horizon
    o = obs(workers=[worker("w1")], waiting=[TaskGroup(category="a", count=2, request=ONE, id="g0"),
                                             TaskGroup(category="b", count=2, request=ONE, id="g1")],
            categories={"a": cat("a", 100.0), "b": cat("b", 100.0)})
    left = QueueDrainEstimator().estimate(o, 10.0).left_waiting
    assert [(g.category, g.count) for g in left] == [("a", 2)]


def _order_case(upcoming, ends=(110.0,)):
    """One worker, full: task 1 (category a, ends at 110: it releases ``upcoming``), a long
    task (far past the horizon) and, for each further time in ``ends``, a task of category x
    ending then, a core each; w waits since before the play. Horizon: to t = 130."""
    running = [RunningTask(task_id=1, category="a", allocation=ONE, started_at=90.0, worker="w1"),
               RunningTask(task_id=2, category="long", allocation=ONE, started_at=100.0, worker="w1")]
    running += [RunningTask(task_id=3 + i, category="x", allocation=ONE, started_at=end - 20.0, worker="w1")
                for i, end in enumerate(ends[1:])]
    busy = len(running)
    full = Resources(cores=busy, memory_mb=100 * busy, disk_mb=100 * busy)
    o = obs(workers=[WorkerInfo(id="w1", capacity=full, in_use=Resources(cores=busy, memory_mb=100 * busy,
                                                                          disk_mb=100 * busy), running=busy)],
            running=running, waiting=[TaskGroup(category="w", count=1, request=ONE, id="g0")],
            categories={c: cat(c, r) for c, r in (("a", 20.0), ("long", 1000.0), ("x", 20.0), ("w", 50.0),
                                                  ("b", 50.0), ("c", 50.0))},
            upcoming=upcoming)
    return sorted((g.category, g.count) for g in QueueDrainEstimator().estimate(o, 30.0).left_waiting)


def test_what_a_completion_releases_takes_its_core_before_older_waiting_tasks():
    # the master is given b when task 1 ends, and dispatches it first: the core task 1 frees
    # at 110 goes to b, not to w (waiting since before); the play filled the core before it
    # released b
    b = UpcomingTasks(id="u1", category="b", count=1, request=ONE, after=["task:1"])
    assert _order_case([b]) == [("w", 1)]


def test_groups_released_together_run_in_the_files_order_then_before_older_ones():
    # b and c (b first in the file) both wait for task 1: makeflow submits c, then b, so the
    # master runs b on the core freed at 110; at 120 another core frees: c, released at
    # 110, is newer than w and takes it
    up = [UpcomingTasks(id="u1", category="b", count=1, request=ONE, after=["task:1"]),
          UpcomingTasks(id="u2", category="c", count=1, request=ONE, after=["task:1"])]
    assert _order_case(up) == [("c", 1), ("w", 1)]
    assert _order_case(up, ends=(110.0, 120.0)) == [("w", 1)]
    # released together before any core is free (now: they wait for nothing), b and c both
    # wait; the core freed at 110 goes to b, the first in the file
    ready = [u.model_copy(update={"after": []}) for u in up]
    assert _order_case(ready) == [("c", 1), ("w", 1)]


def test_never_measured_tasks_do_not_lift_the_cap_on_measured_ones():
    # 40 measured tasks of 100 s and 1 never-measured one, on an idle 2-core worker: the
    # measured ones are capped as if alone (19: the 2 cores take two of them first, the
    # newest), the never-measured one gets its own worker, or one per u of them
    o = obs(workers=[worker("w1")], waiting=[TaskGroup(category="new", count=1),
                                              TaskGroup(category="a", count=40, request=ONE)],
            categories={"a": cat("a", 100.0)}, max_workers=50)
    alone = obs(workers=[worker("w1")], waiting=[TaskGroup(category="a", count=40, request=ONE)],
                categories={"a": cat("a", 100.0)}, max_workers=50)
    measured = QueueDrainEstimator().estimate(alone, 10.0).workers_needed
    for u in (1, 2, 4):
        est = QueueDrainEstimator(EstimatorOptions(unmeasured_per_worker=u)).estimate(o, 10.0)
        assert est.workers_needed == measured + 1
    assert QueueDrainEstimator(EstimatorOptions(busy_runtimes=2)).estimate(o, 10.0).workers_needed == \
        QueueDrainEstimator(EstimatorOptions(busy_runtimes=2)).estimate(alone, 10.0).workers_needed + 1


def test_hysteresis_drains_after_repeated_proposals():
    o = obs(workers=[worker("w1")])
    p = HTAPolicy(drain_after=2)
    assert p.decide(o).drain == []
    assert p.decide(o).drain == ["w1"]


def test_latency_statistic_is_robust_to_an_outlier():
    lat = LatencyStats(samples=[10, 11, 9, 10, 300])
    assert lat.estimate("median") == 10 and lat.estimate("last") == 300
    assert LatencyStats(prior_s=42).estimate() == 42


def test_an_outlier_task_is_expected_to_run_as_long_again():
    from hta.estimator import expected_remaining

    m = CategoryModel(name="a", samples=10, runtime_mean_s=100, runtime_median_s=100, runtime_p90_s=115)
    assert expected_remaining(40, m) == 60
    assert expected_remaining(110, m) == 10  # an ordinary straggler
    assert expected_remaining(220, m) == 10
    assert expected_remaining(700, m) == 700  # past 2 × p90: not "about to end" at every check


def test_idle_workers_drain_while_an_outlier_blocks_the_next_stage():
    # w1 runs a task 7x longer than its category's usual; the next stage waits for it
    o = obs(
        workers=[worker("w1", 1, 1), worker("w2"), worker("w3")],
        running=[RunningTask(task_id=1, category="a", allocation=ONE, started_at=100.0 - 70, worker="w1")],
        categories={"a": cat("a", 10.0)},
        upcoming=[UpcomingTasks(id="u0", category="a", count=6, request=ONE, after=["task:1"])],
    )
    # expected to end in 70 s (as long again), far past the 10 s horizon: drained...
    assert sorted(HTAPolicy(hold_latencies=0).decide(o).drain) == ["w2", "w3"]
    assert sorted(HTAPolicy(hold_latencies=5).decide(o).drain) == ["w2", "w3"]
    # ...unless held for work foreseen within that many latencies: its 6 dependents at
    # t=170 want them, and buying them back then would cost a latency (default: 30)
    assert HTAPolicy(hold_latencies=7).decide(o).drain == []
    assert HTAPolicy().decide(o).drain == make_policy("hta-time").decide(o).drain == []


def test_the_default_holds_no_worker_for_what_a_never_measured_task_releases():
    # as above, but the running task's category was never measured: that it ends at t=170
    # (as long again as it has run) is a guess, and so is all that follows it. u0 (one
    # task of a measured category) waits for it, u1 (6 more) for u0: neither holds a worker
    # by default, both do with hold_for_unmeasured (hta-time)
    o = obs(
        workers=[worker("w1", 1, 1), worker("w2"), worker("w3")],
        running=[RunningTask(task_id=1, category="split", allocation=ONE, started_at=100.0 - 70, worker="w1")],
        categories={"a": cat("a", 10.0)},
        upcoming=[UpcomingTasks(id="u0", category="a", count=1, request=SHAPE, after=["task:1"]),
                  UpcomingTasks(id="u1", category="a", count=6, request=ONE, after=["u0"])],
    )
    est = QueueDrainEstimator()
    assert est.unused_idle(o, 10.0, 310.0) == []  # the play gives w2 u0, w3 u1
    assert sorted(est.unused_idle(o, 10.0, 310.0, measured_only=True)) == ["w2", "w3"]
    assert sorted(HTAPolicy().decide(o).drain) == ["w2", "w3"]
    assert HTAPolicy(hold_for_unmeasured=True).decide(o).drain == make_policy("hta-time").decide(o).drain == []
    # hold_where_nodes_go holds them only where the backend saw an empty node go within a
    # latency (L = 10 s here): there buying them back pays a latency, not a pod start
    gone, stays = (o.model_copy(update={"node_hold_s": s}) for s in (0.0, 600.0))
    assert HTAPolicy(hold_where_nodes_go=True).decide(gone).drain == []
    assert sorted(HTAPolicy(hold_where_nodes_go=True).decide(stays).drain) == ["w2", "w3"]
    assert sorted(HTAPolicy().decide(gone).drain) == ["w2", "w3"]  # (off by default)
    # measured, the same task ends at t=170 too (past 2 × p90: as long again), not a guess
    measured = o.model_copy(update={"categories": {**o.categories, "split": cat("split", 10.0)}})
    assert HTAPolicy().decide(measured).drain == []


def test_a_worker_that_holds_the_inputs_of_the_work_behind_a_never_measured_task_is_held():
    # as above; every task of "a" reads the same 500 MB database, which w2 holds (it ran
    # one) and w3 does not. A new worker in w2's place would fetch it again: w2 is held, w3
    # drained, and a cache smaller than hold_cached_mb holds nothing
    base = dict(
        running=[RunningTask(task_id=1, category="split", allocation=ONE, started_at=100.0 - 70, worker="w1")],
        categories={"a": cat("a", 10.0)},
        upcoming=[UpcomingTasks(id="u0", category="a", count=1, request=SHAPE, after=["task:1"]),
                  UpcomingTasks(id="u1", category="a", count=6, request=ONE, after=["u0"])],
        shared_inputs={"a": {"db": 500.0}, "b": {"other": 900.0}},
    )
    w2 = worker("w2").model_copy(update={"cached_inputs": frozenset({"db"})})
    o = obs(workers=[worker("w1", 1, 1), w2, worker("w3")], **base)
    assert o.cached_for_work_mb(w2, {"a", "b"}) == 500.0 and o.cached_for_work_mb(w2, {"b"}) == 0.0
    assert HTAPolicy().decide(o).drain == ["w3"]
    assert sorted(HTAPolicy(hold_cached_mb=0).decide(o).drain) == ["w2", "w3"]
    assert sorted(HTAPolicy(hold_cached_mb=501).decide(o).drain) == ["w2", "w3"]
    # a cache of files the work it would be given does not read holds nothing
    w2b = worker("w2").model_copy(update={"cached_inputs": frozenset({"other"})})
    assert sorted(HTAPolicy().decide(obs(workers=[worker("w1", 1, 1), w2b, worker("w3")], **base)).drain) == [
        "w2", "w3"]
    # ... even where tasks that read it are upcoming, but past the long play: here the play
    # gives w2 and w3 the 6 "a" tasks (which read nothing), and "b", which reads the
    # database, comes only after a 5,000 s "slow" task
    later = {**base, "categories": {"a": cat("a", 10.0), "slow": cat("slow", 5000.0), "b": cat("b", 10.0)},
             "shared_inputs": {"b": {"db": 500.0}},
             "upcoming": [UpcomingTasks(id="u0", category="slow", count=1, request=SHAPE, after=["task:1"]),
                          UpcomingTasks(id="u1", category="a", count=6, request=ONE, after=["task:1"]),
                          UpcomingTasks(id="u2", category="b", count=6, request=ONE, after=["u0"])]}
    o = obs(workers=[worker("w1", 1, 1), w2, worker("w3")], **later)
    assert sorted(HTAPolicy().decide(o).drain) == ["w2", "w3"]


def test_a_worker_is_held_for_any_measured_work_the_long_play_gives_it_in_any_order():
    # w1 runs a never-measured task 1 and a measured outlier, task 2: both end at t=170 in
    # the play. u0 (after task 1) and u1 (after task 2) each want a whole worker: idle w2
    # runs one at 170, the other at 180. Whichever comes first, w2 has measured work: held
    from hta.estimator.play import DrainPlay

    def running(order):
        tasks = {1: RunningTask(task_id=1, category="split", allocation=ONE, started_at=30.0, worker="w1"),
                 2: RunningTask(task_id=2, category="a", allocation=ONE, started_at=30.0, worker="w1")}
        return [tasks[i] for i in order]

    for order in [(1, 2), (2, 1)]:
        o = obs(workers=[worker("w1", 2, 2), worker("w2")], running=running(order), categories={"a": cat("a", 10.0)},
                upcoming=[UpcomingTasks(id="u0", category="a", count=1, request=SHAPE, after=["task:1"]),
                          UpcomingTasks(id="u1", category="a", count=1, request=SHAPE, after=["task:2"])])
        assert QueueDrainEstimator().unused_idle(o, 10.0, 310.0, measured_only=True) == []
        short, full = (DrainPlay(o, 310.0, EstimatorOptions(), 10.0, until_idle_used=u, measured_only=True)
                       for u in (True, False))
        short.run()
        full.run()  # (the early stop waits for w2's measured task: the same answer)
        assert short.unused_idle() == full.unused_idle() == []
        assert HTAPolicy().decide(o).drain == [] and HTAPolicy(hold_latencies=0).decide(o).drain == ["w2"]
        # without u1, w2's only work comes after the never-measured task: drained
        alone = o.model_copy(update={"upcoming": o.upcoming[:1]})
        assert HTAPolicy().decide(alone).drain == ["w2"]


def test_work_after_a_never_measured_parent_or_batch_holds_no_worker():
    # a group waiting on two tasks, one never measured (ends at t=140 in the play) and one
    # measured (t=170, later): released after a never-measured task all the same
    o = obs(workers=[worker("w1", 2, 2), worker("w2")],
            running=[RunningTask(task_id=1, category="split", allocation=ONE, started_at=60.0, worker="w1"),
                     RunningTask(task_id=2, category="a", allocation=ONE, started_at=30.0, worker="w1")],
            categories={"a": cat("a", 10.0)},
            upcoming=[UpcomingTasks(id="u0", category="a", count=1, request=SHAPE, after=["task:1", "task:2"])])
    assert QueueDrainEstimator().unused_idle(o, 10.0, 310.0) == []
    assert QueueDrainEstimator().unused_idle(o, 10.0, 310.0, measured_only=True) == ["w2"]
    # measured task 2 ends at t=150 and releases n0, never measured (a whole worker, w2's),
    # and m0 waits for n0: its release is the play's guess of n0's end, so w3 is not held
    o = obs(workers=[worker("w1", 2, 2), worker("w2"), worker("w3")],
            running=[RunningTask(task_id=2, category="a", allocation=ONE, started_at=100.0, worker="w1"),
                     RunningTask(task_id=3, category="long", allocation=ONE, started_at=100.0, worker="w1")],
            categories={"a": cat("a", 50.0), "long": cat("long", 1000.0)},
            upcoming=[UpcomingTasks(id="n0", category="new", count=1, request=SHAPE, after=["task:2"]),
                      UpcomingTasks(id="m0", category="a", count=1, request=SHAPE, after=["n0"])])
    assert QueueDrainEstimator().unused_idle(o, 10.0, 310.0) == []
    assert QueueDrainEstimator().unused_idle(o, 10.0, 310.0, measured_only=True) == ["w3"]
    assert HTAPolicy().decide(o).drain == ["w3"]


def spread(name, mean, lo, hi):
    """A category whose runtimes spread evenly from ``lo`` to ``hi``."""
    return CategoryModel(name=name, samples=50, peak=ONE, runtime_mean_s=mean, runtime_median_s=mean,
                         runtime_p90_s=lo + 0.9 * (hi - lo), runtime_min_s=lo, runtime_max_s=hi)


def test_runtime_distribution_from_the_kept_statistics():
    from hta.estimator import runtime_cdf

    m = spread("a", 100, 80, 120)
    assert m.runtime_quantile(0) == 80 and m.runtime_quantile(0.5) == 100 and m.runtime_quantile(1) == 120
    cdf = runtime_cdf(m)
    for q in (0.1, 0.5, 0.75, 0.95):
        assert abs(cdf(m.runtime_quantile(q)) - q) < 1e-9
    assert cdf(79) == 0 and cdf(120) == 1
    assert cat("b", 10).runtime_quantile(0.99) == 10  # only the mean known: no spread assumed


def test_a_barrier_is_released_by_its_slowest_parent():
    from hta.estimator import barrier_wait, batch_last_runtime

    m = spread("a", 100, 80, 120)
    assert batch_last_runtime(m, 1) == 100  # one task: the mean
    # the median of the slowest of 30 started together: Q(0.5^(1/30)) ≈ 119.1 s, not the mean
    assert abs(batch_last_runtime(m, 30) - m.runtime_quantile(0.5 ** (1 / 30))) < 1e-9
    assert 118 < batch_last_runtime(m, 30) < 120
    assert abs(barrier_wait([(m, 0.0)] * 30) - batch_last_runtime(m, 30)) < 0.01
    # tasks that ran 50 s already: the slowest has ≈ 69 s to go; one past the longest ever
    # seen is a straggler (10 s), past 2 × p90 an outlier, expected to run as long again
    assert abs(barrier_wait([(m, 50.0)] * 30) - 69.1) < 0.1
    assert barrier_wait([(m, 130.0)]) == 10.0
    assert barrier_wait([(m, 250.6), (m, 250.1)]) == 250.6  # an outlier: as long again as the furthest-run


def soykb_genotype(samples: int = 5) -> CategoryModel:
    """SoyKB's genotype tasks: the 5 measured were the first to end, 93–106 s; the
    category's true mean is 491 s."""
    return CategoryModel(name="g", samples=samples, peak=ONE, runtime_mean_s=99, runtime_median_s=98,
                         runtime_p90_s=106, runtime_min_s=93, runtime_max_s=106)


def test_a_task_past_the_longest_measured_of_its_category_runs_as_long_again():
    from hta.estimator import expected_remaining

    m = soykb_genotype()
    assert expected_remaining(50, m, past_longest=True) == 49
    assert abs(expected_remaining(100, m, past_longest=True) - 9.9) < 1e-9  # within what was measured: a straggler
    assert expected_remaining(150, m, past_longest=True) == 150  # longer than any measured: nothing says it ends soon
    assert abs(expected_remaining(150, m) - 9.9) < 1e-9  # else only past 2 × p90 (212 s)
    assert expected_remaining(250, m) == 250


def test_a_category_is_outrun_when_as_many_run_well_past_its_longest_as_were_measured():
    from hta.estimator import OUTRUN_MARGIN, outrun_categories

    def o(samples, elapsed, longest=106.0):
        m = soykb_genotype(samples).model_copy(update={"runtime_max_s": longest})
        never = CategoryModel(name="new")
        running = [RunningTask(task_id=i, category="g", allocation=ONE, started_at=1000.0 - e, worker="w")
                   for i, e in enumerate(elapsed)]
        running.append(RunningTask(task_id=99, category="new", allocation=ONE, started_at=0.0, worker="w"))
        return obs(time=1000.0, running=running, categories={"g": m, "new": never})

    assert OUTRUN_MARGIN * 100 == 120
    assert outrun_categories(o(5, [121, 170, 200, 300, 400], longest=100)) == {"g"}  # 5 past 1.2 × the longest of 5
    assert outrun_categories(o(5, [120, 170, 200, 300, 400], longest=100)) == set()  # one only just at it: 4 of 5
    assert outrun_categories(o(5, [107, 120, 200, 300, 400, 500, 100])) == set()  # past the longest, 4 well past
    assert outrun_categories(o(180, [600, 700, 800])) == set()  # BLAST's last stragglers: 3 of 180
    # a stage started together, one measured at 300 s: its 39 peers at 302 s are about to end
    assert outrun_categories(o(1, [302.0] * 39, longest=300.0)) == set()
    assert outrun_categories(o(1, [361.0] * 39, longest=300.0)) == {"g"}  # a fifth as long again: they are not


def test_a_stage_just_past_its_first_completion_buys_nothing_for_it():
    # 40 tasks started together at t=0 fill 20 two-core workers; one of their category
    # ended at 300 s. At t = 302 s a task of a new category (a whole worker) waits. The 40
    # are that one's peers, ending within seconds: the waiting task takes the first
    # worker they free, and nothing is bought for it.
    m = CategoryModel(name="g", samples=1, peak=ONE, runtime_mean_s=300, runtime_median_s=300,
                      runtime_p90_s=300, runtime_min_s=300, runtime_max_s=300)
    running = [RunningTask(task_id=i, category="g", allocation=ONE, started_at=0.0, worker=f"w{i // 2}")
               for i in range(40)]
    o = obs(time=302.0, workers=[worker(f"w{i}", 2, 2) for i in range(20)], running=running,
            categories={"g": m}, waiting=[TaskGroup(category="n", count=1)], max_workers=30,
            latency=LatencyStats(samples=[100.0]))
    assert HTAPolicy().decide(o).add == 0
    # at t = 361 s they have run a fifth as long again as the one measured: it was a short one
    assert HTAPolicy().decide(o.model_copy(update={"time": 361.0})).add == 1


def test_a_whole_worker_task_behind_tasks_past_their_longest_gets_a_worker():
    # SoyKB, seed 0, t = 1,965 s: the workflow's one merge task (never measured: a whole
    # worker) waits; every core is held by genotype tasks that ran past the 5 measured.
    # Expected to end within 10 s at every decision, they kept it waiting 436 s for a
    # worker that never freed; well past the longest measured they count as long again.
    g = soykb_genotype()
    workers = [worker(f"w{i}", 2, 2) for i in range(4)]
    running = [RunningTask(task_id=i, category="g", allocation=ONE, started_at=2000.0 - 110 - 25 * i,
                           worker=f"w{i // 2}") for i in range(8)]
    o = obs(time=2000.0, workers=workers, running=running, categories={"g": g},
            waiting=[TaskGroup(category="merge", count=1)], latency=LatencyStats(samples=[100.0]))
    assert HTAPolicy().decide(o).add == 1
    # measured 50 times, the longest is the category's: the same tasks are stragglers about to end
    many = o.model_copy(update={"categories": {"g": g.model_copy(update={"samples": 50})}})
    assert HTAPolicy().decide(many).add == 0


def test_a_whole_worker_task_released_soon_goes_to_an_idle_worker_not_one_whose_forecast_is_a_guess():
    # SoyKB, seed 0, t = 1,950 s: the one merge task (never measured: a whole worker) is
    # released when task 1 ends, 40 s ahead. Worker b runs task 1 and task 2, which has run
    # well past the longest task of its category measured so far (130 s against 100); it
    # is forecast to end within 10 s, so b is whole at the release in the play. Trusting
    # that, the play left the idle worker unused and it was drained; the category's tasks
    # ran on (its first measurements were its shortest), and the merge waited 266 s for a
    # worker bought back. The idle worker's room is known: the merge goes to it, kept.
    g = cat("g", 100.0).model_copy(update={"runtime_max_s": 100.0})
    merge = UpcomingTasks(id="merge", category="merge", count=1, after=["task:1"])

    def at(elapsed_2: float, placed: dict[int, str]) -> Observation:
        """Tasks 1 (the merge's parent, 60 s in), 2 (``elapsed_2`` in) and any others (60 s
        in) on the workers ``placed`` names; a worker's cores in use are its tasks'."""
        running = [RunningTask(task_id=i, category="g", allocation=ONE, worker=w,
                               started_at=1950.0 - (elapsed_2 if i == 2 else 60.0)) for i, w in placed.items()]
        workers = [worker(w, n, n) for w, n in sorted(Counter(placed.values()).items())] + [worker("idle")]
        return obs(time=1950.0, workers=workers, running=running, categories={"g": g},
                   latency=LatencyStats(samples=[100.0]), upcoming=[merge])

    def unused(o: Observation, **options) -> list[str]:
        return QueueDrainEstimator(EstimatorOptions(**options)).estimate(o, 100.0).unused_idle

    o = at(130.0, {1: "b", 2: "b"})
    est = QueueDrainEstimator().estimate(o, 100.0)
    assert est.releases == [(1990.0, 1)] and est.unused_idle == []
    assert HTAPolicy(hold_latencies=0).decide(o).drain == []
    # task 2 at 110 s (past the longest, 100 s, but within OUTRUN_MARGIN: a straggler of a
    # category about to end) or at 90 s: b's forecast is trusted, b takes the merge, and the
    # idle worker is drained (with no busy worker trusted, Cycles uncapped paid +7 % node·s)
    assert unused(at(110.0, {1: "b", 2: "b"})) == ["idle"]
    trusted = at(90.0, {1: "b", 2: "b"})
    assert unused(trusted) == ["idle"] and HTAPolicy(hold_latencies=0).decide(trusted).drain == ["idle"]
    # the category's forecasts are all in doubt, not only the task's own: with task 2 on c,
    # task 3 (60 s in) beside the parent on b keeps b unsure...
    assert unused(at(130.0, {1: "b", 3: "b", 2: "c"})) == []
    # ...but the parent itself ends with the release: b alone with it is whole then
    assert unused(at(130.0, {1: "b", 2: "c"})) == ["idle"]
    # past the first latency a release is offered in the usual order (busy workers first):
    # the long play of the hold does not keep every idle worker for every whole-worker task
    later = o.model_copy(update={"time": 1950.0 - 150, "latency": LatencyStats(samples=[20.0]),
                                 "running": [r.model_copy(update={"started_at": r.started_at - 150})
                                             for r in o.running]})
    assert QueueDrainEstimator().unused_idle(later, 20.0, 200.0) == ["idle"]
    # a task that requests cores is offered in the usual order: b, forecast free, takes it
    small = o.model_copy(update={"upcoming": [merge.model_copy(update={"request": ONE})]})
    assert unused(small) == ["idle"]


def test_a_reduce_waits_for_a_parent_that_outran_its_category():
    # 3 tasks of an outrun category run (2 measured, 106 s at the longest; 2 have run
    # 170 and 200 s); 8 tasks wait for task 0 (170 s) and task 1 (150 s). Task 0 counts
    # as running 170 s more: the 8 are released after the 100 s horizon, and the idle
    # worker is not kept for them.
    g = soykb_genotype(samples=2)
    running = [RunningTask(task_id=i, category="g", allocation=ONE, started_at=1000.0 - e, worker=w)
               for i, (e, w) in enumerate([(170.0, "w0"), (150.0, "w0"), (200.0, "w1")])]
    o = obs(time=1000.0, workers=[worker("w0", 2, 2), worker("w1", 1, 1), worker("idle")], running=running,
            categories={"g": g}, latency=LatencyStats(samples=[100.0]), max_workers=4,
            upcoming=[UpcomingTasks(id="u0", category="g", count=8, request=ONE, after=["task:0", "task:1"])])
    aware = QueueDrainEstimator().estimate(o, 100.0)
    assert aware.releases == [] and aware.unused_idle == ["idle"]


def test_barrier_awareness_drains_a_worker_the_mean_would_keep():
    # 15 busy workers run 30 tasks that started now (80–120 s, mean 100); 40 tasks wait for
    # all 30. The mean says they are released at t=200, inside the 110 s horizon, and need
    # the idle worker; the slowest of 30 ends near t=219, outside it: drain.
    busy = [worker(f"b{i}", 2, 2) for i in range(15)]
    running = [RunningTask(task_id=i, category="a", allocation=ONE, started_at=100.0, worker=f"b{i // 2}")
               for i in range(30)]
    o = obs(workers=busy + [worker("idle")], running=running, latency=LatencyStats(samples=[110.0]),
            categories={"a": spread("a", 100, 80, 120)}, max_workers=16,
            upcoming=[UpcomingTasks(id="u0", category="a", count=40, request=ONE,
                                    after=[f"task:{i}" for i in range(30)])])
    mean_only = QueueDrainEstimator(EstimatorOptions(barrier_aware=False)).estimate(o, 110.0)
    assert mean_only.releases == [(200.0, 40)] and mean_only.unused_idle == []
    aware = QueueDrainEstimator().estimate(o, 110.0)
    assert aware.releases == [] and aware.unused_idle == ["idle"]
    assert HTAPolicy(options=EstimatorOptions(barrier_aware=False), hold_latencies=0).decide(o).drain == []
    assert HTAPolicy(hold_latencies=0).decide(o).drain == ["idle"]
    assert HTAPolicy().decide(o).drain == []  # (held: the 40 come within 30 latencies)


def test_busy_runtimes_buys_only_workers_the_backlog_keeps_busy_that_long():
    # 1 idle 2-core worker takes 2 of 40 tasks of 100 s and runs them 90 s past the horizon:
    # 38 left, W = 3,800 + 180 core·s. n ≤ (W/(k·100) − 2)/2, rounded up:
    # k = 1: 18.9 → 19 (the packed need: one round); k = 2: 8.95 → 9; k = 4: 3.98 → 4
    o = obs(workers=[worker("w1")], waiting=[TaskGroup(category="a", count=40, request=ONE)],
            categories={"a": cat("a", 100.0)}, max_workers=50)
    for k, workers in [(1, 19), (2, 9), (4, 4)]:
        assert QueueDrainEstimator(EstimatorOptions(busy_runtimes=k)).estimate(o, 10.0).workers_needed == workers


def test_busy_latencies_bounds_the_busy_time_asked_of_long_tasks():
    # the same 40 tasks of 100 s at a latency of 10 s: k = 4 asks 400 s of busy time for
    # each worker bought; busy_latencies = 20 asks no more than 200 s (as k = 2 does), and
    # a bound above 400 s, or none (0), leaves k = 4's 4 workers
    o = obs(workers=[worker("w1")], waiting=[TaskGroup(category="a", count=40, request=ONE)],
            categories={"a": cat("a", 100.0)}, max_workers=50)
    for latencies, workers in [(20, 9), (100, 4), (0, 4)]:
        options = EstimatorOptions(busy_runtimes=4, busy_latencies=latencies)
        assert QueueDrainEstimator(options).estimate(o, 10.0).workers_needed == workers
    # it only lowers what is asked: where k·r < b·L, k runtimes stay (k = 1 here: 19)
    assert QueueDrainEstimator(EstimatorOptions(busy_latencies=100)).estimate(o, 10.0).workers_needed == 19
    # a core busy past the horizon counts as missing for the busy time asked (150 s here,
    # not k·r = 400 s): a task of a 1,000 s category with 990 s to go and one of 90 s
    # leave W = 3,900 + 150 + 90 (39 waiting after one free core takes one); (27.6 − 2)/2 → 13
    busy = obs(workers=[worker("w1", running=1, busy_cores=1)], waiting=[TaskGroup(category="a", count=40, request=ONE)],
               running=[RunningTask(task_id=1, category="long", allocation=ONE, started_at=100.0, worker="w1")],
               categories={"a": cat("a", 100.0), "long": cat("long", 1000.0)}, max_workers=50)
    capped = QueueDrainEstimator(EstimatorOptions(busy_runtimes=4, busy_latencies=15)).estimate(busy, 10.0)
    assert capped.workers_needed == 13
    # never less than one runtime: at L = 50 s, b = 1 would ask 50 s and buy the packed 15;
    # it asks 100 s, as the default does (5 idle workers start 10 tasks, 30 wait: 13)
    five = obs(workers=[worker(f"w{i}") for i in range(5)], waiting=[TaskGroup(category="a", count=40, request=ONE)],
               categories={"a": cat("a", 100.0)}, max_workers=50)
    assert QueueDrainEstimator(EstimatorOptions(busy_runtimes=4, busy_latencies=1)).estimate(five, 50.0).workers_needed \
        == QueueDrainEstimator().estimate(five, 50.0).workers_needed == 13
    # no latency known (0): no bound, k runtimes as without it
    assert QueueDrainEstimator(EstimatorOptions(busy_runtimes=4, busy_latencies=2)).estimate(five, 0.0).workers_needed \
        == QueueDrainEstimator(EstimatorOptions(busy_runtimes=4)).estimate(five, 0.0).workers_needed


def test_busy_latencies_can_count_rounds_in_the_long_tasks_a_stage_has_not_measured_yet():
    # 40 one-core tasks measured at a mean of 100 s, their 90th percentile 300 s (a stage's
    # first, short completions), on 2-core workers, b = 2, k = 4. At L = 100 s, 2L asks 2
    # rounds of the mean (200 s busy: W = 3,600 left + 2 cores × 100 s running, (3,800/200
    # − 2)/2 → 9 workers) but one round of the long tasks (100 s: (38 − 2)/2 → 18, as many
    # as the leftovers fill)
    wide = CategoryModel(name="a", samples=5, peak=ONE, runtime_mean_s=100.0, runtime_median_s=80.0,
                         runtime_p90_s=300.0)
    o = obs(workers=[worker("w1")], waiting=[TaskGroup(category="a", count=40, request=ONE)],
            categories={"a": wide}, max_workers=50)
    mean = EstimatorOptions(busy_runtimes=4, busy_latencies=2)
    p90 = EstimatorOptions(busy_runtimes=4, busy_latencies=2, busy_latencies_runtime="p90")
    assert QueueDrainEstimator(mean).estimate(o, 100.0).workers_needed == 9
    assert QueueDrainEstimator(p90).estimate(o, 100.0).workers_needed == 18
    # at L = 400 s: 8 rounds of the mean, capped at k = 4 (400 s: W = 3,000 left + 2 × 100
    # running, (3,200/400 − 2)/2 → 3);
    # 2.67 of the long ones (267 s of the mean: (12 − 2)/2 → 5)
    assert QueueDrainEstimator(mean).estimate(o, 400.0).workers_needed == 3
    assert QueueDrainEstimator(p90).estimate(o, 400.0).workers_needed == 5
    # a category whose 90th percentile is its mean, or under it (one long outlier past
    # it): the two agree, rounds never counted in less than the mean
    narrow = o.model_copy(update={"categories": {"a": cat("a", 100.0)}})
    skewed = o.model_copy(update={"categories": {"a": wide.model_copy(update={"runtime_p90_s": 50.0})}})
    for c in (narrow, skewed):
        assert (QueueDrainEstimator(mean).estimate(c, 100.0).workers_needed
                == QueueDrainEstimator(p90).estimate(c, 100.0).workers_needed == 9)
    # the preset counts in the long tasks; anything but mean or p90 is refused in one line
    assert make_policy("hta-cost").options.busy_latencies_runtime == "p90"
    with pytest.raises(ValueError, match="busy_latencies_runtime must be mean or p90, not 'max'"):
        make_policy("hta-cost:busy_latencies_runtime=max")


def test_busy_runtimes_caps_never_measured_tasks_one_worker_per_k():
    # 30 tasks of a category never measured: each takes a whole worker (30 wanted); with
    # k = 10 a worker is bought for every 10 of them, with k = 1 there is no cap
    o = obs(waiting=[TaskGroup(category="new", count=30)], max_workers=50)
    assert QueueDrainEstimator().estimate(o, 10.0).workers_needed == 30
    assert QueueDrainEstimator(EstimatorOptions(busy_runtimes=10)).estimate(o, 10.0).workers_needed == 3
    # unmeasured_per_worker sets that many on its own; the larger of the two applies
    assert QueueDrainEstimator(EstimatorOptions(unmeasured_per_worker=2)).estimate(o, 10.0).workers_needed == 15
    both = EstimatorOptions(busy_runtimes=10, unmeasured_per_worker=2)
    assert QueueDrainEstimator(both).estimate(o, 10.0).workers_needed == 3
    # measured tasks are not touched by it: 40 tasks of 100 s, one busy runtime each
    m = obs(waiting=[TaskGroup(category="a", count=40, request=ONE)], categories={"a": cat("a", 100.0)},
            max_workers=50)
    assert (QueueDrainEstimator(EstimatorOptions(unmeasured_per_worker=4)).estimate(m, 10.0).workers_needed
            == QueueDrainEstimator().estimate(m, 10.0).workers_needed == 20)
    # nor when never-measured ones wait beside them: see test_never_measured_tasks_do_not_lift_the_cap_on_measured_ones


def test_workers_on_their_way_to_never_measured_tasks_are_counted_for_u_of_them():
    # 30 never-measured tasks, u = 5: 6 workers bought. A decision later, with those 6 on
    # their way, each is to run 5 of the 30: nothing more is bought, where counting each
    # for one task bought 24 / 5 → 5 more at every such decision
    u5 = QueueDrainEstimator(EstimatorOptions(busy_runtimes=5))
    first = obs(waiting=[TaskGroup(category="new", count=30)], max_workers=50)
    assert u5.estimate(first, 10.0).workers_needed == 6
    on_their_way = obs(waiting=[TaskGroup(category="new", count=30)], max_workers=50,
                       pending=[PendingWorker(id=f"p{i}", shape=SHAPE, requested_at=95.0) for i in range(6)])
    assert u5.estimate(on_their_way, 10.0).workers_needed == 0
    # 20 more released: a worker for each 5 of them, the 6 counted for the first 30
    more = on_their_way.model_copy(update={"waiting": [TaskGroup(category="new", count=50)]})
    assert u5.estimate(more, 10.0).workers_needed == 4
    # an idle worker the play gives one is counted for 5 too
    idle = obs(waiting=[TaskGroup(category="new", count=30)], max_workers=50, workers=[worker("w0")])
    assert u5.estimate(idle, 10.0).workers_needed == 5
    # workers running one now are not: the 24 still waiting buy a worker per 5 (a ramp)
    running = obs(waiting=[TaskGroup(category="new", count=24)], max_workers=50,
                  workers=[worker(f"w{i}", 1, 2) for i in range(6)],
                  running=[RunningTask(task_id=i, category="new", allocation=SHAPE, started_at=95.0, worker=f"w{i}")
                           for i in range(6)])
    assert u5.estimate(running, 10.0).workers_needed == 5
    # u = 1 (the default): one each, as before
    assert QueueDrainEstimator().estimate(on_their_way, 10.0).workers_needed == 24
    # declared 1-core tasks, two a 2-core worker: 60 want 30 workers' worth, 6 bought; the 6
    # on their way start 12 and are counted for 4 more rounds of 2 each: 0 more
    declared = obs(waiting=[TaskGroup(category="new", count=60, request=ONE)], max_workers=50)
    assert u5.estimate(declared, 10.0).workers_needed == 6
    declared_on_their_way = declared.model_copy(update={"pending": on_their_way.pending})
    assert u5.estimate(declared_on_their_way, 10.0).workers_needed == 0
    # a round is a worker's worth of the group it comes off: one worker on its way starts two
    # 1-core tasks, and its 4 rounds after them take 4 of the category's whole-worker tasks
    # behind (not 8): 6 left, 2 workers
    mixed = obs(max_workers=50, waiting=[TaskGroup(category="new", count=2, request=ONE),
                                         TaskGroup(category="new", count=10)],
                pending=on_their_way.pending[:1])
    assert u5.estimate(mixed, 10.0).workers_needed == 2


def test_presets_and_estimator_settings_by_name():
    import pytest

    from hta.policies import make_policy

    assert make_policy("hta-time").options.tail_aware is False
    cost = make_policy("hta-cost")
    assert cost.name == "hta-cost" and cost.options.busy_runtimes == 4
    assert (cost.worker_shape, cost.probe_split) == ("learned", 3)  # a preset sets the policy's own fields too
    assert cost.hold_latencies == 0 < make_policy("hta").hold_latencies == make_policy("hta-time").hold_latencies
    assert make_policy("hta-time").hold_for_unmeasured and not make_policy("hta").hold_for_unmeasured
    tuned_cost = make_policy("hta-cost:busy_runtimes=7,probe_split=1")  # ... and its spec overrides them
    assert tuned_cost.options.busy_runtimes == 7 and tuned_cost.worker_shape == "learned" and tuned_cost.probe_split == 1
    assert make_policy("hta-cost").options.busy_runtimes == 4  # (a preset is not changed by a spec built on it)
    assert make_policy("hta-cost").options.busy_latencies == 2 and make_policy("hta").options.busy_latencies == 0
    tuned = make_policy("hta:busy_runtimes=3,check_s=2")
    assert tuned.estimator.options.busy_runtimes == 3 and tuned.check_s == 2
    for bad, says in [("hta-fast", "presets are hta-time, hta-cost"), ("hta:busy_runtimes=0", "must be a number > 0"),
                      ("hta:busy_runtimes=inf", "must be a number > 0"),
                      ("hta-cost:tail_aware=maybe", "is not a bool"),
                      ("hta:unmeasured_per_worker=0.5", "must be a number ≥ 1"),
                      ("hta:busy_latencies=-1", "busy_latencies must be a number ≥ 0"),
                      ("hta:busy_latencies=nan", "busy_latencies must be a number ≥ 0"),
                      ("hta:hold_latencies=-1", "must be a number ≥ 0"), ("hta:hold_latencies=nan", "must be a number ≥ 0"),
                      ("hta:hold_for_unmeasured=maybe", "is not a bool"),
                      ("hta:hold_cached_mb=-1", "hold_cached_mb must be a number ≥ 0"),
                      ("hta:first_finish_latencies=-1", "first_finish_latencies must be a number ≥ 0"),
                      ("hta:hold_latencies_where_nodes_go=nan", "hold_latencies_where_nodes_go must be"),
                      ("hta:nope=1", "it has: barrier_aware, budget_node_s, busy_latencies, "
                                     "busy_latencies_runtime, busy_runtimes")]:
        with pytest.raises(ValueError, match=says):
            make_policy(bad)


def test_a_just_started_task_of_an_unmeasured_category_is_expected_to_run_as_long_as_its_siblings():
    # task 1 of the never-measured category "split" has run 350 s, task 2 has just started;
    # 9 tasks wait for task 2. Two idle workers: are they kept for those 9?
    split = [RunningTask(task_id=1, category="split", allocation=SHAPE, started_at=-250.0, worker="w1"),
             RunningTask(task_id=2, category="split", allocation=SHAPE, started_at=100.0, worker="w2")]
    o = obs(workers=[worker("w1", 1, 2), worker("w2", 1, 2), worker("w3"), worker("w4")], running=split,
            upcoming=[UpcomingTasks(id="u0", category="f", count=9, request=ONE, after=["task:2"])],
            latency=LatencyStats(samples=[160.0]))
    # none of its kind has ended before 350 s: task 2 will not end within the 160 s horizon,
    # so the idle workers are not needed for its dependents
    now = QueueDrainEstimator().estimate(o, 160.0)
    assert sorted(now.unused_idle) == ["w3", "w4"] and now.releases == []
    assert sorted(HTAPolicy().decide(o).drain) == ["w3", "w4"]


def test_tail_awareness_counts_a_worker_as_the_tasks_that_fit_in_it():
    # 3-core workers and 10 waiting tasks of 2 cores, 300 s each, nothing running: a worker
    # holds one at a time, so the 10 need 10 workers, each busy a whole runtime; counted by
    # cores (6,000 core·s over 3-core workers) the cap bought 7, and 3 tasks waited a round
    three = Resources(cores=3, memory_mb=15000, disk_mb=100000)
    two = Resources(cores=2, memory_mb=1024, disk_mb=100)
    m = CategoryModel(name="align", samples=5, peak=two, runtime_mean_s=300.0, runtime_median_s=300.0,
                      runtime_p90_s=300.0)
    o = obs(worker_shape=three, waiting=[TaskGroup(category="align", count=10, request=two)],
            categories={"align": m}, max_workers=50)
    est = QueueDrainEstimator().estimate(o, 10.0)
    assert (est.packed_need, est.workers_needed) == (10, 10)
    # 1-core tasks fill the worker: the cap as before (30 tasks, 3 to a worker)
    one = Resources(cores=1, memory_mb=1024, disk_mb=100)
    o1 = o.model_copy(update={"waiting": [TaskGroup(category="align", count=30, request=one)],
                              "categories": {"align": m.model_copy(update={"peak": one})}})
    assert QueueDrainEstimator().estimate(o1, 10.0).workers_needed == 10


def test_workers_a_stage_will_want_are_held_through_a_straggler_not_bought_back():
    # Montage's shape: 20 tasks of 100 s, one of them a 1,500 s straggler; 20 more wait for
    # all of them. Drained while the straggler runs, the workers are bought back when it
    # ends and the second stage waits a latency; held (as the default does), it starts at once.
    from hta.sim.cluster import ClusterModel
    from hta.sim.run import Simulation
    from hta.sim.workload import SimTask, Workload

    first = [SimTask(f"a{i}", "a", 1500.0 if i == 0 else 100.0) for i in range(20)]
    tasks = first + [SimTask(f"b{i}", "b", 100.0, parents=[t.id for t in first]) for i in range(20)]
    cluster = ClusterModel(max_nodes=20, latency_mean_s=100.0, latency_sd_s=0.0, teardown_s=0.0)
    held = Simulation(Workload("w", tasks), HTAPolicy(), cluster).run()
    drained = Simulation(Workload("w", tasks), HTAPolicy(hold_latencies=0), cluster).run()
    assert held.exit_code == drained.exit_code == 0
    assert held.runtime_s <= drained.runtime_s - 90.0  # the latency not paid again
    assert held.node_s > drained.node_s  # for the idle seconds of the workers held


def test_a_play_past_the_horizon_still_has_pending_workers_come_one_latency_after_asked():
    # idle "w" (1 core) can run none of what waits: a 2-core task only the pending 2-core
    # worker fits, asked for at t=100, there at t=110 (L = 10 s). It runs 10 s; at t=120 its
    # dependent (1 core) is released and w takes it. A play 3 latencies past the horizon
    # (to t=140) keeps w for it; one that took its 40 s horizon for the latency would have
    # the worker come at t=140, the release after the play, and w drained.
    two = Resources(cores=2, memory_mb=100, disk_mb=100)
    small = Resources(cores=1, memory_mb=2000, disk_mb=2000)
    o = obs(workers=[WorkerInfo(id="w", capacity=small)], categories={"a": cat("a", 10.0)},
            waiting=[TaskGroup(id="t", category="a", count=1, request=two)],
            pending=[PendingWorker(id="p", requested_at=100.0, shape=SHAPE)],
            upcoming=[UpcomingTasks(id="u0", category="a", count=1, request=ONE, after=["t"])])
    est = QueueDrainEstimator()
    assert est.estimate(o, 10.0).unused_idle == ["w"]  # within one latency: nothing for w
    assert est.unused_idle(o, 10.0, 40.0) == []
    assert est.unused_idle(o, 40.0, 40.0) == ["w"]
    assert HTAPolicy(hold_latencies=3).decide(o).drain == [] and HTAPolicy(hold_latencies=0).decide(o).drain == ["w"]
    # that play stops once every idle worker has work (w at t=120), with the same answer
    from hta.estimator.play import DrainPlay

    short, full = (DrainPlay(o, 40.0, EstimatorOptions(), 10.0, until_idle_used=u) for u in (True, False))
    short.run()
    full.run()
    assert short.unused_idle() == full.unused_idle() == [] and len(short._events) > len(full._events)


def test_plays_of_one_observation_share_its_barrier_times(monkeypatch):
    """A decision plays one observation several times (a shape, then the drain's hold);
    barrier times depend only on what those plays share, so they are computed once per
    observation, and again for the next one."""
    import hta.estimator.releases as releases

    calls = []
    real = releases.barrier_wait
    monkeypatch.setattr(releases, "barrier_wait", lambda tasks: calls.append(len(tasks)) or real(tasks))
    m = spread("a", 100, 80, 120)

    def at(time):
        return obs(time=time, workers=[worker("w1", 2, 2), worker("w2")],
                   running=[RunningTask(task_id=i, category="a", allocation=ONE, started_at=50.0, worker="w1")
                            for i in (1, 2)],
                   upcoming=[UpcomingTasks(id="r", category="a", count=3, request=ONE, after=["task:1", "task:2"])],
                   categories={"a": m})

    est, first = QueueDrainEstimator(), at(100.0)
    a = est.estimate(first, 100.0)
    b = est.estimate(first.model_copy(update={"worker_shape": ONE}), 100.0)
    est.unused_idle(first, 10.0, 300.0)
    assert calls == [2]
    # the same answers as an estimator that computes them afresh
    fresh = QueueDrainEstimator()
    assert fresh.estimate(first.model_copy(update={"worker_shape": ONE}), 100.0) == b
    assert fresh.unused_idle(first, 10.0, 300.0) == est.unused_idle(first, 10.0, 300.0)
    assert a.releases and a.releases == QueueDrainEstimator().estimate(first, 100.0).releases
    # the same observation but for its running tasks (a third parent started at 60 s)
    calls.clear()
    third = RunningTask(task_id=3, category="a", allocation=ONE, started_at=60.0, worker="w2")
    up = UpcomingTasks(id="r", category="a", count=3, request=ONE, after=["task:1", "task:2", "task:3"])
    later = first.model_copy(update={"running": [*first.running, third], "upcoming": [up]})
    assert later.categories is first.categories and later.time == first.time
    est.estimate(later, 100.0)
    assert calls == [3]
    assert est.estimate(later, 100.0) == QueueDrainEstimator().estimate(later, 100.0) != a
    calls.clear()
    est.estimate(at(100.0), 100.0)  # another observation, equal but not the same lists
    est.estimate(at(101.0), 100.0)
    assert calls == [2, 2]
    # each part of what the barriers depend on, changed alone from the one held
    calls.clear()
    est.estimate(first, 100.0)
    moved = first.model_copy(update={"time": 130.0})
    relearned = moved.model_copy(update={"categories": {"a": m}})
    rereleased = relearned.model_copy(update={"upcoming": list(relearned.upcoming)})
    for o in (moved, relearned, rereleased):
        est.estimate(o, 100.0)
    assert calls == [2, 2, 2, 2]


def test_never_measured_tasks_wait_briefly_for_a_first_one_of_theirs_to_end():
    # 40 tasks of a never-measured category wait; one of them has run on w1 for 3 s (L = 40 s)
    def seen(ran_s):
        return obs(workers=[worker("w1", 1, 1)], waiting=[TaskGroup(category="new", count=40, request=ONE)],
                   running=[RunningTask(task_id=1, category="new", allocation=ONE, started_at=100.0 - ran_s,
                                        worker="w1")],
                   latency=LatencyStats(samples=[40.0]), max_workers=100)
    d = HTAPolicy(worker_shape="node").decide(seen(3.0))
    assert d.add == 0 and "waiting for a first new task to end" in d.reason
    # past a quarter of a latency, its tasks are long enough to buy for at once, one each
    assert HTAPolicy(worker_shape="node").decide(seen(11.0)).add == 20
    assert HTAPolicy(worker_shape="node", options=EstimatorOptions(first_finish_latencies=0)).decide(
        seen(3.0)).add == 20
    # none of them running: nothing will measure them soon, so they are bought for
    nothing_runs = seen(3.0).model_copy(update={"running": [], "workers": [worker("w1", 1, 1)]})
    assert HTAPolicy(worker_shape="node").decide(nothing_runs).add == 20


def test_work_behind_a_never_measured_task_is_bought_for_once_released_not_on_its_guessed_end():
    # w1 runs a never-measured split (started 2 s ago); 6 aligns of 100 s wait for it. The
    # play guesses the split ends soon, but nothing measured says so: a stage whose first
    # task was short bought for the rest and idled through it
    o = obs(workers=[worker("w1", 1, 1)],
            running=[RunningTask(task_id=1, category="split", allocation=ONE, started_at=98.0, worker="w1")],
            categories={"a": cat("a", 100.0)},
            upcoming=[UpcomingTasks(id="u0", category="a", count=6, request=ONE, after=["task:1"])])
    d = HTAPolicy(worker_shape="node").decide(o)
    assert d.add == 0 and "5 tasks behind a never-measured one, bought for once released" in d.reason
    assert HTAPolicy(worker_shape="node", options=EstimatorOptions(buy_for_gated=True)).decide(o).add == 2
    # released, they are bought for at once
    released = o.model_copy(update={"running": [], "workers": [worker("w1")], "upcoming": [],
                                    "waiting": [TaskGroup(category="a", count=6, request=ONE)]})
    assert HTAPolicy(worker_shape="node").decide(released).add == 2
