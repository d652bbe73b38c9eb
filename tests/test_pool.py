"""The worker pool's state machine, once, against a fake provider (no processes, no cluster):
matching a launch to its worker, start failures, drops and lost work, drain-only-idle,
adoption, held phases, and the runs that cannot start."""

from __future__ import annotations

import time

import pytest

from hta.backends.pool import MAX_START_FAILURES, WorkerPool, WorkerState
from hta.backends.provider import JobState, JobStatus, Provider, in_order
from hta.model import Resources
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import QueueStatus, TaskStatus, WorkerStatus

SHAPE = Resources(cores=2, memory_mb=512, disk_mb=512)


class FakeProvider(Provider):
    """Jobs whose state the test sets; records what the pool asked."""

    name = "fake"

    def __init__(self, start_timeout_s: float | None = None):
        self.start_timeout_s = start_timeout_s
        self.status: dict[str, JobStatus] = {}
        self.cancelled: list[tuple[str, bool]] = []
        self.fail_launch: str | None = None
        self.fail_cancel: set[str] = set()
        self.n = 0

    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        if self.fail_launch:
            raise RuntimeError(self.fail_launch)
        out = []
        for _ in range(n):
            self.n += 1
            out.append(f"j{self.n}")
            self.status[out[-1]] = JobStatus(JobState.PENDING)
        return out

    async def poll(self, snap):
        return dict(self.status)

    async def cancel(self, handles, force=False):
        self.cancelled += [(h, force) for h in handles]
        return {h: f"cannot stop {h}" for h in handles if h in self.fail_cancel}

    async def stop_all(self):
        self.status.clear()

    def phases(self, handle, requested, connected):
        return in_order(requested, connected, [("node", requested + 1)], "start")


def snap(*workers: WorkerStatus, tasks: list[TaskStatus] | None = None, at: float | None = None) -> MasterSnapshot:
    return MasterSnapshot(taken_at=time.time() if at is None else at, queue=QueueStatus(), tasks=tasks or [],
                          workers=list(workers))


def worker(addr: str, busy: int = 0) -> WorkerStatus:
    return WorkerStatus(address=addr, hostname="h", cores=2, memory_mb=512, disk_mb=512, tasks_running=busy)


def running(addr: str, task_id: int = 1, started: float = 0.0) -> TaskStatus:
    return TaskStatus(task_id=task_id, state="running", category="c", worker=addr, cores=2, started_at=started)


@pytest.fixture
def pool():
    return WorkerPool(FakeProvider(), epoch=time.time() - 100.0)


async def connect(pool: WorkerPool, handle: str, addr: str, now: float = 10.0) -> list:
    pool.provider.status[handle] = JobStatus(JobState.RUNNING, address=addr, node="n1")  # type: ignore[attr-defined]
    return await pool.refresh(snap(worker(addr)), now)


async def test_a_pending_worker_says_when_its_job_began_running(pool):
    # (what KEDA's pending count reads: a Job whose pod runs is not pending, connected or not)
    (h,) = await pool.request(1, SHAPE, 5.0)
    await pool.refresh(snap(), 6.0)
    assert pool.pending()[0].started_at is None
    pool.provider.status[h] = JobStatus(JobState.RUNNING, running_since=pool.epoch + 7.5)  # type: ignore[attr-defined]
    await pool.refresh(snap(), 8.0)
    assert pool.pending()[0].started_at == pytest.approx(7.5)


async def test_a_launch_is_matched_to_the_worker_the_master_lists_with_its_phases(pool):
    (h,) = await pool.request(1, SHAPE, 5.0)
    assert [p.id for p in pool.pending()] == [h]
    assert [(e.worker, e.event) for e in await pool.refresh(snap(), 6.0)] == [(h, "requested")]
    events = await connect(pool, h, "1.2.3.4:5")
    (rec,) = events
    assert (rec.event, rec.latency_s, rec.node, rec.cores) == ("connected", 5.0, "n1", 2)
    assert rec.phases == {"node": 1.0, "start": 4.0}  # they add up to the latency
    assert pool.worker_ids() == {"1.2.3.4:5": h} and pool.pending() == []


async def test_a_worker_found_by_host_name_connects_too(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    pool.provider.status[h] = JobStatus(JobState.PENDING, hostnames=("pod-1",))
    w = WorkerStatus(address="9.9.9.9:1", hostname="pod-1", cores=2)
    await pool.refresh(snap(w), 3.0)
    assert pool.worker_ids() == {"9.9.9.9:1": h}


async def test_one_worker_found_by_host_name_is_one_jobs_not_two(pool):
    # two jobs on one host (a test cluster's nodes, adopted after a restart): the first
    # worker to reconnect is one job's; the other stays on its way, so the cap still counts it
    a, b = await pool.request(2, SHAPE, 0.0)
    for h in (a, b):
        pool.provider.status[h] = JobStatus(JobState.RUNNING, hostnames=("host",))
    await pool.refresh(snap(WorkerStatus(address="9.9.9.9:1", hostname="host", cores=2)), 3.0)
    assert list(pool.worker_ids()) == ["9.9.9.9:1"] and len(pool.pending()) == 1
    await pool.refresh(snap(WorkerStatus(address="9.9.9.9:1", hostname="host", cores=2),
                            WorkerStatus(address="9.9.9.9:2", hostname="host", cores=2)), 4.0)
    assert sorted(pool.worker_ids()) == ["9.9.9.9:1", "9.9.9.9:2"] and pool.pending() == []
    assert sorted(pool.worker_ids().values()) == [a, b]
    # three on one host that come together connect together, one worker each
    more = await pool.request(3, SHAPE, 5.0)
    for h in more:
        pool.provider.status[h] = JobStatus(JobState.RUNNING, hostnames=("other",))
    await pool.refresh(snap(*(WorkerStatus(address=f"8.8.8.8:{i}", hostname="other", cores=2) for i in range(3))), 6.0)
    assert pool.pending() == [] and {pool.worker_ids()[f"8.8.8.8:{i}"] for i in range(3)} == set(more)


async def test_start_failures_back_off_and_end_the_run_after_a_few_in_a_row(pool):
    handles = await pool.request(MAX_START_FAILURES, SHAPE, 0.0)
    pool.provider.status[handles[0]] = JobStatus(JobState.ENDED, why="exit 1: no disk")
    events = await pool.refresh(snap(), 1.0)
    assert events[-1].event == "failed" and events[-1].reason == "exit 1: no disk"
    assert pool.start_failures == 1 and pool.backoff_s() == 1.0 and pool.fatal is None
    for h in handles[1:]:
        pool.provider.status[h] = JobStatus(JobState.ENDED, why="exit 1: no disk")
    await pool.refresh(snap(), 2.0)
    assert pool.fatal and pool.fatal.startswith(f"workers cannot start: {MAX_START_FAILURES} in a row")
    assert await pool.request(1, SHAPE, 3.0) == []  # nothing more is launched


async def test_a_job_deleted_from_outside_before_it_connected_is_no_start_failure(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    pool.provider.status[h] = JobStatus(JobState.ENDED, why="its pod was deleted", failed=False)
    assert [e.event for e in await pool.refresh(snap(), 1.0)][-1] == "failed"
    assert pool.start_failures == 0


async def test_a_connection_resets_the_start_failures(pool):
    a, b = await pool.request(2, SHAPE, 0.0)
    pool.provider.status[a] = JobStatus(JobState.ENDED, why="x")
    await pool.refresh(snap(), 1.0)
    await connect(pool, b, "1.1.1.1:1")
    assert pool.start_failures == 0


async def test_a_worker_whose_job_ended_is_lost_with_the_work_its_tasks_had_done(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")
    t0 = time.time()
    await pool.refresh(snap(worker("1.1.1.1:1", busy=1), tasks=[running("1.1.1.1:1", started=t0 - 10)], at=t0), 2.0)
    pool.provider.status[h] = JobStatus(JobState.ENDED, why="Slurm ended its job at its time limit")
    (rec,) = await pool.refresh(snap(at=t0), 3.0)
    assert (rec.event, rec.tasks_lost, rec.reason) == ("lost", 1, "Slurm ended its job at its time limit")
    assert rec.lost_work_core_s == pytest.approx(20.0)  # 10 s on 2 cores
    assert pool.retired() == {"1.1.1.1:1"} and pool.worker_ids() == {}


async def test_a_worker_the_master_dropped_is_lost_and_stopped_at_once(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")
    t = time.time()
    assert await pool.refresh(snap(at=t), 2.0) == []  # not listed: not yet lost (a blip)
    (rec,) = await pool.refresh(snap(at=t + 3.0), 3.0)
    assert rec.event == "lost" and "stopped answering the master" in rec.reason
    assert pool.provider.cancelled == [(h, True)]


async def test_an_ending_job_is_left_alone_until_its_final_state_says_why(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")
    pool.provider.status[h] = JobStatus(JobState.ENDING)
    t = time.time()
    assert await pool.refresh(snap(at=t), 2.0) == [] and await pool.refresh(snap(at=t + 10), 3.0) == []
    pool.provider.status[h] = JobStatus(JobState.ENDED, why="TIMEOUT")
    assert [e.reason for e in await pool.refresh(snap(at=t + 11), 4.0)] == ["TIMEOUT"]


async def test_only_idle_workers_drain_and_a_failed_stop_is_tried_again(pool):
    a, b = await pool.request(2, SHAPE, 0.0)
    pool.provider.status[a] = JobStatus(JobState.RUNNING, address="1.1.1.1:1")
    pool.provider.status[b] = JobStatus(JobState.RUNNING, address="2.2.2.2:2")
    busy = snap(worker("1.1.1.1:1", busy=1), worker("2.2.2.2:2"))
    await pool.refresh(busy, 1.0)
    events = await pool.drain([a, b], busy, 2.0)
    assert [(e.worker, e.event) for e in events] == [(b, "drained")] and pool.provider.cancelled == [(b, False)]
    pool.provider.fail_cancel = {a}
    idle = snap(worker("1.1.1.1:1"))
    with pytest.raises(RuntimeError, match="cannot stop j1"):
        await pool.drain([a], idle, 3.0)
    assert pool.workers[a].state is WorkerState.CONNECTED  # the next decision tries again


async def test_remove_stops_busy_workers_and_counts_their_tasks(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")
    s = snap(worker("1.1.1.1:1", busy=1), tasks=[running("1.1.1.1:1", started=time.time())])
    await pool.refresh(s, 2.0)
    (rec,) = await pool.remove([h], s, 3.0)
    assert (rec.event, rec.tasks_lost) == ("removed", 1) and pool.provider.cancelled == [(h, True)]


async def test_a_job_it_did_not_launch_is_adopted_once_and_stopped_at_the_end(pool):
    pool.provider.status["old-7"] = JobStatus(JobState.RUNNING, address="3.3.3.3:3", created_at=pool.epoch + 1,
                                              shape=Resources(cores=4))
    await pool.start("127.0.0.1", 9)
    events = await pool.refresh(snap(worker("3.3.3.3:3")), 5.0)
    assert [(e.event, e.latency_s) for e in events] == [("requested", None), ("connected", None)]
    assert await pool.refresh(snap(worker("3.3.3.3:3")), 6.0) == []  # not adopted twice
    assert [e.event for e in await pool.stop_all(7.0)] == ["stopped"]


async def test_a_connected_record_waits_for_its_phases_but_the_worker_counts_at_once(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await pool.refresh(snap(), 0.5)
    pool.provider.status[h] = JobStatus(JobState.PENDING, hostnames=("pod",), settled=False)
    assert await pool.refresh(snap(WorkerStatus(address="4.4.4.4:4", hostname="pod", cores=2)), 4.0) == []
    assert pool.worker_ids() == {"4.4.4.4:4": h}
    pool.provider.status[h] = JobStatus(JobState.RUNNING, hostnames=("pod",))
    (rec,) = await pool.refresh(snap(WorkerStatus(address="4.4.4.4:4", hostname="pod", cores=2)), 6.0)
    assert rec.event == "connected" and rec.t == 4.0 and rec.phases  # stamped when it connected


async def test_workers_stuck_or_launches_failing_for_the_start_timeout_end_the_run():
    pool = WorkerPool(FakeProvider(start_timeout_s=60.0), epoch=time.time())
    pool.provider.master = "10.0.0.1:9123"
    (h,) = await pool.request(1, SHAPE, 0.0)
    pool.provider.status[h] = JobStatus(JobState.RUNNING, running_since=time.time() - 61)
    await pool.refresh(snap(), 1.0)
    assert pool.fatal == ("workers run but no worker reached the master at 10.0.0.1:9123 for 60s; pass "
                          "--master-host an address of this host the workers can reach, and let port 9123 through")

    pool = WorkerPool(FakeProvider(start_timeout_s=60.0), epoch=time.time())
    pool.provider.fail_launch = "the API server does not answer"
    with pytest.raises(RuntimeError):
        await pool.request(1, SHAPE, 0.0)
    await pool.refresh(snap(), 1.0)
    assert pool.fatal is None  # a blip is no reason to end a run
    pool._launch_failing_since -= 61  # type: ignore[operator]
    await pool.refresh(snap(), 2.0)
    assert pool.fatal and pool.fatal.endswith("the last error: the API server does not answer")


def test_phases_are_clamped_in_order_and_add_up():
    assert in_order(10.0, 20.0, [("a", 9.0), ("b", 25.0)], "c") == {"a": 0.0, "b": 10.0, "c": 0.0}
    assert in_order(10.0, 20.0, [("a", 12.0), ("b", None)], "c") == {"a": 2.0}  # unknown: no later phase


async def test_a_provider_that_fails_to_stop_everything_still_ends_the_run_with_its_records(pool, caplog):
    (h,) = await pool.request(1, SHAPE, 0.0)
    await connect(pool, h, "1.1.1.1:1")

    async def broken():
        raise RuntimeError("the batch system does not answer")

    pool.provider.stop_all = broken
    assert [(e.worker, e.event) for e in await pool.stop_all(5.0)] == [(h, "stopped")]
    assert any("stopping every worker failed (the batch system does not answer)" in r.getMessage()
               for r in caplog.records)


async def test_a_provider_that_cannot_tell_the_phases_costs_the_phases_not_the_record(pool):
    (h,) = await pool.request(1, SHAPE, 0.0)
    pool.provider.phases = lambda *a: 1 / 0
    (rec,) = [e for e in await connect(pool, h, "1.1.1.1:1") if e.event == "connected"]
    assert rec.phases == {} and pool.worker_ids() == {"1.1.1.1:1": h}


async def test_ending_everything_waits_out_a_system_that_is_briefly_away(caplog):
    """The run ended while the API server restarts: the end asks again until it answers (it
    gave up at once, and left a pod behind), then stops what is there."""
    from hta.backends.provider import end_all

    answers = [RuntimeError("connection refused"), RuntimeError("connection refused"), ["pod-1"], []]
    ended: list[tuple[list[str], bool]] = []

    async def live():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    async def end(ids, force):
        ended.append((ids, force))

    await end_all("worker pod", live, end, lambda ids: "kubectl delete ...", timeout_s=30, force_after_s=20)
    assert ended == [(["pod-1"], False)] and not answers
    assert not [r for r in caplog.records if "could not stop" in r.getMessage()]

    answers[:] = [RuntimeError("connection refused")] * 100
    await end_all("worker pod", live, end, lambda ids: "kubectl delete ...", timeout_s=1, force_after_s=20)
    assert any("could not stop this run's worker pods (connection refused): stop them with: kubectl delete"
               in r.getMessage() for r in caplog.records)


def test_a_provider_package_that_does_not_import_is_one_line(tmp_path, monkeypatch):
    from hta.backends import BackendOptions, RunContext, backend_names, make_backend

    info = tmp_path / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hta.backends]\nbroken = no_such_module:from_options\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "broken" in backend_names()
    with pytest.raises(ValueError) as e:
        make_backend("broken", BackendOptions(), RunContext(workflow=tmp_path / "Makeflow", run_dir=tmp_path))
    assert str(e.value) == ("backend 'broken' (no_such_module:from_options) cannot be loaded: ModuleNotFoundError: "
                            "No module named 'no_such_module'")
