"""The embedded default provider: workers are local processes.

Each worker is an ``hta worker`` child process (``work_queue_worker`` with the chosen
cores, memory and disk, and CSS beside it: the same entrypoint as in a pod). An optional
provisioning delay (fixed, plus jitter) is waited before the process starts, so the
preparation latency HTA plans with is exercised without a cluster.

Every process is tracked by PID, started in its own session with a parent-death signal
(and ``work_queue_worker`` with ``--parent-death``), so none survives HTA: not on a normal
exit, a failure, SIGTERM/Ctrl-C, nor when HTA is killed with SIGKILL. A worker is matched to
the master's list by its connection; one that exits before connecting is reported with the
line of its log (``logs/wN.log``) that says why.

It also samples the memory of each running task's processes (matched to the master's task
id by its sandbox ``t.<id>``), so a task the resource monitor kills for going over its
memory, whose summary makeflow deletes, still tells what it used.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hta.backends.base import CPU_UTILIZATION
from hta.backends.provider import JobState, JobStatus, Provider, in_order
from hta.model import Resources
from hta.node.launch import hta_executable, last_words, master_connection
from hta.node.worker import worker_command
from workqueue_bridge.makeflow import exit_description
from workqueue_bridge.processes import die_with_parent, stop
from workqueue_bridge.resources import whole_cores
from workqueue_bridge.snapshot import MasterSnapshot

#: CPU use is averaged over this window, as metrics-server's default resolution does
CPU_WINDOW_S = 15.0

log = logging.getLogger("hta.local")


@dataclass
class Process:
    """One worker process, from its launch on."""

    id: str
    shape: Resources
    log_path: Path
    workdir: Path
    launcher: asyncio.Task | None = None
    proc: asyncio.subprocess.Process | None = None
    #: Unix time it started; why it could not be launched; its connection once seen
    started_at: float | None = None
    launch_error: str | None = None
    address: str | None = None
    #: stopped by the pool (nothing more to report), and its workdir removed
    cancelled: bool = False
    cleaned: bool = False
    cpu: deque[tuple[float, float]] = field(default_factory=deque)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


class LocalProvider(Provider):
    name = "local"
    signals = frozenset({CPU_UTILIZATION})
    launched = "launched"

    def __init__(self, run_dir: Path, provision_delay_s: float = 0.0, provision_jitter_s: float = 0.0,
                 idle_timeout_s: int = 900, seed: int | None = None, css: bool | str = True):
        self.run_dir = Path(run_dir)
        self.provision_delay_s, self.provision_jitter_s = provision_delay_s, provision_jitter_s
        self.idle_timeout_s = idle_timeout_s
        self.css = css
        self._rng = random.Random(seed)
        self.procs: dict[str, Process] = {}
        self._seq = 0
        #: peak resident memory (MB) of each task's processes, by the master's task id
        self._task_memory_mb: dict[int, float] = {}
        self._said_oversubscribed = False

    async def start(self, master_host: str, master_port: int) -> None:
        await super().start(master_host, master_port)
        self._port = master_port
        (self.run_dir / "workers").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)

    # -- launch -------------------------------------------------------------------------
    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        self._say_if_oversubscribed(whole_cores(shape.cores) * n)
        ids = []
        for _ in range(n):
            self._seq += 1
            wid = f"w{self._seq}"
            p = self.procs[wid] = Process(wid, shape, self.run_dir / "logs" / f"{wid}.log",
                                          self.run_dir / "workers" / wid)
            delay = max(0.0, self.provision_delay_s + self._rng.uniform(-1, 1) * self.provision_jitter_s)
            p.launcher = asyncio.create_task(self._launch(p, delay + delay_s))
            ids.append(wid)
        return ids

    def _say_if_oversubscribed(self, more: int) -> None:
        """Once: the local workers would hold more cores than this host has. They share its
        cores, so each task runs slower than the cores its worker advertises let the policy
        plan for."""
        host = os.cpu_count() or 1
        live = [p for p in self.procs.values() if not p.cancelled and p.launch_error is None
                and (p.proc is None or p.proc.returncode is None)]
        held = sum(whole_cores(p.shape.cores) for p in live) + more
        if held > host and not self._said_oversubscribed:
            self._said_oversubscribed = True
            log.warning("local workers now hold %d cores on this host's %d: they share its cores, and their tasks run "
                        "slower than planned; lower --max-workers or --worker-cores to fit the host", held, host)

    async def _launch(self, p: Process, delay: float) -> None:
        """After the provisioning delay, ``hta worker`` in its own workdir, its output in its log.
        A launch that raises (no workdir, the fork fails) is a start failure, reported as such."""
        await asyncio.sleep(delay)
        try:
            p.workdir.mkdir(parents=True, exist_ok=True)
            with open(p.log_path, "wb") as out:
                p.proc = await asyncio.create_subprocess_exec(
                    *worker_command(self.master, cores=whole_cores(p.shape.cores), memory_mb=int(p.shape.memory_mb),
                                    disk_mb=int(p.shape.disk_mb), idle_timeout_s=self.idle_timeout_s,
                                    workdir=p.workdir, parent_death=True, css=self.css,
                                    css_log=self.run_dir / "logs" / f"{p.id}.css.jsonl", executable=hta_executable()),
                    stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=die_with_parent(signal.SIGHUP))  # HTA gone: stop now
        except Exception as exc:  # noqa: BLE001 — whatever stopped it, it is reported, not left pending
            p.launch_error = f"{type(exc).__name__}: {exc}"
            return
        p.started_at = time.time()

    # -- poll ---------------------------------------------------------------------------
    async def poll(self, snap: MasterSnapshot | None) -> dict[str, JobStatus]:
        listed = {w.address for w in snap.workers} if snap is not None else set()
        busy = {w.address for w in snap.workers if w.tasks_running} if snap is not None else set()
        out = {}
        for p in self.procs.values():
            if p.cancelled:
                continue
            if p.launch_error is not None or (p.proc is not None and not p.alive):
                why = f"could not be launched: {p.launch_error}" if p.launch_error else self._why_ended(p)
                out[p.id] = JobStatus(JobState.ENDED, why=why)
                if not p.cleaned:
                    p.cleaned = True
                    shutil.rmtree(p.workdir, ignore_errors=True)
            elif p.proc is not None:
                if p.address is None or (snap is not None and p.address not in listed):  # (a worker may reconnect)
                    p.address = master_connection(p.proc.pid, self._port) or p.address
                out[p.id] = JobStatus(JobState.RUNNING, address=p.address, running_since=p.started_at)
                if p.address in busy:
                    self._sample_task_memory(p)
            else:
                out[p.id] = JobStatus(JobState.PENDING)
        return out

    def _why_ended(self, p: Process) -> str:
        rc = p.proc.returncode if p.proc is not None else None
        if p.address is None:
            words = last_words(p.log_path)
            return f"exited before connecting ({exit_description(rc)})" + (f": {words}" if words else "")
        if rc is not None and 128 < rc < 128 + 65:  # 128 + N: its work_queue_worker (or hta worker) got signal N
            return f"its work_queue_worker was {exit_description(128 - rc)}"
        words = last_words(p.log_path) if rc else ""
        return f"its process ended ({exit_description(rc)})" + (f": {words}" if words else "")

    def phases(self, handle: str, requested: float, connected: float) -> dict[str, float]:
        started = self.procs[handle].started_at
        return in_order(requested, connected, [("provisioning", started or connected)], "starting+connecting")

    def cannot_start(self, n: int, handle: str, why: str) -> str:
        p = self.procs[handle]
        if p.launch_error is not None:
            return (f"workers cannot start: {n} in a row did not start; the last ({handle}) could not be launched: "
                    f"{p.launch_error}{self._hint(p.launch_error)}")
        rc = p.proc.returncode if p.proc is not None else None
        words = last_words(p.log_path)
        return (f"workers cannot start: {n} in a row exited before connecting to the master; the last ({handle}) "
                f"said: {words or exit_description(rc)} (log: {p.log_path}){self._hint(words)}")

    def _hint(self, words: str) -> str:
        low = words.lower()
        if "disk" in low:
            return f"; free disk space where workers run ({self.run_dir / 'workers'}) or lower --worker-disk"
        if "memory" in low:
            return "; lower --worker-memory"
        if "cores" in low:
            return "; lower --worker-cores"
        return "; fix that and run again"

    def seen_connected(self, handle: str) -> bool:
        try:
            return "connected to manager" in self.procs[handle].log_path.read_text(errors="replace")
        except OSError:
            return False

    def _sample_task_memory(self, p: Process) -> None:
        """Peak resident memory of each task's process tree; a task is the worker's child
        whose working directory is its sandbox ``t.<task id>``."""
        try:
            tops = [c for q in psutil.Process(p.proc.pid).children() for c in q.children()]  # type: ignore[union-attr]
        except psutil.Error:
            return
        for top in tops:
            try:
                name = os.path.basename(top.cwd())
                if not name.startswith("t."):
                    continue
                rss = 0
                for q in _tree(top.pid):
                    try:
                        rss += q.memory_info().rss
                    except psutil.Error:
                        pass
                task_id = int(name[2:])
            except (psutil.Error, ValueError):
                continue
            self._task_memory_mb[task_id] = max(rss / 2**20, self._task_memory_mb.get(task_id, 0.0))

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        return self._task_memory_mb.get(task_id)

    async def cpu_utilization(self, cores: dict[str, float]) -> dict[str, float] | None:
        """CPU seconds of each worker's process tree (``hta worker`` → ``work_queue_worker`` →
        its tasks, the reaped ones included) over the last ``CPU_WINDOW_S`` × its cores."""
        out, now = {}, time.time()
        for wid, n in cores.items():
            p = self.procs.get(wid)
            if p is None or p.proc is None or not p.alive or n <= 0:
                continue
            tree = _tree(p.proc.pid)
            if not tree:
                continue
            cpu = 0.0
            for q in tree:
                try:
                    t = q.cpu_times()
                except psutil.Error:
                    continue
                cpu += t.user + t.system + t.children_user + t.children_system
            if not p.cpu:
                try:
                    p.cpu.append((tree[0].create_time(), 0.0))
                except psutil.Error:
                    continue
            p.cpu.append((now, cpu))
            while len(p.cpu) > 2 and now - p.cpu[1][0] >= CPU_WINDOW_S:
                p.cpu.popleft()
            t0, c0 = p.cpu[0]
            if now > t0:
                out[wid] = max(0.0, (cpu - c0) / ((now - t0) * n))
        return out

    # -- cancel -------------------------------------------------------------------------
    async def cancel(self, handles: list[str], force: bool = False) -> dict[str, str]:
        await asyncio.gather(*(self._stop(self.procs[h], force) for h in handles if h in self.procs))
        return {}

    async def kill(self, handles: list[str]) -> dict[str, str]:
        """A stalled or hung worker: its process tree is killed at once (it answers no SIGTERM)."""
        for h in handles:
            p = self.procs.get(h)
            if p is not None and p.proc is not None:
                _kill(_tree(p.proc.pid))
        return await self.cancel(handles, force=True)

    async def _stop(self, p: Process, force: bool, grace_s: float = 5.0) -> None:
        """SIGTERM: ``hta worker`` drains (exits once its tasks ended); with ``force`` a second
        SIGTERM makes it stop at once (its tasks go back to the master's queue)."""
        p.cancelled = p.cleaned = True
        if p.launcher is not None and not p.launcher.done():
            p.launcher.cancel()
            try:
                await p.launcher
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():  # _stop itself was cancelled, not only the launch
                    raise
        if p.proc is not None:
            tree = _tree(p.proc.pid)  # a stopped worker's tasks ignore SIGTERM and outlive the process group
            await stop(p.proc, grace_s, signals=2 if force else 1)
            _kill(tree[1:])
        shutil.rmtree(p.workdir, ignore_errors=True)

    async def stop_all(self) -> None:
        # the run is over (or interrupted): stop at once, the tasks are the master's to forget
        await asyncio.gather(*(self._stop(p, force=True) for p in self.procs.values()
                               if p.alive or (p.launcher is not None and not p.launcher.done())))
        shutil.rmtree(self.run_dir / "workers", ignore_errors=True)


def from_options(options, run):
    """The registry's factory (:mod:`hta.backends`)."""
    from hta.backends.pool import WorkerPool

    return WorkerPool(LocalProvider(run.run_dir, provision_delay_s=options.provision_delay_s,
                                    provision_jitter_s=options.provision_jitter_s,
                                    idle_timeout_s=options.idle_timeout_s, css=options.css), epoch=run.epoch)
