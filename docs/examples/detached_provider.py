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
import subprocess
import sys
from pathlib import Path

from hta.backends.pool import WorkerPool
from hta.backends.provider import JobState, JobStatus, Provider
from hta.model import Resources
from hta.node.launch import hta_executable, master_connection
from hta.node.worker import worker_command


class DetachedProvider(Provider):
    name = "detached"

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.jobs: dict[str, subprocess.Popen] = {}

    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        """Submit ``n`` workers; the handle is the worker's name in every record."""
        handles = []
        for _ in range(n):
            handle = f"d{len(self.jobs) + 1}"
            workdir = self.run_dir / handle
            workdir.mkdir(parents=True, exist_ok=True)
            command = worker_command(self.master, cores=int(shape.cores), memory_mb=int(shape.memory_mb),
                                     disk_mb=int(shape.disk_mb), idle_timeout_s=900, workdir=workdir,
                                     css=False, executable=hta_executable())
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
        """SIGTERM drains an idle ``hta worker``; a second one stops it at once."""
        for handle in handles:
            job = self.jobs.get(handle)
            if job is not None and job.poll() is None:
                job.terminate()
                if force:
                    job.terminate()
                try:
                    await asyncio.to_thread(job.wait, 10)
                except subprocess.TimeoutExpired:
                    job.kill()
        return {}

    async def stop_all(self) -> None:
        await self.cancel(list(self.jobs), force=True)


def from_options(options, run) -> WorkerPool:
    """The entry point: HTA's backend options and the run, in; the pool over this provider, out."""
    return WorkerPool(DetachedProvider(Path(run.run_dir) / "detached"), epoch=run.epoch)


if __name__ == "__main__":
    sys.exit("a provider is loaded by hta makeflow --backend NAME, not run")
