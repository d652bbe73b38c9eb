"""The local backend against a Work Queue master of the test's own (Debian's
work_queue Python module): worker identity, latency, and drain-only-idle."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from hta.backends.local import LocalBackend
from hta.model import Resources
from workqueue_bridge.status import MasterStatusClient

from conftest import Master, cctools_processes

pytestmark = pytest.mark.slow

SHAPE = Resources(cores=1, memory_mb=256, disk_mb=512)


async def poll_until(master, backend, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        try:
            snap = await master.snapshot(time.time())
        except (asyncio.TimeoutError, aiohttp.ClientError):
            snap = None  # not answering yet: poll again
        if snap is not None:
            events += await backend.refresh(snap, time.monotonic())
            if cond(snap):
                return snap, events
        await asyncio.sleep(0.3)  # the poll interval
    raise AssertionError("condition not reached")


async def test_workers_connect_are_identified_and_only_idle_ones_drain(tmp_path):
    m = Master()
    backend = LocalBackend(tmp_path / "run", provision_delay_s=1.0)
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
