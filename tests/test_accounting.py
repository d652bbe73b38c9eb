"""The one definition of waste and shortage."""

from hta.accounting import CoreSample, integrate, node_seconds
from hta.model import CategoryModel, Observation, Resources, RunningTask, TaskGroup, WorkerInfo

NODE = Resources(cores=3, memory_mb=3000, disk_mb=3000)
ONE_CORE = CategoryModel(name="a", samples=2, peak=Resources(cores=0.98, memory_mb=50, disk_mb=1))


def test_step_integration_by_hand():
    samples = [CoreSample(0, 0, 0, 4), CoreSample(10, 4, 2, 6), CoreSample(20, 4, 4, 4)]
    tot = integrate(samples, end=30)
    # waste: 0·10 + (4−2)·10 + 0·10 = 20; shortage: 4·10 + (6−2)·10 + 0·10 = 80
    assert tot.waste_core_s == 20 and tot.shortage_core_s == 80
    assert tot.supply_core_s == 80 and tot.in_use_core_s == 60 and tot.utilization == 0.75


def test_node_seconds_count_from_request():
    assert node_seconds([(0, 10), (5, None)], end=20) == 10 + 15


def test_waste_splits_into_idle_workers_and_beside_running_tasks():
    # 3 workers of 2 cores: one idle, one with 1 of 2 cores in use, one full, for 10 s
    tot = integrate([CoreSample(0, 6, 3, 3, idle=2)], end=10)
    assert tot.waste_core_s == 30 and tot.idle_waste_core_s == 20 and tot.busy_waste_core_s == 10


def test_waste_splits_at_the_workflows_end():
    from hta.accounting import node_seconds_after, split_totals

    # 4 cores supplied from 0; 2 in use until the workflow ends at 25, then 0 until 40
    samples = [CoreSample(0, 4, 2, 2), CoreSample(25, 4, 0, 0, idle=4), CoreSample(30, 2, 0, 0, idle=2)]
    during, after = split_totals(samples, 20, 40)  # cut between samples: the value at 20 holds on
    assert during.waste_core_s == 2 * 20
    assert after.waste_core_s == 2 * 5 + 4 * 5 + 2 * 10 and after.idle_waste_core_s == 4 * 5 + 2 * 10
    assert during.waste_core_s + after.waste_core_s == integrate(samples, 40).waste_core_s
    during, after = split_totals(samples, 25, 40)  # cut on a sample
    assert (during.waste_core_s, after.waste_core_s) == (50, 40)
    # a worker asked for at 5 and gone at 35, one never gone: paid after 25 until 40
    assert node_seconds_after([(5, 35), (30, None), (0, 10)], at=25, end=40) == 10 + 10 + 0


def test_run_summary_reports_teardown_waste_and_node_time():
    from hta.scaling_log import EndRecord, ObservationRecord, RunRecord, WorkerRecord
    from hta.summary import summarize

    def obs(t, supply, in_use, idle):
        return ObservationRecord(t=t, supply_cores=supply, in_use_cores=in_use, demand_cores=in_use,
                                 idle_cores=idle, waiting=0, running=1 if in_use else 0, workers=supply // 3,
                                 pending=0, tasks_done=0, tasks_failed=0)

    from hta.model import Resources

    records = [RunRecord(started_at=0.0, policy="p", backend="simulated", worker_shape=Resources(cores=3), max_workers=2),
               WorkerRecord(t=0, worker="a", event="requested", cores=3),
               WorkerRecord(t=0, worker="b", event="requested", cores=3),
               obs(0, 6, 3, 3), obs(100, 6, 0, 6), obs(160, 3, 0, 3),
               WorkerRecord(t=160, worker="b", event="drained", cores=3),
               WorkerRecord(t=400, worker="a", event="stopped", cores=3),
               EndRecord(t=400, exit_code=0, runtime_s=100, tasks_done=1, tasks_failed=0, tasks_retried=0)]
    s = summarize(records)
    assert s.run_waste_core_s == 3 * 100
    assert s.teardown_waste_core_s == 6 * 60 + 3 * 240
    assert s.waste_core_s == s.run_waste_core_s + s.teardown_waste_core_s
    assert s.node_s == 400 + 160 and s.teardown_node_s == 300 + 60


def test_the_summary_pays_a_local_half_node_worker_half_a_node_and_says_node_s():
    # HTA's learned shapes cut --worker-cores 2 into 1-core workers on the local backend;
    # each was paid as a whole node, and the summary said "worker·s" where the report said node·s
    from hta.model import Resources
    from hta.scaling_log import EndRecord, RunRecord, WorkerRecord
    from hta.summary import summarize
    from hta.summary_view import summary_rows

    records = [RunRecord(started_at=0.0, policy="hta", backend="local", worker_shape=Resources(cores=2), max_workers=2),
               WorkerRecord(t=0, worker="w1", event="requested", cores=1),
               WorkerRecord(t=0, worker="w2", event="requested", cores=1),
               WorkerRecord(t=2, worker="w1", event="connected", cores=1, latency_s=2.0),
               WorkerRecord(t=50, worker="w1", event="drained", cores=1),
               WorkerRecord(t=50, worker="w2", event="drained", cores=1),
               EndRecord(t=50, exit_code=0, runtime_s=50, tasks_done=1, tasks_failed=0, tasks_retried=0)]
    s = summarize(records)
    assert s.node_s == 50  # two half nodes for 50 s
    rows = dict(summary_rows(s))
    assert rows["node time paid"] == "50.0 node·s (0.0 after the end)"
    # the waste's parts overlap (an idle worker after the end is both): each is "of it"
    assert rows["waste"] == (f"{s.waste_core_s:,.1f} core·s ({s.idle_waste_core_s:,.1f} of it on idle workers, "
                             f"{s.teardown_waste_core_s:,.1f} of it after the end)")
    assert rows["preparation latency"].endswith("(1 worker)"), rows["preparation latency"]
    assert rows["tasks"] == "1 done, 0 failed, 0 retried"
    # a resumed workflow: makeflow counts what an earlier run completed as done again
    resumed = summarize(records[:-1] + [records[-1].model_copy(update={"tasks_done": 4, "tasks_done_before": 3})])
    assert dict(summary_rows(resumed))["tasks"] == "4 done (3 before this run), 0 failed, 0 retried"
    # rules an interrupted run had begun run again whole: not "resumed"
    again = summarize(records[:-1] + [records[-1].model_copy(update={"tasks_done": 9, "tasks_resumed": 8})])
    assert dict(summary_rows(again))["tasks"] == ("9 done (8 begun by the run before and run again from the start), "
                                                 "0 failed, 0 retried")
    # on Kubernetes a pod names its node when it connects; one that never did (Pending, then
    # removed) held no node to share: it is paid whole, not its share of one
    k8s = [records[0].model_copy(update={"backend": "k8s"}),
           WorkerRecord(t=0, worker="p1", event="requested", cores=1),
           WorkerRecord(t=2, worker="p1", event="connected", cores=1, latency_s=2.0, node="h1"),
           WorkerRecord(t=0, worker="p2", event="requested", cores=1),
           WorkerRecord(t=50, worker="p1", event="drained", cores=1),
           WorkerRecord(t=50, worker="p2", event="removed", cores=1), records[-1]]
    assert summarize(k8s).node_s == 50 + 50


def whole(task_id: int, worker: str) -> RunningTask:
    """A running task that declared nothing: Work Queue gave it the whole worker."""
    return RunningTask(task_id=task_id, category="a", allocation=NODE, started_at=0.0, worker=worker,
                       whole_worker=True)


def test_a_whole_worker_task_uses_its_categorys_measured_cores_and_only_on_a_worker_it_runs_alone():
    busy = WorkerInfo(id="w1", capacity=NODE, in_use=NODE, running=1)
    o = Observation(time=10.0, worker_shape=NODE, running=[whole(1, "w1")], workers=[busy],
                    waiting=[TaskGroup(category="a", count=2)], categories={"a": ONE_CORE})
    assert (o.in_use_cores(), o.waiting_cores(), o.in_use_by_worker()) == (1, 2, {"w1": 1})
    # never measured: the whole worker, used and wanted
    unmeasured = o.model_copy(update={"categories": {}})
    assert (unmeasured.in_use_cores(), unmeasured.waiting_cores()) == (3, 6)
    # where the master allocates measured peaks, a measured task on a whole worker is a retry
    # after it went over its peak: it holds (and a waiting one wants) the whole worker
    packed = o.model_copy(update={"auto_allocation": True})
    assert (packed.in_use_cores(), packed.waiting_cores()) == (3, 6)
    # the task table read before the workers: the task it lists on w1 has ended, and w1 now
    # runs three 1-core tasks (w2 is idle); nothing is taken off w1 or w2 for the ended task
    full = WorkerInfo(id="w1", capacity=NODE, in_use=NODE, running=3)
    empty = WorkerInfo(id="w2", capacity=NODE, running=0)
    stale = o.model_copy(update={"workers": [full, empty]})
    assert stale.in_use_by_worker() == {"w1": 3, "w2": 0} and stale.in_use_cores() == 3
