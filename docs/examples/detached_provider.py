"""An example provider: each worker is a detached ``hta worker`` process.

It is what an in-house batch system's provider looks like, with ``subprocess`` standing in
for the batch system's submit, status and cancel commands. The worker pool does the rest.
Register it in your package's ``setup.cfg``::

    [options.entry_points]
    hta.backends =
        detached = detached_provider:from_options

then run ``hta makeflow --backend detached WORKFLOW``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from pathlib import Path

from hta.backends.pool import WorkerPool
from hta.backends.provider import JobState, JobStatus, Provider
from hta.model import Resources
from hta.node.launch import hta_executable, master_connection
from hta.node.worker import worker_command
from workqueue_bridge.resources import whole_cores


class DetachedProvider(Provider):
    name = "detached"

    def __init__(self, run_dir: Path, idle_timeout_s: int, master_host: str | None = None):
        self.run_dir, self.idle_timeout_s, self.master_host = run_dir, idle_timeout_s, master_host
        self.jobs: dict[str, subprocess.Popen] = {}

    async def start(self, master_host: str, master_port: int) -> None:
        # where the workers reach the master: --master-host, for workers on other hosts
        await super().start(self.master_host or master_host, master_port)

    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        """Submit ``n`` workers (a batch queue may ignore ``delay_s``, the back-off after failures)."""
        await asyncio.sleep(delay_s)
        handles = []
        for _ in range(n):
            handle = f"d{len(self.jobs) + 1}"  # the worker's name in every record
            workdir = self.run_dir / handle
            workdir.mkdir(parents=True, exist_ok=True)
            command = worker_command(self.master, cores=whole_cores(shape.cores), memory_mb=int(shape.memory_mb),
                                     disk_mb=int(shape.disk_mb), idle_timeout_s=self.idle_timeout_s,
                                     workdir=workdir, executable=hta_executable())
            with open(workdir / "worker.log", "wb") as log:
                self.jobs[handle] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                     start_new_session=True)
            handles.append(handle)
        return handles

    async def poll(self, snap) -> dict[str, JobStatus]:
        """Each job's state, and the address its worker reached the master from."""
        port = int(self.master.rsplit(":", 1)[1])
        out = {}
        for handle, job in self.jobs.items():
            if job.poll() is None:
                out[handle] = JobStatus(JobState.RUNNING, address=master_connection(job.pid, port))
            else:
                out[handle] = JobStatus(JobState.ENDED, why=f"its process ended (exit {job.returncode})")
        return out

    async def cancel(self, handles: list[str], force: bool = False) -> dict[str, str]:
        """SIGTERM drains an idle ``hta worker``; a second one stops a busy one at once."""
        async def stop(job: subprocess.Popen) -> None:
            for _ in range(2 if force else 1):
                job.terminate()
                await asyncio.sleep(0.05)
            try:
                await asyncio.to_thread(job.wait, 10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)

        await asyncio.gather(*(stop(j) for h in handles if (j := self.jobs.get(h)) is not None and j.poll() is None))
        return {}

    async def stop_all(self) -> None:
        await self.cancel(list(self.jobs), force=True)


def from_options(options, run) -> WorkerPool:
    """The entry point: HTA's backend options and the run, in; the pool over this provider, out."""
    return WorkerPool(DetachedProvider(Path(run.run_dir) / "detached", options.idle_timeout_s, options.master_host),
                      epoch=run.epoch)
