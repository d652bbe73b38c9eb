"""Launch and stop the real ``makeflow -T wq``.

Makeflow always runs its own Work Queue master; HTA starts it as a child in
the workflow's directory with resource monitoring on, a unique project name,
a catalog on this host (so nothing tries to reach the public catalog) and a
port it picks itself (``-p 0 -Z portfile``), then reads that master.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import uuid
from pathlib import Path

from hta.processes import die_with_parent, stop

#: makeflow options HTA sets itself; a user passing them would break the run
RESERVED = {"-T", "--batch-type", "-p", "--port", "-Z", "--port-file", "-N", "--project-name",
            "--monitor", "-l", "--makeflow-log"}


class MakeflowError(RuntimeError):
    """makeflow could not start or failed; the message is one line for the user."""


#: makeflow dies with HTA (even when HTA is SIGKILLed) — by SIGKILL, not SIGTERM:
#: on SIGTERM makeflow aborts every rule in its log, so a restarted HTA could not
#: resume the workflow; killed, it leaves the rules "running" and a restarted
#: makeflow resubmits them.
MAKEFLOW_PARENT_DEATH_SIGNAL = signal.SIGKILL


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def check_installed() -> None:
    for tool in ("makeflow", "work_queue_worker"):
        if shutil.which(tool) is None:
            raise MakeflowError(
                f"{tool} not found on PATH: run scripts/setup.sh (installs Debian's coop-computing-tools)"
            )


def check_extra_args(args: list[str]) -> None:
    for a in args:
        key = a.split("=", 1)[0]
        if key in RESERVED:
            raise MakeflowError(f"makeflow option {key} is set by hta itself: remove it from the extra arguments")


class MakeflowRun:
    """One makeflow process and the files it writes."""

    def __init__(
        self,
        workflow: Path,
        run_dir: Path,
        extra_args: list[str] | None = None,
        catalog: str = "127.0.0.1:9097",
        project: str | None = None,
        port: int = 0,
    ):
        self.workflow = Path(workflow).resolve()
        self.cwd = self.workflow.parent
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args or [])
        self.catalog = catalog
        self.project = project or f"hta-{uuid.uuid4().hex[:10]}"
        self.requested_port = port
        self.port: int | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.monitor_dir = self.run_dir / "monitor"
        self.output_path = self.run_dir / "makeflow.out"
        self.log_path = self.cwd / f"{self.workflow.name}.makeflowlog"

    def command(self) -> list[str]:
        # -Z picks a random port whatever -p says: use it only when no port is asked for
        port = ["-p", str(self.requested_port)] if self.requested_port else ["-p", "0", "-Z", str(self.run_dir / "port")]
        return [
            "makeflow", "-T", "wq", *port,
            "-N", self.project, "-C", self.catalog,
            # makeflow refuses absolute "remote names": give the monitor dir relative to its cwd
            f"--monitor={os.path.relpath(self.monitor_dir, self.cwd)}",
            *self.extra_args,
            self.workflow.name,
        ]

    async def start(self, timeout_s: float = 60.0) -> int:
        """Start makeflow and return its master's port once it listens."""
        check_installed()
        check_extra_args(self.extra_args)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        portfile = self.run_dir / "port"
        portfile.unlink(missing_ok=True)
        if self.requested_port:
            await self._wait_port_free(timeout_s)
        out = open(self.output_path, "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command(), cwd=self.cwd, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent(MAKEFLOW_PARENT_DEATH_SIGNAL),
            )
        finally:
            out.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self.requested_port and _listening(self.requested_port):
                self.port = self.requested_port
                return self.port
            if portfile.exists() and portfile.read_text().strip():
                self.port = int(portfile.read_text().split()[0])
                return self.port
            if self.proc.returncode is not None:
                raise MakeflowError(f"makeflow exited ({self.proc.returncode}) before its master started: "
                                    f"{self.last_error()}")
            await asyncio.sleep(0.1)
        await self.stop()
        raise MakeflowError(f"makeflow did not open its master port within {timeout_s:.0f}s: {self.last_error()}")

    async def _wait_port_free(self, timeout_s: float) -> None:
        """A previous makeflow on this port (a killed HTA's) may still be going away."""
        import socket

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("", self.requested_port))
                    return
                except OSError:
                    if loop.time() > deadline:
                        raise MakeflowError(f"port {self.requested_port} is in use: choose another with --port")
            await asyncio.sleep(0.5)

    def output_tail(self, n: int = 20) -> list[str]:
        try:
            return self.output_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def last_error(self) -> str:
        """Makeflow's own words for what went wrong (its last meaningful line)."""
        lines = [line.strip() for line in self.output_tail(40) if line.strip()]
        for line in reversed(lines):
            low = line.lower()
            if any(w in low for w in ("error", "failed", "couldn't", "could not", "no such", "abort", "syntax")):
                return line
        return lines[-1] if lines else "(no output)"

    async def wait(self) -> int:
        """makeflow's exit code; death by signal N is reported as 128 + N, as a shell does."""
        assert self.proc is not None
        rc = await self.proc.wait()
        return 128 - rc if rc < 0 else rc

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM (makeflow then aborts its jobs and writes its log), SIGKILL after ``grace_s``."""
        if self.proc is None:
            return None
        return await stop(self.proc, grace_s)
