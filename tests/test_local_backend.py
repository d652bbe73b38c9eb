"""The local provider under the worker pool, against a Work Queue master of the test's own
(Debian's work_queue Python module): worker identity, latency, and drain-only-idle."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from conftest import Master, cctools_processes

from hta.backends.local import LocalProvider
from hta.backends.pool import MAX_START_FAILURES, WorkerPool
from hta.model import Resources
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status import MasterStatusClient
from workqueue_bridge.status_json import QueueStatus

pytestmark = pytest.mark.slow

SHAPE = Resources(cores=1, memory_mb=256, disk_mb=512)


def local_pool(run_dir, **options) -> WorkerPool:
    return WorkerPool(LocalProvider(run_dir, **options), epoch=0.0)


async def poll_until(master, backend, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        try:
            snap = await master.snapshot(time.time())
        except (TimeoutError, aiohttp.ClientError):
            snap = None  # not answering yet: poll again
        if snap is not None:
            events += await backend.refresh(snap, time.monotonic())
            if cond(snap):
                return snap, events
        await asyncio.sleep(0.3)  # the poll interval
    raise AssertionError("condition not reached")


async def test_workers_connect_are_identified_and_only_idle_ones_drain(tmp_path):
    m = Master()
    backend = local_pool(tmp_path / "run", provision_delay_s=1.0)
    try:
        await backend.start("127.0.0.1", m.port)
        t0 = time.monotonic()
        ids = await backend.request(2, SHAPE, t0)
        assert [p.id for p in backend.pending()] == ids
        async with MasterStatusClient("127.0.0.1", m.port) as master:
            snap, events = await poll_until(master, backend, lambda s: len(s.workers) == 2)
            snap, more = await poll_until(master, backend, lambda s: len(backend.worker_ids()) == 2)
            events += more
            connected = [e for e in events if e.event == "connected"]
            assert sorted(e.worker for e in connected) == sorted(ids)
            assert all(e.latency_s >= 1.0 for e in connected), "latency includes the provisioning delay"
            assert backend.pending() == []
            assert set(backend.worker_ids()) == {w.address for w in snap.workers}
            assert all(w.cores == 1 and w.memory_mb == 256 for w in snap.workers)

            m.submit("sleep 120")
            snap, _ = await poll_until(master, backend, lambda s: any(w.tasks_running for w in s.workers))
            busy_addr = next(w.address for w in snap.workers if w.tasks_running)
            busy = backend.worker_ids()[busy_addr]
            idle = next(i for i in ids if i != busy)

            out = await backend.drain([busy, idle], snap, time.monotonic())
            assert [(e.worker, e.event) for e in out] == [(idle, "drained")]
            snap, _ = await poll_until(master, backend, lambda s: len(s.workers) == 1, timeout=90)
            assert snap.workers[0].address == busy_addr and snap.workers[0].tasks_running == 1
    finally:
        stopped = await backend.stop_all(time.monotonic())
        m.close()
    assert [e.event for e in stopped] == ["stopped"]
    # the command line as listed (a process of another run may turn zombie meanwhile)
    assert not [p for p in cctools_processes() if str(tmp_path) in " ".join(p.info["cmdline"] or [])]


def nothing_connected() -> MasterSnapshot:
    return MasterSnapshot(taken_at=time.time(), queue=QueueStatus(), tasks=[], workers=[])


async def launched(backend: WorkerPool, ids: list[str]) -> None:
    """Wait until the launches of ``ids`` are over (started, or failed to)."""
    procs = backend.provider.procs  # type: ignore[attr-defined]
    await asyncio.wait_for(asyncio.gather(*(procs[i].launcher for i in ids)), timeout=60)


async def test_a_worker_that_cannot_be_launched_fails_and_is_pending_no_more(tmp_path, monkeypatch):
    """A launch that raises is a start failure, as a worker that exits before connecting is
    (it stayed provisioning for good: pending against --max-workers, never reported as
    failed, never backed off from)."""
    backend = local_pool(tmp_path / "run")
    await backend.start("127.0.0.1", 9)
    workers = tmp_path / "run" / "workers"
    workers.rmdir()
    workers.write_text("")  # a file where the workdirs go: none can be made
    ids = await backend.request(1, SHAPE, 0.0)
    await launched(backend, ids)
    events = await backend.refresh(nothing_connected(), 1.0)
    assert backend.pending() == []
    assert [(e.worker, e.event) for e in events] == [(ids[0], "requested"), (ids[0], "failed")]
    assert events[1].reason.startswith("could not be launched: NotADirectoryError"), events[1].reason
    assert backend.start_failures == 1 and backend.backoff_s() == 1.0 and backend.fatal is None

    workers.unlink()
    workers.mkdir()

    async def no_fork(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_fork)
    ids = await backend.request(MAX_START_FAILURES - 1, SHAPE, 1.0)  # (each backs off 1 s)
    await launched(backend, ids)
    events = await backend.refresh(nothing_connected(), 3.0)
    assert backend.pending() == []
    assert [e.event for e in events] == ["requested"] * len(ids) + ["failed"] * len(ids)  # as they happened
    assert backend.fatal == (f"workers cannot start: {MAX_START_FAILURES} in a row did not start; the last "
                             f"({ids[-1]}) could not be launched: BlockingIOError: [Errno 11] Resource temporarily "
                             f"unavailable; fix that and run again")
    assert not list(workers.iterdir())  # the workdirs made before the fork failed are gone
    assert await backend.stop_all(4.0) == []


async def test_stop_cancelled_while_it_waits_for_the_launch_stays_cancelled(tmp_path, monkeypatch):
    """``_stop`` cancels a launch and waits for it; a cancellation of ``_stop`` itself, meanwhile,
    is not swallowed as if it were the launch's (it went on stopping, as if never cancelled)."""
    backend = LocalProvider(tmp_path / "run")
    await backend.start("127.0.0.1", 9)
    cancelled, release = asyncio.Event(), asyncio.Event()

    async def slow_to_cancel(p, delay):
        try:
            await asyncio.Event().wait()  # provisioning, for ever
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()  # its own clean-up takes a while
            raise

    monkeypatch.setattr(backend, "_launch", slow_to_cancel)
    (wid,) = await backend.launch(SHAPE, 1)
    stopping = asyncio.create_task(backend.cancel([wid]))
    await asyncio.wait_for(cancelled.wait(), timeout=10)  # _stop now waits for the launch
    stopping.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopping, timeout=10)
    await backend.stop_all()


async def test_local_workers_past_the_hosts_cores_are_said_once(tmp_path, caplog, monkeypatch):
    import os

    from hta.backends.local import LocalProvider
    from hta.model import Resources

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    p = LocalProvider(tmp_path, provision_delay_s=3600)  # (no process starts within the test)
    try:
        await p.launch(Resources(cores=1, memory_mb=100, disk_mb=100), 2)
        assert "oversub" not in caplog.text and "host's" not in caplog.text
        await p.launch(Resources(cores=2, memory_mb=100, disk_mb=100), 2)
        await p.launch(Resources(cores=2, memory_mb=100, disk_mb=100), 1)
        assert caplog.text.count("local workers now hold 6 cores on this host's 2") == 1
    finally:
        for w in p.procs.values():
            if w.launcher is not None:
                w.launcher.cancel()
