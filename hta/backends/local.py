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
"""

from __future__ import annotations

import asyncio
import signal
import random
import shutil
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hta.backends.base import CPU_UTILIZATION
from hta.model import PendingWorker, Resources
from hta.node.worker import worker_command
from hta.processes import die_with_parent, stop
from hta.scaling_log import WorkerRecord
from workqueue_bridge.status import MasterSnapshot


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
    events: list[WorkerRecord] = field(default_factory=list)
    cpu: "CpuMeter" = field(default_factory=lambda: CpuMeter())


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


class LocalBackend:
    name = "local"
    signals = frozenset({CPU_UTILIZATION})
    signals_why = ""
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

    # -- lifecycle -----------------------------------------------------------
    async def start(self, master_host: str, master_port: int) -> None:
        self._host, self._port = master_host, master_port
        (self.run_dir / "workers").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers.values() if w.proc is not None and w.proc.returncode is None]

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        ids = []
        for _ in range(n):
            self._seq += 1
            w = LocalWorker(id=f"w{self._seq}", shape=shape, requested_at=now)
            w.events.append(WorkerRecord(t=now, worker=w.id, event="requested", cores=shape.cores))
            delay = max(0.0, self.provision_delay_s + self._rng.uniform(-1, 1) * self.provision_jitter_s)
            w.launcher = asyncio.create_task(self._launch(w, delay, now))
            self._workers[w.id] = w
            ids.append(w.id)
        return ids

    async def _launch(self, w: LocalWorker, delay: float, requested_at: float) -> None:
        await asyncio.sleep(delay)
        w.workdir = self.run_dir / "workers" / w.id
        w.workdir.mkdir(parents=True, exist_ok=True)
        out = open(self.run_dir / "logs" / f"{w.id}.log", "wb")
        try:
            w.proc = await asyncio.create_subprocess_exec(
                *worker_command(f"{self._host}:{self._port}", cores=int(w.shape.cores),
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
        w.started_at = requested_at + delay
        w.state = "starting"

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
        seen = {w.address for w in snap.workers}
        for w in self._workers.values():
            if w.state == "starting":
                addr = self._address_of(w)
                if addr and addr in seen:
                    w.address, w.connected_at, w.state = addr, now, "connected"
                    phases = {"provisioning": round((w.started_at or now) - w.requested_at, 3),
                              "starting+connecting": round(now - (w.started_at or now), 3)}
                    w.events.append(WorkerRecord(t=now, worker=w.id, event="connected", cores=w.shape.cores,
                                                 latency_s=round(now - w.requested_at, 3), phases=phases))
            if w.state in ("starting", "connected") and w.proc is not None and w.proc.returncode is not None:
                w.state = "gone"
                w.events.append(WorkerRecord(t=now, worker=w.id, event="lost", cores=w.shape.cores))
        return self._flush()

    def _flush(self) -> list[WorkerRecord]:
        out = []
        for w in self._workers.values():
            out.extend(w.events)
            w.events.clear()
        return out

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
            w.events.append(WorkerRecord(t=now, worker=w.id, event="drained", cores=w.shape.cores))
        return self._flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        running = {w.address: w.tasks_running for w in snap.workers}
        for wid in ids:
            w = self._workers.get(wid)
            if w is None or w.state == "gone":
                continue
            lost = running.get(w.address or "", 0)
            await self._stop(w, force=True)
            w.events.append(WorkerRecord(t=now, worker=w.id, event="removed", cores=w.shape.cores, tasks_lost=lost))
        return self._flush()

    async def _stop(self, w: LocalWorker, grace_s: float = 5.0, force: bool = False) -> None:
        """SIGTERM: ``hta worker`` drains (exits once its tasks ended); with ``force`` a second
        SIGTERM makes it stop at once (its tasks go back to the master's queue)."""
        w.state = "stopping"
        if w.launcher is not None and not w.launcher.done():
            w.launcher.cancel()
            try:
                await w.launcher
            except (asyncio.CancelledError, Exception):
                pass
        if w.proc is not None:
            await stop(w.proc, grace_s, signals=2 if force else 1)
        w.state = "gone"
        if w.workdir is not None:
            shutil.rmtree(w.workdir, ignore_errors=True)

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        live = [w for w in self._workers.values() if w.state != "gone"]
        # the run is over (or interrupted): stop at once, the tasks are the master's to forget
        await asyncio.gather(*(self._stop(w, force=True) for w in live))
        for w in live:
            w.events.append(WorkerRecord(t=now, worker=w.id, event="stopped", cores=w.shape.cores))
        shutil.rmtree(self.run_dir / "workers", ignore_errors=True)
        return self._flush()


def from_options(options, run) -> LocalBackend:
    """The registry's factory (:mod:`hta.backends`)."""
    return LocalBackend(run.run_dir, provision_delay_s=options.provision_delay_s,
                        provision_jitter_s=options.provision_jitter_s, idle_timeout_s=options.idle_timeout_s)
