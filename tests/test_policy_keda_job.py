"""KEDA ScaledJob rival: KEDA's job-creation rule on hand-made observations, and in the
simulator its workers run to completion (none is ever taken away while it runs a task)."""

from __future__ import annotations

import pytest

from hta.model import LatencyStats, Observation, PendingWorker, Resources, RunningTask, TaskGroup, WorkerInfo
from hta.policies import make_policy
from hta.policies.keda_job import KEDAJobPolicy, jobs_to_create
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import load_workload

NODE = Resources(cores=3, memory_mb=15000, disk_mb=100000)


def obs(t=0.0, workers=0, pending=0, waiting=0, running=0, max_workers=200):
    ws = [WorkerInfo(id=f"w{i}", capacity=NODE, in_use=Resources(cores=1), running=1, connected_at=0.0)
          for i in range(workers)]
    ps = [PendingWorker(id=f"p{i}", requested_at=0.0, shape=NODE) for i in range(pending)]
    run = [RunningTask(task_id=i, category="a", allocation=Resources(cores=1), started_at=0.0, worker="w0")
           for i in range(running)]
    return Observation(time=t, worker_shape=NODE, max_workers=max_workers, workers=ws, pending=ps,
                       waiting=[TaskGroup(category="a", count=waiting, request=Resources(cores=1))] if waiting else [],
                       running=run, latency=LatencyStats(samples=[100]))


def test_the_docs_table_of_the_default_strategy():
    # keda.sh/docs/latest/reference/scaledjob-spec, maxReplicaCount: queue length, max replica
    # count, target average value, running jobs → jobs created
    for queue, max_r, per, running, created in [(10, 3, 1, 0, 3), (10, 3, 2, 0, 3), (10, 3, 1, 1, 2),
                                                 (10, 100, 1, 0, 10), (4, 3, 5, 0, 1)]:
        assert jobs_to_create(queue, per, running, 0, max_r) == created


def test_default_strategy_counts_waiting_and_running_tasks_and_deducts_running_jobs():
    p = KEDAJobPolicy(tasks_per_job=3, max_replicas=20)
    d = p.decide(obs(waiting=200))
    assert d.add == 20 and d.next_decision_s == 30  # ceil(200/3) = 67, capped at maxReplicaCount
    # 20 jobs on their way: 20 − 20 = 0 more
    assert p.decide(obs(pending=20, waiting=200)).add == 0
    # queue 10 waiting + 5 running = 15 → ceil(15/3) = 5 jobs, 2 running: 3 more
    assert p.decide(obs(workers=2, waiting=10, running=5)).add == 3
    # never negative, never a removal: jobs run to completion
    d = p.decide(obs(workers=10, waiting=0, running=2))
    assert d.add == 0 and not d.remove and not d.drain


def test_no_job_while_the_scaler_is_inactive_and_min_replicas():
    assert jobs_to_create(0, 1, 0, 0, 100, min_replicas=2) == 0  # queue empty: not active
    assert jobs_to_create(5, 1, 1, 0, 100, min_replicas=3) == 2  # below minReplicaCount: min − running


def test_accurate_strategy():
    # maxScale + running > max: max − running; else maxScale − pending
    assert jobs_to_create(10, 1, 5, 0, 12, strategy="accurate") == 7
    assert jobs_to_create(4, 1, 3, 2, 100, strategy="accurate") == 2
    p = KEDAJobPolicy(tasks_per_job=1, strategy="accurate")
    assert p.decide(obs(workers=3, pending=2, waiting=4, running=3)).add == 2  # running tasks not in its queue


def test_a_job_whose_pod_runs_is_not_pending_though_its_worker_has_not_connected():
    # KEDA's getPendingJobCount: a Job is pending until one of its pods is Running. Two
    # workers on their way, one of whose pods runs (its worker starting): 4 waiting − 1
    # pending = 3 more Jobs, though the waiting tasks may go to that worker
    p = KEDAJobPolicy(tasks_per_job=1, strategy="accurate")
    o = obs(t=50.0, pending=2, waiting=4)
    o.pending[0] = o.pending[0].model_copy(update={"started_at": 48.0})
    assert p.decide(o).add == 3
    o.pending[0] = o.pending[0].model_copy(update={"started_at": None})  # (not told: pending)
    assert p.decide(o).add == 2
    # in the time of an experiment scaled k times, the pod's start is scaled too: at k = 0.5,
    # a pod running since 4.8 s is running at 5.0 s (2.4 s and 2.5 s on the policy's clock)
    q = make_policy("keda-job-1:strategy=accurate@0.5")
    o = obs(t=5.0, pending=2, waiting=4)
    o.pending[0] = o.pending[0].model_copy(update={"started_at": 4.8})
    assert q.decide(o).add == 3


def test_eager_strategy():
    # every free slot up to maxScale: min(max − running − pending, maxScale); KEDA's running
    # count holds the pending jobs too, so they come off twice
    assert jobs_to_create(10, 1, 5, 2, 12, strategy="eager") == 5
    assert jobs_to_create(3, 1, 5, 0, 12, strategy="eager") == 3
    assert jobs_to_create(10, 1, 12, 0, 12, strategy="eager") == 0
    p = KEDAJobPolicy(tasks_per_job=1, strategy="eager")
    assert p.decide(obs(workers=3, pending=2, waiting=4, running=3)).add == 4  # running tasks not in its queue
    with pytest.raises(ValueError, match="default, accurate or eager"):
        KEDAJobPolicy(strategy="custom")


def test_spec_settings_and_worker_lifetime():
    p = make_policy("keda-job:tasks_per_job=3,polling_interval_s=10,max_replicas=20,idle_timeout_s=5")
    assert isinstance(p, KEDAJobPolicy)
    assert (p.tasks_per_job, p.polling_interval_s, p.max_replicas) == (3, 10.0, 20)
    assert p.worker_lifetime.max_tasks == 3 and p.worker_lifetime.idle_timeout_s == 5
    assert make_policy("keda-job-5").tasks_per_job == 5
    assert make_policy("keda-3").name == "keda-3"  # the ScaledObject variant is still there


def test_a_scaledjob_as_its_docs_deploy_it_has_its_pods_spread_in_the_simulated_cluster():
    # packed (the default): HTA's pod affinity; packed=false: plain pods, which the default
    # scheduler spreads. Through the pod-shape and time-scale wrappers too
    spread = Simulation(load_workload("blast-3stage", 0), make_policy("keda-job-1:packed=false[pods=3]@10"),
                        ClusterModel(max_nodes=20), seed=0)
    packed = Simulation(load_workload("blast-3stage", 0), make_policy("keda-job-1[pods=3]@10"),
                        ClusterModel(max_nodes=20), seed=0)
    assert spread.world.cluster.spread and not packed.world.cluster.spread


class Watch:
    """Wraps ``SimCluster.retire``: records, for each worker taken away, what it ran at that
    moment (a task it held, sent after its last, is handed back: it ran nothing)."""

    def __init__(self, world):
        self.world = world
        self.busy_when_gone: list[tuple[str, int]] = []
        self.gone: list[str] = []
        original = world.cluster.retire

        def retire(node_id, busy_ok, exiting_s=0.0):
            node = world.cluster.nodes.get(node_id)
            was_busy = node is not None and not node.gone and bool(set(node.running) - node.held)
            out = original(node_id, busy_ok, exiting_s)
            if out is not None:
                self.gone.append(node_id)
                if was_busy:
                    self.busy_when_gone.append((node_id, out))
            return out
        world.cluster.retire = retire


def test_simulated_jobs_run_to_completion_and_none_is_deleted_busy():
    cluster = ClusterModel(max_nodes=20)
    sim = Simulation(load_workload("blast-3stage", 0), make_policy("keda-job:tasks_per_job=3,max_replicas=20"),
                     cluster, seed=0)
    watch = Watch(sim.world)
    # each worker's tasks, counted as they start
    started: dict[str, int] = {}
    original_start = sim.world.queue._start

    def start(t, node, alloc):
        started[node.id] = started.get(node.id, 0) + 1
        original_start(t, node, alloc)
    sim.world.queue._start = start
    summary = sim.run()
    assert summary.exit_code == 0
    assert summary.lost_work_core_s == 0 and summary.workers_removed == 0
    assert watch.busy_when_gone == []  # no worker ever left (or was taken) while running a task
    assert watch.gone, "the jobs' workers left by themselves during the run"
    assert max(started.values()) <= 3  # a job's worker runs at most tasks_per_job tasks
    # the task the master sends after them is held, and handed back when the worker leaves
    assert sim.world.queue.held_back > 0
    # every worker that left by itself is in the scaling log as drained, once
    assert summary.workers_drained == len(watch.gone)


def test_a_job_counts_until_the_job_controller_completes_it():
    # a worker that left between two polls counts as a running Job for job_end_s from the
    # midpoint of the polls: KEDA counts Job objects, not workers
    p = KEDAJobPolicy(tasks_per_job=1, max_replicas=10, strategy="accurate", job_end_s=20)
    assert p.decide(obs(t=0, workers=10, waiting=50)).add == 0
    d = p.decide(obs(t=10, workers=7, waiting=50))  # 3 left at ~5 s: counted until ~25 s
    assert d.add == 0 and "10 running jobs" in d.reason
    assert p.decide(obs(t=24, workers=7, waiting=50)).add == 0
    assert p.decide(obs(t=26, workers=7, waiting=50)).add == 3
    # without the lag (a Job controller that answers at once) the slots are free at once
    q = KEDAJobPolicy(tasks_per_job=1, max_replicas=10, strategy="accurate")
    q.decide(obs(t=0, workers=10, waiting=50))
    assert q.decide(obs(t=10, workers=7, waiting=50)).add == 3


def test_a_poll_reads_then_creates_its_jobs_one_call_at_a_time():
    # the scaler's metric and the status write first (read_s), then one Create call per Job,
    # each create_call_s on a server loaded with running Jobs
    p = KEDAJobPolicy(tasks_per_job=1, max_replicas=20, strategy="accurate", polling_interval_s=2.5,
                      read_s=0.5, create_call_s=0.25)
    d = p.decide(obs(t=0, workers=10, waiting=50))
    assert d.add == 0 and "create 10" in d.reason and d.next_decision_s == pytest.approx(0.75)
    d = p.decide(obs(t=0.75, workers=10, waiting=50))
    assert d.add == 1 and d.next_decision_s == pytest.approx(0.25)
    # asked late (a controller's floor between decisions): every Job whose call has returned
    d = p.decide(obs(t=1.5, workers=10, pending=1, waiting=50))
    assert d.add == 3
    made, t = 4, 1.5 + d.next_decision_s
    while made < 10:
        d = p.decide(obs(t=t, workers=10, pending=made, waiting=50))
        made += d.add
        t += d.next_decision_s
    # the reads and ten calls end at 3.0 s: the calls, longer than the interval, set the next poll
    assert made == 10 and t == pytest.approx(3.0)
    # nothing waits: the scaler is not active, KEDA writes no status, creates nothing, and
    # the next poll comes one interval on
    d = p.decide(obs(t=3.0, workers=10, pending=10, waiting=0))
    assert d.add == 0 and d.next_decision_s == pytest.approx(2.5)


def test_into_an_idle_cluster_the_client_limiter_paces_the_calls():
    # no Job runs: the server answers at once, and KEDA's client limiter (burst 30, 20 a
    # second) lets 60 Jobs out in 1.5 s, not 60 loaded calls
    p = KEDAJobPolicy(tasks_per_job=1, max_replicas=60, strategy="accurate", polling_interval_s=30,
                      read_s=0.5, create_call_s=0.25)
    d = p.decide(obs(t=0, waiting=200))
    assert d.add == 0 and d.next_decision_s == pytest.approx(0.5)
    d = p.decide(obs(t=0.5, waiting=200))
    assert d.add == 30 and d.next_decision_s == pytest.approx(0.05)
    d = p.decide(obs(t=2.0, pending=30, waiting=200))
    assert d.add == 30 and d.next_decision_s == pytest.approx(28)
    with pytest.raises(ValueError, match="api_qps"):
        KEDAJobPolicy(api_qps=0)


def test_deleting_finished_jobs_beyond_the_history_limit_holds_the_next_poll():
    # KEDA's loop creates, then deletes the finished Jobs beyond successfulJobsHistoryLimit,
    # one API call each; the next poll waits for the calls when they outlast pollingInterval
    p = KEDAJobPolicy(tasks_per_job=1, max_replicas=30, strategy="accurate", polling_interval_s=3,
                      history_limit=2, create_call_s=0.1, delete_call_s=0.5)
    assert p.decide(obs(t=0, workers=30, waiting=100)).next_decision_s == 3
    d = p.decide(obs(t=3, workers=10, waiting=100))  # 20 finished: 18 deleted, 20 created
    assert "create 20" in d.reason and "delete 18 finished" in d.reason
    made = d.add
    t = 3 + d.next_decision_s
    while made < 20:  # (the Jobs come one call apart; then the deletes hold the loop)
        d = p.decide(obs(t=t, workers=10 + made, waiting=100))
        made += d.add
        t += d.next_decision_s
    assert t == pytest.approx(3 + 20 * 0.1 + 18 * 0.5)
    # deleted once: the next poll, with no Job finished since, deletes none
    d = p.decide(obs(t=14, workers=30, waiting=100))
    assert "delete" not in d.reason and d.next_decision_s == 3
    # KEDA's default keeps 100: nothing to delete, the poll keeps its interval
    q = KEDAJobPolicy(tasks_per_job=1, max_replicas=30, strategy="accurate", polling_interval_s=3,
                      create_call_s=0.1, delete_call_s=0.5)
    q.decide(obs(t=0, workers=30, waiting=100))
    d = q.decide(obs(t=3, workers=10, waiting=100))
    made, t = d.add, 3 + d.next_decision_s
    while made < 20:
        d = q.decide(obs(t=t, workers=10 + made, waiting=100))
        made += d.add
        t += d.next_decision_s
    assert t == pytest.approx(6)
