"""The embedded default backend: workers are local processes.

Each worker is an ``hta worker`` child process (which runs
``work_queue_worker`` with the chosen cores, memory and disk, and CSS beside
it — the same entrypoint as in a pod). An optional provisioning delay (fixed, plus optional
jitter) is waited before the process starts, so the preparation latency that
HTA measures and plans with is exercised without a cluster.

Every process is tracked by PID, started in its own session with a
parent-death signal (and ``work_queue_worker`` with ``--parent-death``), so
none survives HTA: not on a normal exit, not on a failure,
not on SIGTERM/Ctrl-C, and not even when HTA is killed with SIGKILL.

Faults it handles:

- A worker that exits before it connects (a full disk, a bad option) is
  ``failed``, with its last words from ``logs/wN.log``; the next launches back
  off (1, 2, 4… s), and after a few in a row the run ends with that line
  (:mod:`hta.backends.lifecycle`) instead of relaunching forever.
- A connected worker whose process ends is ``lost``, with the tasks the master
  last showed on it: the master runs them again.
- A connected worker the master stopped listing while its process lives (the
  master's keepalive gave up on it: a stopped or hung worker) is killed with
  its tasks and reported ``lost``; the policy replaces it if it is still needed.

It also samples the memory of each running task's processes (matched to the
master's task id by its sandbox ``t.<id>``), so a task the resource monitor
kills for going over its memory, whose summary makeflow deletes, still tells
what it used (:meth:`LocalBackend.task_peak_memory_mb`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hta.backends.base import CPU_UTILIZATION, WorkerBackend
from hta.backends.lifecycle import Lifecycle, WorkerLife, running_by_worker
from hta.model import PendingWorker, Resources
from hta.node.worker import worker_command
from hta.scaling_log import WorkerRecord
from workqueue_bridge.makeflow import exit_description
from workqueue_bridge.processes import die_with_parent, stop
from workqueue_bridge.resources import whole_cores
from workqueue_bridge.snapshot import MasterSnapshot

log = logging.getLogger("hta.local")

#: the longest wait before launching again after start failures
MAX_BACKOFF_S = 30.0


@dataclass
class LocalWorker:
    id: str
    shape: Resources
    requested_at: float
    started_at: float | None = None
    connected_at: float | None = None
    address: str | None = None
    proc: asyncio.subprocess.Process | None = None
    launcher: asyncio.Task | None = None
    state: str = "provisioning"  # provisioning | starting | connected | stopping | gone
    workdir: Path | None = None
    cpu: CpuMeter = field(default_factory=lambda: CpuMeter())
    log_path: Path | None = None
    life: WorkerLife = field(default_factory=WorkerLife)


#: words of a worker's log line that says what went wrong
_TROUBLE = re.compile(r"error|fatal|less than|cannot|can't|could not|couldn't|failed|no space|denied|not found|"
                      r"refused|invalid|unable|traceback|killed", re.I)


def _log_says_connected(path: Path | None) -> bool:
    try:
        return path is not None and "connected to manager" in path.read_text(errors="replace")
    except OSError:
        return False


def last_words(path: Path | None) -> str:
    """The line of a worker's log that says why it stopped (else its last line)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()] if path else []
    except OSError:
        return ""
    lines = [ln for ln in lines if not ln.startswith('{"hta_worker"')]
    for ln in reversed(lines):
        if _TROUBLE.search(re.sub(r"/\S+", "", ln)):  # words, not paths that happen to hold them
            return ln
    return lines[-1] if lines else ""


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (works on stopped processes too)."""
    try:
        root = psutil.Process(pid)
        victims = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in victims:
        try:
            p.kill()
        except psutil.Error:
            pass


def hta_executable() -> list[str]:
    """How to run ``hta`` itself: the console script next to this Python, else the module."""
    exe = Path(sys.executable).with_name("hta")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hta.cli"]


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used so far by a process and all its descendants, the ones that ended
    and were reaped included (they are in their parent's ``children_*`` times)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


#: CPU use is averaged over this window, as metrics-server's default resolution does
CPU_WINDOW_S = 15.0


@dataclass
class CpuMeter:
    """A worker's CPU utilisation: CPU seconds of its process tree over the last
    ``CPU_WINDOW_S`` wall seconds × its cores (what an HPA averages over pods)."""

    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def read(self, pid: int, cores: float, now: float) -> float | None:
        cpu = tree_cpu_seconds(pid)
        if cpu is None or cores <= 0:
            return None
        if not self.samples:
            try:
                self.samples.append((psutil.Process(pid).create_time(), 0.0))
            except psutil.Error:
                return None
        self.samples.append((now, cpu))
        while len(self.samples) > 2 and now - self.samples[1][0] >= CPU_WINDOW_S:
            self.samples.popleft()
        t0, c0 = self.samples[0]
        return max(0.0, (cpu - c0) / ((now - t0) * cores)) if now > t0 else None


class LocalBackend(WorkerBackend):
    name = "local"
    signals = frozenset({CPU_UTILIZATION})
    #: any free port: nothing outside this host needs to find the master again
    default_port = 0

    def __init__(
        self,
        run_dir: Path,
        provision_delay_s: float = 0.0,
        provision_jitter_s: float = 0.0,
        idle_timeout_s: int = 900,
        seed: int | None = None,
        css: bool = True,
    ):
        self.run_dir = Path(run_dir)
        self.provision_delay_s = provision_delay_s
        self.provision_jitter_s = provision_jitter_s
        self.idle_timeout_s = idle_timeout_s
        self.css = css
        self._rng = random.Random(seed)
        self._workers: dict[str, LocalWorker] = {}
        self._seq = 0
        self._host = "127.0.0.1"
        self._port = 0
        self.lifecycle = Lifecycle()
        #: peak resident memory (MB) of each task's processes, by the master's task id
        self._task_memory_mb: dict[int, float] = {}

    @property
    def fatal(self) -> str | None:
        return self.lifecycle.fatal

    @property
    def start_failures(self) -> int:
        return self.lifecycle.start_failures

    # -- lifecycle -----------------------------------------------------------
    async def start(self, master_host: str, master_port: int) -> None:
        self._host, self._port = master_host, master_port
        (self.run_dir / "workers").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers.values() if w.proc is not None and w.proc.returncode is None]

    def backoff_s(self) -> float:
        """Extra wait before a launch after workers failed to start: 1, 2, 4… s."""
        if not self.start_failures:
            return 0.0
        return min(MAX_BACKOFF_S, 2.0 ** (self.start_failures - 1))

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        ids: list[str] = []
        if self.fatal:
            return ids
        for _ in range(n):
            self._seq += 1
            w = LocalWorker(id=f"w{self._seq}", shape=shape, requested_at=now,
                            log_path=self.run_dir / "logs" / f"w{self._seq}.log")
            self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="requested", cores=shape.cores))
            delay = max(0.0, self.provision_delay_s + self._rng.uniform(-1, 1) * self.provision_jitter_s)
            delay += self.backoff_s()
            w.launcher = asyncio.create_task(self._launch(w, delay, now))
            self._workers[w.id] = w
            ids.append(w.id)
        return ids

    async def _launch(self, w: LocalWorker, delay: float, requested_at: float) -> None:
        """After the provisioning delay, start the worker's process. A launch that raises (its
        workdir or log file cannot be made, the fork fails) is a start failure, as a worker that
        exits before connecting is: left to itself it stayed provisioning for good, pending
        against --max-workers, never reported and never backed off from."""
        await asyncio.sleep(delay)
        try:
            await self._spawn(w)
        except Exception as exc:  # noqa: BLE001 — whatever stopped it, it is reported, not left pending
            self._start_failed(w, requested_at + delay, cause=f"{type(exc).__name__}: {exc}")
            return
        w.started_at = requested_at + delay
        w.state = "starting"

    async def _spawn(self, w: LocalWorker) -> None:
        """``hta worker`` in its own workdir, its output in its log."""
        w.workdir = self.run_dir / "workers" / w.id
        w.workdir.mkdir(parents=True, exist_ok=True)
        assert w.log_path is not None  # (set when it was asked for)
        out = open(w.log_path, "wb")
        try:
            w.proc = await asyncio.create_subprocess_exec(
                *worker_command(f"{self._host}:{self._port}", cores=whole_cores(w.shape.cores),
                                memory_mb=int(w.shape.memory_mb), disk_mb=int(w.shape.disk_mb),
                                idle_timeout_s=self.idle_timeout_s, workdir=w.workdir, parent_death=True,
                                css=self.css, css_log=self.run_dir / "logs" / f"{w.id}.css.jsonl",
                                executable=hta_executable()),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGHUP),  # HTA gone: stop now
            )
        finally:
            out.close()

    # -- observation ---------------------------------------------------------
    def _address_of(self, w: LocalWorker) -> str | None:
        """The worker's end of its connection to the master, as the master names it."""
        if w.proc is None or w.proc.returncode is not None:
            return None
        try:  # hta worker → work_queue_worker: the connection is the child's
            procs = [psutil.Process(w.proc.pid)]
            procs += procs[0].children()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        for p in procs:
            try:
                conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            for c in conns:
                if c.raddr and c.raddr.port == self._port and c.status == psutil.CONN_ESTABLISHED:
                    return f"{c.laddr.ip}:{c.laddr.port}"
        return None

    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        listed = {w.address: w for w in snap.workers}
        running = running_by_worker(snap)
        for w in self._workers.values():
            if w.state == "starting":
                if w.proc is not None and w.proc.returncode is not None:
                    self._start_failed(w, now)
                    continue
                addr = self._address_of(w)
                if addr and addr in listed:
                    w.address, w.connected_at, w.state = addr, now, "connected"
                    self.lifecycle.connected()
                    started = now if w.started_at is None else w.started_at  # (0.0: the run's first second)
                    phases = {"provisioning": round(started - w.requested_at, 3),
                              "starting+connecting": round(now - started, 3)}
                    self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="connected",
                                                 cores=whole_cores(w.shape.cores),  # what it advertises
                                                 latency_s=round(now - w.requested_at, 3), phases=phases))
            if w.state != "connected":
                continue
            if w.proc is not None and w.proc.returncode is not None:
                rc = w.proc.returncode
                if 128 < rc < 128 + 65:  # 128 + N: its work_queue_worker (or hta worker itself) stopped by signal N
                    why = f"its work_queue_worker was {exit_description(128 - rc)}"
                else:
                    words = last_words(w.log_path) if rc else ""
                    why = f"its process ended ({exit_description(rc)})" + (f": {words}" if words else "")
                rec = self._lost(w, now, snap.taken_at, why)
                if rec.tasks_lost:
                    log.warning("worker %s went away with %d running task(s) (%s): the master runs them again",
                                w.id, rec.tasks_lost, why)
            elif w.address in listed:
                self.lifecycle.listed(w.life, running.get(w.address, {}))
                if w.life.tasks:
                    self._sample_task_memory(w)
            elif self.lifecycle.dropped(w.life, snap.taken_at):
                # the master gave up on it (keepalive): a stopped or hung worker. Its tasks are
                # back in the master's queue; kill it so it cannot come back as a stranger.
                if w.proc is not None:
                    kill_tree(w.proc.pid)
                rec = self._lost(w, now, w.life.missing_since or snap.taken_at,
                                 "stopped answering the master (stalled or hung): killed and replaced")
                log.warning("worker %s stopped answering the master: killed it; its %d task(s) run again "
                            "elsewhere", w.id, rec.tasks_lost)
        return self.lifecycle.flush()

    def _start_failed(self, w: LocalWorker, now: float, cause: str | None = None) -> None:
        """``w`` never connected: its process exited first (its log says why), or, with
        ``cause``, it could not be launched at all. Either is ``failed``, counts towards the
        back-off, and after a few in a row ends the run (``fatal``)."""
        w.state = "gone"
        if cause is None:
            rc = w.proc.returncode if w.proc is not None else None
            words = last_words(w.log_path)
            why = f"exited before connecting ({exit_description(rc)})" + (f": {words}" if words else "")

            def fatal(n: int) -> str:
                return (f"workers cannot start: {n} in a row exited before connecting to the master; the last "
                        f"({w.id}) said: {words or exit_description(rc)} (log: {w.log_path}){self._hint(words)}")
        else:
            words = cause
            why = f"could not be launched: {cause}"

            def fatal(n: int) -> str:
                return (f"workers cannot start: {n} in a row did not start; the last ({w.id}) could not be "
                        f"launched: {cause}{self._hint(words)}")
        self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="failed", cores=w.shape.cores, reason=why))
        if w.workdir is not None:
            shutil.rmtree(w.workdir, ignore_errors=True)
        n = self.lifecycle.start_failed(fatal)
        if self.fatal is None and n in (1, self.lifecycle.max_start_failures - 1):
            log.warning("worker %s %s; next launches back off%s", w.id, why,
                        f" (log: {w.log_path})" if cause is None else "")

    def _hint(self, words: str) -> str:
        low = words.lower()
        if "disk" in low:
            return f"; free disk space where workers run ({self.run_dir / 'workers'}) or lower --worker-disk"
        if "memory" in low:
            return "; lower --worker-memory"
        if "cores" in low:
            return "; lower --worker-cores"
        return "; fix that and run again"

    def _lost(self, w: LocalWorker, now: float, at: float, reason: str) -> WorkerRecord:
        """``w`` went away while connected; its last known tasks are lost work."""
        w.state = "gone"
        rec = self.lifecycle.ended(w.life, t=now, worker=w.id, event="lost", cores=w.shape.cores, at=at, reason=reason)
        if w.workdir is not None:
            shutil.rmtree(w.workdir, ignore_errors=True)
        return rec

    def _sample_task_memory(self, w: LocalWorker) -> None:
        """Peak resident memory of each task's process tree; a task is the worker's child
        whose working directory is its sandbox ``t.<task id>``."""
        if w.proc is None:
            return
        try:
            tops = [c for p in psutil.Process(w.proc.pid).children() for c in p.children()]
        except psutil.Error:
            return
        for top in tops:
            try:
                name = os.path.basename(top.cwd())
                if not name.startswith("t."):
                    continue
                task_id = int(name[2:])
                rss = top.memory_info().rss
                for c in top.children(recursive=True):
                    try:
                        rss += c.memory_info().rss
                    except psutil.Error:
                        pass
            except (psutil.Error, ValueError):
                continue
            mb = rss / 2**20
            if mb > self._task_memory_mb.get(task_id, 0.0):
                self._task_memory_mb[task_id] = mb

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        """The most resident memory the processes of the master's task ``task_id`` were seen
        using (sampled at each refresh), or None if it was never seen running."""
        return self._task_memory_mb.get(task_id)

    def worker_ids(self) -> dict[str, str]:
        return {w.address: w.id for w in self._workers.values() if w.address and w.state == "connected"}

    def retired(self) -> set[str]:
        return {w.address for w in self._workers.values() if w.address and w.state in ("stopping", "gone")}

    async def cpu_utilization(self) -> dict[str, float] | None:
        """Measured from each connected worker's process tree (``hta worker`` →
        ``work_queue_worker`` → its tasks), over the time since the last read."""
        out = {}
        now = time.time()
        for w in self._workers.values():
            if w.state == "connected" and w.proc is not None and w.proc.returncode is None:
                u = w.cpu.read(w.proc.pid, w.shape.cores, now)
                if u is not None:
                    out[w.id] = u
        return out

    def pending(self) -> list[PendingWorker]:
        return [
            PendingWorker(id=w.id, requested_at=w.requested_at, shape=w.shape)
            for w in self._workers.values()
            if w.state in ("provisioning", "starting")
        ]

    # -- scale down ----------------------------------------------------------
    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.address for w in snap.workers if w.tasks_running > 0}
        for wid in ids:
            w = self._workers.get(wid)
            if w is None or w.state != "connected" or w.address in busy:
                continue
            await self._stop(w)
            self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="drained", cores=w.shape.cores))
        return self.lifecycle.flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        for wid in ids:
            w = self._workers.get(wid)
            if w is None or w.state == "gone":
                continue
            await self._stop(w, force=True)
            self.lifecycle.ended(w.life, t=now, worker=w.id, event="removed", cores=w.shape.cores, at=snap.taken_at)
        return self.lifecycle.flush()

    async def _stop(self, w: LocalWorker, grace_s: float = 5.0, force: bool = False) -> None:
        """SIGTERM: ``hta worker`` drains (exits once its tasks ended); with ``force`` a second
        SIGTERM makes it stop at once (its tasks go back to the master's queue)."""
        w.state = "stopping"
        if w.launcher is not None and not w.launcher.done():
            w.launcher.cancel()
            try:
                await w.launcher
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():  # _stop itself was cancelled, not only the launch
                    raise
            except Exception:  # noqa: BLE001 — the launch's own failure: it is stopped either way
                pass
        if w.proc is not None:
            try:  # a stopped (SIGSTOP) worker's tasks ignore SIGTERM and outlive the process group
                tree = psutil.Process(w.proc.pid).children(recursive=True)
            except psutil.Error:
                tree = []
            await stop(w.proc, grace_s, signals=2 if force else 1)
            for p in tree:
                try:
                    p.kill()
                except psutil.Error:
                    pass
        w.state = "gone"
        if w.workdir is not None:
            shutil.rmtree(w.workdir, ignore_errors=True)

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        live = [w for w in self._workers.values() if w.state != "gone"]
        for w in live:  # connected and done between two looks at the master (a short run)
            if w.state == "starting" and _log_says_connected(w.log_path):
                self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="connected", cores=whole_cores(w.shape.cores),
                                             reason="seen in its log only: the run ended before the next look"))
        # the run is over (or interrupted): stop at once, the tasks are the master's to forget
        await asyncio.gather(*(self._stop(w, force=True) for w in live))
        for w in live:
            self.lifecycle.record(WorkerRecord(t=now, worker=w.id, event="stopped", cores=w.shape.cores))
        shutil.rmtree(self.run_dir / "workers", ignore_errors=True)
        return self.lifecycle.flush()


def from_options(options, run) -> LocalBackend:
    """The registry's factory (:mod:`hta.backends`)."""
    return LocalBackend(run.run_dir, provision_delay_s=options.provision_delay_s,
                        provision_jitter_s=options.provision_jitter_s, idle_timeout_s=options.idle_timeout_s)
