"""What every provider must do under the worker pool, against a real Work Queue master:
the built-in local provider, and docs/examples/detached_provider.py loaded as a user's
package would be (an ``hta.backends`` entry point from outside this package)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from conftest import Master, cctools_processes

from hta.backends import BackendOptions, RunContext, backend_names, make_backend
from hta.backends.base import WorkerBackend
from hta.model import Resources
from workqueue_bridge.status import MasterStatusClient

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "detached_provider.py"
SHAPE = Resources(cores=1, memory_mb=256, disk_mb=512)


def install_example(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example as a user's installed package: its module and its entry point, on sys.path."""
    shutil.copy(EXAMPLE, where / "detached_provider.py")
    info = where / "hta_detached_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hta-detached-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hta.backends]\ndetached = detached_provider:from_options\n")
    monkeypatch.syspath_prepend(str(where))


async def until(backend: WorkerBackend, master: MasterStatusClient, cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        snap = await master.snapshot(time.time())
        events += await backend.refresh(snap, time.time() - 1e9)
        if cond(snap):
            return snap, events
        await asyncio.sleep(0.3)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize("name", ["local", "detached"])
async def test_a_provider_launches_matches_drains_only_idle_and_leaves_nothing(name, tmp_path, monkeypatch):
    if name == "detached":
        install_example(tmp_path, monkeypatch)
        assert "detached" in backend_names()
    run = RunContext(workflow=tmp_path / "Makeflow", run_dir=tmp_path / "run", epoch=time.time() - 1e9)
    backend = make_backend(name, BackendOptions(), run)
    m = Master()
    try:
        await backend.start("127.0.0.1", m.port)
        ids = await backend.request(2, SHAPE, 0.0)
        assert len(set(ids)) == 2 and {p.id for p in backend.pending()} == set(ids)
        async with MasterStatusClient("127.0.0.1", m.port) as master:
            _, events = await until(backend, master, lambda s: len(backend.worker_ids()) == 2)
            assert sorted(e.worker for e in events if e.event == "connected") == sorted(ids)
            m.submit("sleep 60")
            snap, _ = await until(backend, master, lambda s: any(w.tasks_running for w in s.workers))
            busy = backend.worker_ids()[next(w.address for w in snap.workers if w.tasks_running)]
            out = await backend.drain(ids, snap, 1.0)
            assert [(e.worker, e.event) for e in out] == [(next(i for i in ids if i != busy), "drained")]
            await until(backend, master, lambda s: len(s.workers) == 1)
    finally:
        stopped = await backend.stop_all(2.0)
        m.close()
    assert [e.event for e in stopped] == ["stopped"]
    assert not [p for p in cctools_processes() if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
