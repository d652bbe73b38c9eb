"""Workers under a batch system's time limit: the limits Slurm states, a worker that takes no
task it cannot finish (its last call), tasks that can never fit, and lost work by cause."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import wait

from hta.backends.pool import WorkerPool
from hta.backends.provider import JobState, JobStatus
from hta.backends.slurm.limits import clock, job_limits, parse_default_qos, parse_qos, slurm_seconds
from hta.node.last_call import MARGIN, LastCall, left_how
from hta.scaling_log import WorkerRecord
from tests.test_pool import SHAPE, FakeProvider, connect, running, snap, worker

PARTITION = ("PartitionName=hta AllowGroups=ALL Default=YES QoS=N/A DefaultTime=00:30:00 MaxNodes=UNLIMITED "
             "MaxTime=1-00:00:00 State=UP")
QOS = "normal|||\nshort|02:00:00|4|2\nlong|7-00:00:00||\n"


@pytest.mark.parametrize("text,seconds", [
    ("30", 1800), ("1", 60), ("5:30", 330), ("1:30:00", 5400), ("2-12", 216000), ("1-00:30", 88200),
    ("1-00:00:00", 86400), ("00:03:00", 180), ("UNLIMITED", None), ("INFINITE", None), ("NONE", None),
    ("Partition_Limit", None)])
def test_every_slurm_duration_form_is_read(text, seconds):
    assert slurm_seconds(text) == seconds


def test_a_duration_slurm_never_prints_is_refused_and_seconds_print_as_slurm_does():
    with pytest.raises(ValueError):
        slurm_seconds("90m")
    assert [clock(s) for s in (60, 5400, 86400 + 61)] == ["1:00", "1:30:00", "1-00:01:01"]


def test_the_ceiling_is_the_smallest_limit_and_names_who_set_it():
    limits = job_limits(user=None, partition=None, partition_text=PARTITION, qos="short", qos_text=QOS)
    assert limits.ceiling.words() == "QOS short's MaxWall 2:00:00"
    assert limits.default.seconds == 1800
    limits = job_limits(user="45", partition="hta", partition_text=PARTITION, qos="short", qos_text=QOS)
    assert (limits.ceiling.seconds, limits.ceiling.source) == (2700, "--time-limit")
    # no accounting: the partition alone
    limits = job_limits(user=None, partition=None, partition_text=PARTITION, qos="short", qos_text=None)
    assert limits.ceiling.words() == "partition hta's MaxTime 1-00:00:00"
    assert job_limits(user=None, partition=None, partition_text="", qos=None, qos_text=None).ceiling is None


def test_the_qos_table_keeps_its_submit_and_run_limits():
    assert parse_qos(QOS)["short"] == {"MaxWall": "02:00:00", "MaxSubmitJobsPU": "4", "MaxJobsPU": "2"}
    limits = job_limits(user=None, partition=None, partition_text=PARTITION, qos="short", qos_text=QOS)
    assert (limits.qos, limits.max_submit_jobs, limits.max_running_jobs) == ("short", 4, 2)
    plain = job_limits(user=None, partition=None, partition_text=PARTITION, qos=None, qos_text=QOS)
    assert (plain.qos, plain.max_submit_jobs, plain.ceiling.source) == ("normal", None, "partition hta's MaxTime")
    mine = job_limits(user=None, partition=None, partition_text=PARTITION, qos=None, qos_text=QOS, default_qos="short")
    assert (mine.qos, mine.max_submit_jobs) == ("short", 4)


def test_the_qos_a_job_gets_is_its_accounts_default():
    # sacctmgr -nP show user root withassoc format=User,DefaultAccount,Account,Partition,DefaultQOS,QOS
    text = "root|hta|hta||limited|limited,normal\nroot|hta|root|||normal\n"
    assert parse_default_qos(text) == "limited"
    assert parse_default_qos(text, account="root") == "normal"
    assert parse_default_qos("root|a|a|||short\n") == "short" and parse_default_qos("") is None


# -- the last call ----------------------------------------------------------------------------


def test_a_worker_holds_a_task_that_starts_after_its_last_call_and_leaves_once_only_held_ones_remain():
    rule = LastCall(ends_at=1000.0, last_call_s=100.0, started_at=0.0, stop_before_s=5.0)
    assert rule.closes_at() == 895.0
    rule.seen(800.0, {1: "/w/t.1"})
    assert rule.to_hold() == [] and rule.leave(800.0, {"/w/t.1"}) is None
    rule.seen(896.0, {1: "/w/t.1", 2: "/w/t.2"})  # a task sent after the call
    assert rule.to_hold() == [2]
    rule.tasks[2].held = True
    assert rule.leave(896.0, {"/w/t.1", "/w/t.2"}) is None  # the one that fits still runs
    rule.seen(950.0, {2: "/w/t.2"})
    assert rule.leave(950.0, {"/w/t.1", "/w/t.2"}) is None  # its result is not with the master yet
    assert rule.leave(950.5, {"/w/t.2"}) == "last call"


def test_a_call_that_moves_earlier_never_stops_a_task_already_running():
    rule = LastCall(ends_at=600.0, started_at=0.0, stop_before_s=5.0)
    rule.seen(0.0, {1: "/w/t.1"})
    rule.seen(350.0, {1: "/w/t.1", 2: "/w/t.2"})  # a 60 s task starts before the call
    rule.seen(410.0, {2: "/w/t.2"})  # a 410 s task ended: the call moves to 82.5
    assert rule.closes_at() < 350.0 and rule.to_hold() == []
    rule.seen(411.0, {2: "/w/t.2", 3: "/w/t.3"})
    assert rule.to_hold() == [3]  # the next one is held


def test_a_worker_learns_how_long_its_tasks_run_and_cuts_only_at_its_end():
    rule = LastCall(ends_at=1000.0, started_at=0.0, stop_before_s=5.0)
    rule.seen(0.0, {1: "/w/t.1"})
    rule.seen(200.0, {})  # it ran 200 s: the next may too
    assert rule.closes_at() == pytest.approx(995.0 - 200.0 * MARGIN)
    held = LastCall(ends_at=1000.0, started_at=0.0)
    held.seen(0.0, {1: "/w/t.1"})
    held.tasks[1].held = True
    held.seen(10.0, {})
    assert held.longest_s == 0.0  # a held task taught nothing
    rule.seen(500.0, {3: "/w/t.3"})
    assert rule.leave(995.0, {"/w/t.3"}) == "time limit"
    rule.seen(996.0, {})
    assert rule.leave(996.0, {"/w/t.3"}) == "time limit"  # a result the master has not fetched is cut too
    assert rule.leave(996.0, set()) == "last call"


def test_no_last_call_when_no_task_of_the_expected_length_fits_the_job_at_all():
    rule = LastCall(ends_at=60.0, last_call_s=90.0, started_at=0.0)
    assert rule.closes_at() == float("inf")
    rule.seen(1.0, {1: "/w/t.1"})
    assert rule.to_hold() == [] and rule.leave(30.0, {"/w/t.1"}) is None


def test_the_backend_reads_the_workers_own_word_on_why_it_left():
    log = '{"hta_worker": "capacity"}\nwork_queue_worker: ...\n{"hta_worker": "left", "why": "last call", "cut": 0}\n'
    assert left_how(log) == {"hta_worker": "left", "why": "last call", "cut": 0}
    assert left_how("nothing said\n") is None


# -- tasks that can never fit ------------------------------------------------------------------


class LimitedProvider(FakeProvider):
    def job_ceiling(self):
        return 60.0, "--time-limit 1:00"


async def lose_one(pool: WorkerPool, addr: str, started_after_s: float, limit_s: float = 60.0):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, addr, now=10.0)
    began = pool.epoch + 10.0
    await pool.refresh(snap(worker(addr, busy=1), tasks=[running(addr, started=began + started_after_s)], at=began),
                       11.0)
    pool.provider.status[h] = JobStatus(JobState.ENDED, why="time limit", cause="time limit", limit_s=limit_s)
    return await pool.refresh(snap(at=began + 60.0), 70.0)


async def test_a_task_cut_twice_at_the_longest_limit_ends_the_run_naming_its_category_runtime_and_limit(caplog):
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0)
    (rec,) = await lose_one(pool, "1.1.1.1:1", 1.0)
    assert (rec.event, rec.cause, rec.tasks_lost) == ("lost", "time limit", 1)
    assert pool.fatal is None and "category c ran 59s" in caplog.text
    await lose_one(pool, "1.1.1.2:1", 1.0)
    assert "category c cannot fit" in pool.fatal and "--time-limit 1:00" in pool.fatal and "59s" in pool.fatal


async def test_a_worker_cut_with_several_tasks_of_a_category_is_one_loss():
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0)
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1", now=10.0)
    began = pool.epoch + 10.0
    await pool.refresh(snap(worker("1.1.1.1:1", busy=2), tasks=[running("1.1.1.1:1", i, began + 1.0) for i in (1, 2)],
                            at=began), 11.0)
    pool.provider.status[h] = JobStatus(JobState.ENDED, why="time limit", cause="time limit", limit_s=60.0)
    await pool.refresh(snap(at=began + 60.0), 70.0)
    assert pool.cut == {"c": 1} and pool.fatal is None


async def test_cuts_that_say_nothing_of_fitting_never_end_the_run():
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0, max_task_losses=1)
    await lose_one(pool, "1.1.1.1:1", 40.0)  # it started late in its job: a fresh job may fit it
    await lose_one(pool, "1.1.1.2:1", 1.0, limit_s=30.0)  # a limit shortened from outside
    assert pool.fatal is None


async def test_a_worker_that_left_at_its_last_call_is_drained_and_its_held_slot_time_counted():
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0)
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")
    await pool.refresh(snap(worker("1.1.1.1:1", busy=1), tasks=[running("1.1.1.1:1", started=time.time())]), 11.0)
    pool.provider.status[h] = JobStatus(JobState.ENDED, left=True, failed=False, why="left at its last call",
                                        held_back=1, held_s=3.0)
    (rec,) = await pool.refresh(snap(), 12.0)
    assert (rec.event, rec.tasks_lost, rec.cause) == ("drained", 1, "held at a last call") and rec.took_work
    assert rec.lost_work_core_s == 6.0  # 3 s of a 2-core slot
    (h2,) = await pool.request(1, SHAPE, 13.0)
    await connect(pool, h2, "1.1.1.2:1", now=14.0)
    pool.provider.status[h2] = JobStatus(JobState.ENDED, left=True, failed=False, why="left")
    (rec,) = await pool.refresh(snap(), 15.0)
    assert (rec.event, rec.tasks_lost, rec.cause, rec.took_work) == ("drained", 0, None, False)


def test_a_category_measured_longer_than_the_ceiling_is_said_once(caplog):
    pool = WorkerPool(LimitedProvider(), epoch=time.time())
    pool.expect_tasks({"long": 90.0, "short": 10.0})
    pool.expect_tasks({"long": 95.0, "short": 10.0})
    assert caplog.text.count("category long have run") == 1 and "short" not in caplog.text
    assert pool.provider.expected_task_s == 95.0


# -- lost work in the summary --------------------------------------------------------------------


def test_utilisation_counts_lost_work_as_not_useful_and_the_summary_splits_it_by_cause():
    from hta.model import Resources
    from hta.scaling_log import EndRecord, ObservationRecord, RunRecord
    from hta.summary import summarize

    BUSY = dict(supply_cores=1, in_use_cores=1, demand_cores=1, idle_cores=0, waiting=0, running=1, workers=1,
                pending=0, tasks_done=0, tasks_failed=0)
    records = [RunRecord(t=0.0, started_at=0.0, workflow="w", policy="hta", backend="slurm", max_workers=1,
                         worker_shape=Resources(cores=1, memory_mb=1, disk_mb=1)),
               ObservationRecord(t=0.0, **BUSY),
               WorkerRecord(t=50.0, worker="w1", event="lost", tasks_lost=1, lost_work_core_s=50.0, cause="time limit"),
               WorkerRecord(t=60.0, worker="w2", event="lost", tasks_lost=1, lost_work_core_s=10.0, cause="preemption"),
               ObservationRecord(t=100.0, **BUSY),
               EndRecord(t=100.0, exit_code=1, runtime_s=100.0, tasks_done=0)]
    s = summarize(records)
    assert s.utilization == pytest.approx(0.4)
    assert s.lost_by_cause == {"time limit": 50.0, "preemption": 10.0}
    assert s.waste_core_s == 0.0
    from hta.report import rows
    from hta.summary_view import summary_rows

    lost = dict(summary_rows(s))["lost work"]
    assert "50.0 of it to time limit" in lost and "10.0 of it to preemption" in lost
    assert ("  to time limit", "50.0") in rows(s)


# -- a replacement one latency ahead -----------------------------------------------------------


def test_a_worker_near_its_jobs_end_is_replaced_once_a_latency_ahead_even_at_the_cap():
    from hta.model import LatencyStats, Observation, Resources, RunningTask, TaskGroup, WorkerInfo
    from hta.policies.hta_policy import HTAPolicy
    from tests.test_policy_hta import cat

    shape = Resources(cores=1, memory_mb=100, disk_mb=100)

    def obs(ends: dict[str, float], waiting: int = 4) -> Observation:
        return Observation(
            time=100.0, worker_shape=shape, max_workers=2, latency=LatencyStats(samples=[10.0]),
            workers=[WorkerInfo(id=w, capacity=shape, in_use=shape, running=1) for w in ("w1", "w2")],
            running=[RunningTask(task_id=i, category="a", allocation=shape, started_at=95.0, worker=w)
                     for i, w in ((1, "w1"), (2, "w2"))],
            waiting=[TaskGroup(category="a", count=waiting, request=shape)] if waiting else [],
            categories={"a": cat("a", 40.0)}, worker_ends=ends)

    policy = HTAPolicy(worker_shape="node")
    assert policy.decide(obs({"w1": 300.0, "w2": 300.0})).add == 0  # at the cap, none near its end
    d = policy.decide(obs({"w1": 105.0, "w2": 300.0}))
    assert d.add == 1 and "near their job's end" in d.reason  # w1 stops taking tasks within L
    assert policy.decide(obs({"w1": 105.0, "w2": 300.0})).add == 0  # once per worker
    assert HTAPolicy(worker_shape="node").decide(obs({"w1": 105.0}, waiting=0)).add == 0  # no work left for it


# -- the job's --time -----------------------------------------------------------------------------


def test_new_jobs_last_the_forecast_rest_of_the_run_within_the_limit():
    from hta.model import LatencyStats, Observation, Resources, TaskGroup
    from hta.policies.hta_policy import JOB_TASKS, HTAPolicy
    from tests.test_policy_hta import cat

    shape = Resources(cores=1, memory_mb=100, disk_mb=100)

    def decide(ceiling, measured=True, waiting=8, prior=False):
        from hta.model import CategoryModel

        known = {"a": cat("a", 40.0)} if measured else {"a": CategoryModel(name="a", prior_runtime_s=5.0)} if prior else {}
        o = Observation(time=100.0, worker_shape=shape, max_workers=4, latency=LatencyStats(samples=[10.0]),
                        waiting=[TaskGroup(category="a", count=waiting, request=shape)],
                        categories=known, job_ceiling_s=ceiling)
        return HTAPolicy(worker_shape="node").decide(o)

    d = decide(3600.0)
    assert d.add == 4 and d.job_time_s is not None and "jobs of" in d.reason
    # 8 tasks of 40 s on 4 workers a latency away: about 90 s left, with the margin and a latency
    assert JOB_TASKS * 40.0 <= d.job_time_s <= 200.0
    assert decide(100.0).job_time_s == 100.0  # never past the limit
    assert decide(3600.0, waiting=1).job_time_s >= JOB_TASKS * 40.0  # room for at least two of the longest task
    assert decide(3600.0, measured=False).job_time_s is None  # nothing measured: the longest job
    # an earlier run's mean says nothing of this run's longest task: the longest job still
    assert decide(3600.0, measured=False, prior=True).job_time_s is None
    assert decide(None).job_time_s is None  # no time limit: nothing to choose


def test_sbatch_time_is_the_choice_in_whole_minutes_within_the_ceiling(tmp_path):
    from hta.backends.slurm.backend import SlurmProvider
    from hta.backends.slurm.limits import JobLimits, Limit

    p = SlurmProvider(run_id="x", run_dir=tmp_path)
    assert p.job_time() is None  # no limit anywhere: Slurm's own
    p.limits = JobLimits(limits=[Limit(seconds=14400, source="partition hta's MaxTime")],
                         default=Limit(seconds=600, source="partition hta's DefaultTime"))
    assert p.job_time() == "240"  # no choice made: the longest, not the 10-minute default
    p = SlurmProvider(run_id="x", run_dir=tmp_path, time_limit="30")
    assert p.job_time() == "30"  # no choice made: --time-limit
    p.limits = JobLimits(limits=[Limit(seconds=1800, source="--time-limit")])
    p.job_time_s = 61.0
    assert p.job_time() == "2"
    p.job_time_s = 7200.0
    assert p.job_time() == "30"


async def test_after_a_task_outlived_a_shorter_job_jobs_ask_for_the_longest():
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0)
    pool.ask_job_time(30.0)
    assert pool.provider.job_time_s == 30.0
    await lose_one(pool, "1.1.1.1:1", 1.0, limit_s=30.0)
    pool.ask_job_time(30.0)
    assert pool.provider.job_time_s == 60.0 and pool.fatal is None


def test_a_closing_worker_stops_a_late_task_and_leaves_once_the_others_are_done(tmp_path, monkeypatch, capsys):
    """The worker's side against real processes: each task its own process group, in its
    sandbox; this test process stands for ``work_queue_worker``."""
    import json
    import os
    import subprocess

    import psutil

    import hta.node.last_call as lc

    space = tmp_path / f"worker-0-{os.getpid()}"
    procs = []

    def task(n: int) -> subprocess.Popen:
        box = space / f"t.{n}"
        box.mkdir(parents=True)
        procs.append(subprocess.Popen(["sleep", "60"], cwd=box, start_new_session=True))
        return procs[-1]

    real = lc.task_processes
    monkeypatch.setattr(lc, "task_processes",
                        lambda pid: {k: v for k, v in real(pid).items() if k in {p.pid for p in procs}})
    try:
        early = task(1)
        closes = time.time() + 0.3
        # (a relative --workdir, as a user may give it: the sandboxes it lists are the tasks' own)
        monkeypatch.chdir(tmp_path.parent)
        closer = lc.Closer(os.getpid(), Path(tmp_path.name), ends_at=closes + lc.STOP_BEFORE_S + 100.0,
                           last_call_s=100.0)
        closer.rule.started_at = closes - 10.0
        assert closer.step() is None  # seen before the last call
        while time.time() < closes:
            time.sleep(0.05)
        late = task(2)
        assert closer.step() is None
        # held: its slot stays taken (a SIGSTOP lands a moment after it is sent)
        assert wait(lambda: psutil.Process(late.pid).status() == psutil.STATUS_STOPPED, timeout=5, every=0.01)
        assert psutil.Process(early.pid).status() != psutil.STATUS_STOPPED
        early.kill()
        early.wait()
        assert closer.step() is None  # its result is not with the master yet (its sandbox is there)
        (space / "t.1").rmdir()
        assert closer.step() == "last call" and closer.only_held()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    said = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    assert [(x["why"], x["held"], x["cut"]) for x in said if x["hta_worker"] == "left"] == [("last call", 1, 0)]
    # each task once, as it was first seen: what a hung worker's log is read for
    assert [(x["sandbox"], x["late"]) for x in said if x["hta_worker"] == "task"] == [("t.1", False), ("t.2", True)]


def test_a_partitions_qos_applies_on_top_of_the_jobs_own():
    part = PARTITION.replace("QoS=N/A", "QoS=short")
    limits = job_limits(user=None, partition=None, partition_text=part, qos="long", qos_text=QOS)
    assert limits.ceiling.words() == "partition hta's QOS short's MaxWall 2:00:00"
    assert (limits.qos, limits.max_submit_jobs) == ("long", None)  # the count is the job's QOS's


def test_an_array_element_is_the_worker_its_index_counts_from_its_arrays_first(tmp_path):
    from hta.backends.slurm.backend import SlurmProvider
    from hta.backends.slurm.commands import SlurmJob

    p = SlurmProvider(run_id="r", run_dir=tmp_path)
    assert p.handle_of(SlurmJob(job_id="123_4", name="hta-r-7-20", state="PENDING")) == "hta-r-11"
    assert p.handle_of(SlurmJob(job_id="124", name="hta-r-21", state="RUNNING")) == "hta-r-21"


async def test_a_worker_whose_task_can_never_fit_its_job_is_not_counted_as_leaving():
    pool = WorkerPool(LimitedProvider(), epoch=time.time() - 100.0)
    (h,) = await pool.request(1, SHAPE, 0.0)
    pool.provider.status[h] = JobStatus(JobState.RUNNING, address="1.1.1.1:1", ends_at=pool.epoch + 70.0)
    await pool.refresh(snap(worker("1.1.1.1:1")), 10.0)
    assert pool.worker_ends() == {h: pytest.approx(55.0)}  # its end less the 15 s it leaves before
    pool.expect_tasks({"c": 90.0})  # longer than its whole job
    assert pool.worker_ends() == {}



def test_a_worker_of_n_tasks_holds_the_next_and_leaves_once_their_results_are_fetched():
    """``hta worker --tasks N`` (a KEDA ScaledJob's job): the task after the Nth is held at
    once and handed back; the worker leaves once the N results are with the master."""
    rule = LastCall(max_tasks=2, started_at=0.0)
    assert rule.leave(0.0, set()) is None  # nothing run yet: it waits for work
    rule.seen(1.0, {1: "/w/t.1"})
    rule.seen(2.0, {1: "/w/t.1", 2: "/w/t.2"})
    assert rule.to_hold() == [] and rule.leave(2.0, {"/w/t.1", "/w/t.2"}) is None
    rule.seen(5.0, {2: "/w/t.2", 3: "/w/t.3"})  # the first ended, and the master sent a third
    assert rule.to_hold() == [3] and rule.started == 2
    rule.tasks[3].held = True
    rule.seen(6.0, {3: "/w/t.3"})
    assert rule.leave(6.0, {"/w/t.2", "/w/t.3"}) is None  # the second's result is not fetched yet
    assert rule.leave(6.1, {"/w/t.3"}) == "tasks done"
    one = LastCall(max_tasks=1, started_at=0.0)  # no task comes after it: it leaves all the same
    one.seen(1.0, {1: "/w/t.1"})
    one.seen(2.0, {})
    assert one.leave(2.0, {"/w/t.1"}) is None and one.leave(2.1, set()) == "tasks done"


def test_a_task_that_ran_between_two_looks_counts_toward_the_workers_n_tasks():
    """A short task can start and end between two looks; its sandbox stays until the master
    fetches its result, and counts it: the task after the Nth is still held."""
    rule = LastCall(max_tasks=2, started_at=0.0)
    assert rule.seen(1.0, {}, {"/w/t.1"}) == ["/w/t.1"] and rule.started == 1
    rule.seen(2.0, {2: "/w/t.2"}, {"/w/t.1", "/w/t.2"})
    assert rule.started == 2 and rule.to_hold() == []
    rule.seen(3.0, {2: "/w/t.2", 3: "/w/t.3"}, {"/w/t.2", "/w/t.3"})
    assert rule.to_hold() == [3] and rule.started == 2
    staged = LastCall(max_tasks=1, started_at=0.0)  # a sandbox seen before its process: one task
    staged.seen(1.0, {}, {"/w/t.1"})
    staged.seen(1.2, {7: "/w/t.1"}, {"/w/t.1"})
    assert staged.started == 1 and staged.to_hold() == []
    two = LastCall(max_tasks=1, started_at=0.0)  # two sandboxes in one look (a worker of 2 cores)
    two.seen(1.0, {}, {"/w/t.1", "/w/t.2"})
    two.seen(1.2, {7: "/w/t.1", 8: "/w/t.2"}, {"/w/t.1", "/w/t.2"})
    assert two.started == 1 and two.to_hold() == [8]
    again = LastCall(max_tasks=2, started_at=0.0)  # a task sent again under its id: a task again
    again.seen(1.0, {7: "/w/t.1"}, {"/w/t.1"})
    again.seen(2.0, {}, set())
    again.seen(3.0, {9: "/w/t.1"}, {"/w/t.1"})
    again.seen(4.0, {9: "/w/t.1", 10: "/w/t.2"}, {"/w/t.1", "/w/t.2"})
    assert again.started == 2 and again.to_hold() == [10]


@pytest.mark.slow
def test_hta_worker_tasks_runs_n_tasks_and_hands_the_next_back(tmp_path):
    """Against a real master: a worker of one task runs one, gives the next back at once and
    leaves with exit 0; a second worker runs what it gave back."""
    import contextlib
    import json
    import os
    import subprocess

    import psutil
    from conftest import HTA, wait
    from test_node import Master

    m = Master()
    for _ in range(3):
        m.submit("sleep 1")
    # a folder shared with workers killed before (pods on one host share /tmp): each left
    # its workspace, named by a pid the kernel hands out again; none is this worker's
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    stale = range(last + 1, last + 3000)
    for pid in stale:
        (tmp_path / f"worker-{os.getuid()}-{pid}" / "t.7").mkdir(parents=True)
    cmd = [*HTA, "worker", f"--master=127.0.0.1:{m.q.port}", "--cores=1", "--no-css", "--idle-timeout=60"]
    one = subprocess.Popen([*cmd, "--tasks=1", f"--workdir={tmp_path}"], stderr=subprocess.PIPE, text=True)
    other = None
    try:
        def wq() -> int | None:
            for c in psutil.Process(one.pid).children():
                with contextlib.suppress(psutil.Error):
                    if c.name() == "work_queue_worker":
                        return c.pid
            return None

        assert wait(lambda: wq() is not None, 30)
        assert wq() in stale, (wq(), last)  # (else this test would not try what it means to)
        assert one.wait(60) == 0
        assert all((tmp_path / f"worker-{os.getuid()}-{pid}" / "t.7").is_dir() for pid in stale)  # others' left be
        assert not list(tmp_path.glob("hta-worker-*"))  # its own folder, gone with it
        said = [json.loads(x) for x in one.stderr.read().splitlines() if x.startswith('{"hta_worker": "left"')]
        assert [(x["why"], x["cut"]) for x in said] == [("tasks done", 0)], said
        assert len(m.done) == 1 and m.done[0][1] == 0  # one task, run to its end
        (tmp_path / "w2").mkdir()
        other = subprocess.Popen([*cmd, f"--workdir={tmp_path / 'w2'}"], stderr=subprocess.DEVNULL)
        assert wait(lambda: len(m.done) == 3, 60, every=0.2), m.done  # the held one ran elsewhere
        assert all(d[1] == 0 for d in m.done)
    finally:
        m.stop.set()
        for w in (one, other):
            if w is not None and w.poll() is None:
                w.kill()
                w.wait()
