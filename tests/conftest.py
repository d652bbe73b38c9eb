"""Shared test helpers. Real CCTools everywhere: no fake of makeflow or workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
HTA = [str(ROOT / ".venv" / "bin" / "hta")] if (ROOT / ".venv" / "bin" / "hta").exists() else ["hta"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``bound`` (thousands of random seeds of the lower bound's property, beyond
    the fixed sample every run has) run only when asked for: ``-m bound``."""
    if "bound" in (config.getoption("markexpr") or ""):
        return
    kept = [i for i in items if i.get_closest_marker("bound") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("bound") is not None])
        items[:] = kept


def cctools_processes(marker: str | None = None, any_name: bool = False) -> list[psutil.Process]:
    """Live makeflow / work_queue_worker processes (optionally whose cwd or args mention ``marker``;
    with ``any_name``, every live process that does: ``hta worker``, task processes, ...)."""
    out = []
    for p in psutil.process_iter(["name", "cmdline", "cwd", "status"]):
        if p.info["name"] not in ("makeflow", "work_queue_worker") and not (any_name and marker):
            continue
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
        if marker is None or marker in text:
            out.append(p)
    return out


@pytest.fixture
def blast_copy(tmp_path: Path) -> Path:
    """A small copy of the BLAST-shaped workflow (widths 12/1/4) in a temp dir. The narrow
    stage's one align task (400 queries) outlasts a local preparation latency, so an
    autoscaler has idle workers to drain there (HTA's default holds them for the next
    stage, 30 latencies ahead: ``hta:hold_latencies=0`` drains them). The first stage's
    align tasks are small (10 queries): the narrow one must run well past twice their p90,
    measured while three of them share 2 cores, or it looks about to end at every decision
    and its idle workers are kept for the last stage (a CI run of 30 then 200 queries
    drained none). The first stage is 12 wide so that its serial work (~12 s) outlasts a
    preparation latency inflated by load: 6 wide, a CI run added no second worker and drained
    none. On an idle machine the same happens with L = 7 s (``--provision-delay 6``) and 6
    aligns of 30 queries: by the second decision the measured aligns leave nothing still
    waiting a latency ahead, so no worker would arrive in time to help."""
    src = ROOT / "workflows" / "blast"
    dst = tmp_path / "blast"
    dst.mkdir()
    for f in ("gendb.py", "seqio.py", "split.py", "align.py", "reduce.py", "make_makeflow.py"):
        shutil.copy(src / f, dst / f)
    subprocess.run(["python3", "make_makeflow.py", "12", "1", "4", "10,400,10"], cwd=dst, check=True)
    return dst


def run_hta(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None):
    """``hta ARGS``; ``hta makeflow`` runs, as makeflow does, in the current folder, so by
    default it is run from the workflow's folder, as a user would."""
    if cwd is None and args and args[0] == "makeflow":
        cwd = workflow_dir(list(args))
    return subprocess.run([*HTA, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def workflow_dir(args: list[str]) -> Path | None:
    """The folder of the workflow file named in an ``hta makeflow`` command line."""
    before = args[:args.index("--")] if "--" in args else args
    files = [Path(a) for a in before[1:] if not a.startswith("-") and Path(a).is_file()]
    return files[-1].resolve().parent if files else None


@pytest.fixture(scope="session", autouse=True)
def _work_queue_staging_removed():
    """CCTools' work_queue module makes a staging folder in TMPDIR when imported and removes
    it at exit (atexit), which a pytest-xdist worker's exit skips: removed here."""
    yield
    for name in ("work_queue", "ndcctools.work_queue"):
        folder = getattr(sys.modules.get(name), "staging_directory", None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def wait(cond, timeout: float = 60.0, every: float = 0.5):
    """Poll ``cond`` until it returns something true (returned) or ``timeout`` passes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    return cond()


class Master:
    """A real master in this process, pumped by a thread (wait() dispatches tasks)."""

    def __init__(self):
        from workqueue_bridge.wq import load

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
