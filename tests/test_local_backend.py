"""The local backend against a Work Queue master of the test's own (Debian's
work_queue Python module): worker identity, latency, and drain-only-idle."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest

from hta.backends.local import LocalBackend
from hta.model import Resources
from workqueue_bridge.status import MasterStatusClient
from workqueue_bridge.wq import load

from conftest import cctools_processes

pytestmark = pytest.mark.slow

SHAPE = Resources(cores=1, memory_mb=256, disk_mb=512)


class Master:
    """A real master in this process, pumped by a thread (wait() dispatches tasks)."""

    def __init__(self):
        wq = load()
        self.wq = wq
        self.q = wq.WorkQueue(port=0)
        self.port = self.q.port
        self.done: list[int] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def submit(self, command: str) -> int:
        t = self.wq.Task(command)
        t.specify_cores(1)
        t.specify_memory(100)
        t.specify_disk(100)
        return self.q.submit(t)

    def _pump(self):
        # wait(0) and a sleep: Debian's SWIG module holds the GIL inside wait(), and a
        # wait(1) loop would starve the test's own event loop
        while not self._stop.is_set():
            t = self.q.wait(0)
            if t:
                self.done.append(t.id)
            else:
                time.sleep(0.05)

    def close(self):
        self._stop.set()
        self._t.join(5)


async def poll_until(master, backend, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        try:
            snap = await master.snapshot(time.time())
        except (asyncio.TimeoutError, aiohttp.ClientError):
            continue

        events += await backend.refresh(snap, time.monotonic())
        if cond(snap):
            return snap, events
        await asyncio.sleep(0.3)
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
    assert not [p for p in cctools_processes() if str(tmp_path) in " ".join(p.cmdline())]
