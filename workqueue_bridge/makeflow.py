"""Launch and stop the real ``makeflow -T wq``.

Makeflow always runs its own Work Queue master; HTA starts it as a child
where the user would have started it (their folder, the workflow path as
given, their own options: :mod:`workqueue_bridge.makeflow_args` reads them as
makeflow does), with resource monitoring on, a unique project name, a catalog
on this host (so nothing tries to reach the public catalog) and a port it
picks itself (``-p 0 -Z portfile``), then reads that master. With options
under which makeflow 8.0 cannot monitor (``--shared-fs``, ``--storage-*``) it
runs without the monitor; a ``--monitor=DIR`` of the user's is read there.

Work Queue's keepalive is set from HTA's stall timeout (a worker that does not
answer the master's check for that long is dropped and its tasks go back to
the queue), unless the user gave makeflow their own ``-u`` / ``-t``.

When a rule fails for good, :meth:`MakeflowRun.failed_rule` gathers what
makeflow left about it: the rule (outputs, command, category, from
``makeflow_viz``), the wrapped job's exit code from makeflow's output (with
``--monitor``: 1 the command failed, 2 the resource monitor stopped it for
going over a limit, 3 the monitor failed) and the last attempt's monitor
summary, which makeflow keeps in ``makeflow.failed.<node>/`` — except for a
task stopped for going over a limit, whose summary it deletes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

from workqueue_bridge.cctools_output import one_line_error
from workqueue_bridge.dag import Rule
from workqueue_bridge.makeflow_args import MakeflowArgs, real_makeflow
from workqueue_bridge.monitor_summaries import TaskSummary, parse_summary
from workqueue_bridge.processes import die_with_parent, stop


class MakeflowError(RuntimeError):
    """makeflow could not start or failed; the message is one line for the user."""


def exit_description(rc: int | None) -> str:
    """A process's end in words: ``exit code 3``, or ``killed by SIGTERM`` for a negative
    return code (never the raw ``-15``)."""
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def keepalive_args(stall_timeout_s: float | None, args: MakeflowArgs) -> list[str]:
    """``--wq-keepalive-interval`` and ``--wq-keepalive-timeout`` that drop a worker silent
    for ``stall_timeout_s`` at most (a check every half of it, half of it to answer); none
    if the user set either option."""
    if not stall_timeout_s or args.has("wq-keepalive-interval") or args.has("wq-keepalive-timeout"):
        return []
    half = max(1, int(stall_timeout_s // 2))
    return [f"--wq-keepalive-interval={half}", f"--wq-keepalive-timeout={half}"]


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
    if real_makeflow() is None:
        raise MakeflowError("makeflow not found on PATH: run scripts/setup.sh (installs Debian's coop-computing-tools)")
    for tool in ("work_queue_worker",):
        if shutil.which(tool) is None:
            raise MakeflowError(
                f"{tool} not found on PATH: run scripts/setup.sh (installs Debian's coop-computing-tools)"
            )


def check_extra_args(args: MakeflowArgs) -> None:
    """Refuse the makeflow options HTA sets itself, in any spelling (``-Tlocal`` included)."""
    owned = args.owned()
    if owned:
        given, why = owned[0]
        raise MakeflowError(f"makeflow option {given} cannot be used under HTA: {why}")


def port_free(port: int) -> bool:
    """Whether makeflow could listen on ``port`` now (as it binds: every address, reusing
    a port whose last connections are still closing); False only while something else
    listens there. Any other reason it cannot (a port under 1024 without the right) is a
    :class:`MakeflowError` at once: waiting would not change it."""
    import errno
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise MakeflowError(f"cannot listen on port {port} ({exc.strerror}): choose another with --port") from None
    return True


#: how long a requested port may stay busy before the run is refused: a killed HTA's
#: makeflow dies with its parent and lets go of the port within a few seconds
PORT_WAIT_S = 15.0


async def wait_port_free(port: int, timeout_s: float = PORT_WAIT_S) -> bool:
    """True once ``port`` is free; False if it is still in use after ``timeout_s``
    (cancellable: a signal stops the wait)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not port_free(port):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.25)
    return True


#: the script makeflow writes per rule to run it under the resource monitor (mkstemp's suffix)
_MONITOR_WRAPPER = re.compile(r"^resource_monitor_\d+_[A-Za-z0-9]{6}$")


class MakeflowRun:
    """One makeflow process and the files it writes."""

    def __init__(
        self,
        args: MakeflowArgs,
        run_dir: Path,
        catalog: str = "127.0.0.1:9097",
        project: str | None = None,
        port: int = 0,
        stall_timeout_s: float | None = None,
    ):
        if args.workflow_path is None:
            raise MakeflowError("no workflow given: name the Makeflow file")
        self.args = args
        self.workflow = args.workflow_path.resolve()
        #: where makeflow is started (the user's folder, as with makeflow itself)
        self.cwd = args.cwd
        #: where makeflow runs the rules and writes its log (``-X DIR``, or its cwd)
        self.workdir = args.workdir
        self.run_dir = Path(run_dir)
        self.catalog = catalog
        self.project = project or f"hta-{uuid.uuid4().hex[:10]}"
        self.requested_port = port
        self.stall_timeout_s = stall_timeout_s
        self.port: int | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.output_path = self.run_dir / "makeflow.out"
        log_path = args.log_path
        assert log_path is not None  # (a workflow is named: its log is)
        self.log_path: Path = log_path
        #: the master's transactions log (``WORKFLOW.wqlog.tr``), which the status client tails
        self.transactions_log: Path | None = args.transactions_log_path
        #: why makeflow runs without the resource monitor (None: it runs with it)
        self.monitor_off = args.monitor_breaker()
        own = args.last("monitor")
        if self.monitor_off:
            self.monitor_dir: Path | None = None
        else:
            self.monitor_dir = (self.workdir / own) if own else (self.run_dir / "monitor")
        #: makeflow did its job (e.g. --clean) and exited 0 without a master
        self.ended_without_master = False

    def format_options(self) -> list[str]:
        return self.args.format_options()

    def command(self) -> list[str]:
        # -Z picks a random port whatever -p says: use it only when no port is asked for
        port = ["-p", str(self.requested_port)] if self.requested_port else ["-p", "0", "-Z", str(self.run_dir / "port")]
        monitor = []
        if self.monitor_dir is not None and not self.args.has("monitor"):
            # makeflow refuses absolute "remote names": the monitor dir relative to where it runs
            monitor = [f"--monitor={os.path.relpath(self.monitor_dir, self.workdir)}"]
        return [
            real_makeflow() or "makeflow", "-T", "wq", *port, "-N", self.project, "-C", self.catalog, *monitor,
            *keepalive_args(self.stall_timeout_s, self.args),
            *self.args.tokens(),
            *([self.args.dagfile] if self.args.dagfile and not self.args.dag_from_argv else []),
        ]

    async def start(self, timeout_s: float = 60.0) -> int | None:
        """Start makeflow and return its master's port once it listens; None if makeflow
        exited 0 without opening one (``--clean``, nothing to do: :attr:`ended_without_master`)."""
        check_installed()
        check_extra_args(self.args)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        portfile = self.run_dir / "port"
        portfile.unlink(missing_ok=True)
        if self.requested_port and not port_free(self.requested_port):  # (hta makeflow waited for it already)
            raise MakeflowError(f"port {self.requested_port} is in use: choose another with --port")
        out = open(self.output_path, "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command(), cwd=self.cwd, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent(MAKEFLOW_PARENT_DEATH_SIGNAL),
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
            if self.proc.returncode == 0:  # it did its job without a master (e.g. --clean)
                self.ended_without_master = True
                return None
            if self.proc.returncode is not None:
                said = self.last_error()
                # a cctools fatal() ends makeflow by its own SIGTERM: its words say more than the signal
                how = "stopped" if one_line_error("\n".join(self.output_tail(40))) else \
                    f"exited ({exit_description(self.proc.returncode)})"
                raise MakeflowError(f"makeflow {how} before its master started: {said}")
            await asyncio.sleep(0.1)
        await self.stop()
        raise MakeflowError(f"makeflow did not open its master port within {timeout_s:.0f}s: {self.last_error()}")

    def output_tail(self, n: int = 20) -> list[str]:
        try:
            return self.output_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def last_error(self) -> str:
        """Makeflow's own words for what went wrong (its last meaningful line)."""
        lines = [line.strip() for line in self.output_tail(40) if line.strip()]
        fatal = one_line_error("\n".join(lines))
        if fatal:
            return fatal
        errors = [line for line in lines if line.lower().startswith("error:")]  # its consistency check's
        if errors:
            return " ".join(errors[:2]) + (f" (and {len(errors) - 2} more)" if len(errors) > 2 else "")
        for line in reversed(lines):
            low = line.lower()
            if any(w in low for w in ("error", "failed", "couldn't", "could not", "no such", "abort", "syntax")):
                return line
        return lines[-1] if lines else "(no output)"

    async def wait(self) -> int:
        """makeflow's exit code; death by signal N is reported as 128 + N, as a shell does
        (:attr:`ended` says it in words)."""
        assert self.proc is not None
        rc = await self.proc.wait()
        return 128 - rc if rc < 0 else rc

    @property
    def ended(self) -> str:
        """How makeflow ended, in words (``exit code 1``, ``killed by SIGKILL``)."""
        return exit_description(None if self.proc is None else self.proc.returncode)

    def failed_rule(self, node_id: int, job_id: int, attempts: int, rules: dict[int, Rule]) -> FailedRule:
        """What makeflow left about rule ``node_id`` that failed for good (its last job ``job_id``)."""
        rule = rules.get(node_id)
        saved = None
        if self.monitor_dir is not None:
            saved = (self.workdir / f"makeflow.failed.{node_id}" / os.path.relpath(self.monitor_dir, self.workdir)
                     / f"resource-rule-{node_id}.summary")
        summary = None
        try:
            summary = parse_summary(saved.read_text(errors="replace")) if saved else None
        except (OSError, ValueError):
            pass
        code = None
        if rule is not None:
            pattern = re.compile(re.escape(rule.command) + r" failed with exit code (-?\d+)")
            try:
                text = self.output_path.read_text(errors="replace")
            except OSError:
                text = ""
            found = pattern.findall(text)
            code = int(found[-1]) if found else None
        return FailedRule(node_id=node_id, job_id=job_id, rule=rule, attempts=attempts, job_exit_code=code,
                          summary=summary, summary_path=saved if summary else None)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM (makeflow then aborts its jobs and writes its log), SIGKILL after ``grace_s``."""
        if self.proc is None:
            return None
        return await stop(self.proc, grace_s)

    def _monitor_wrappers(self) -> set[Path]:
        try:
            return {p for p in self.workdir.iterdir() if _MONITOR_WRAPPER.match(p.name)}
        except OSError:
            return set()

    def remove_monitor_wrappers(self) -> list[Path]:
        """Remove the ``resource_monitor_<rule>_XXXXXX`` scripts this run's makeflow wrote in
        its folder and left there: makeflow deletes a rule's wrapper when the rule ends, not
        the wrappers of rules it aborted (a Ctrl-C, a stopped run). Only files that run the
        monitor into this workflow's own folder (HTA's ``WORKFLOW.hta/monitor``, not a
        ``--monitor`` one the user gave) go, those an earlier run killed before it could clean
        up included: the run's lock says no other HTA run of this workflow is running."""
        if self.monitor_dir is None or self.proc is None or self.args.last("monitor"):
            return []  # (a --monitor folder of the user's own may be another run's too: left alone)
        ours = f"--with-output-files={os.path.relpath(self.monitor_dir, self.workdir)}/"
        gone = []
        for path in sorted(self._monitor_wrappers()):
            try:
                if path.is_file() and ours in path.read_text(errors="replace")[:4096]:
                    path.unlink()
                    gone.append(path)
            except OSError:
                pass
        return gone


#: the exit codes of ``resource_monitor`` around a task (makeflow --monitor)
MONITOR_TASK_FAILED, MONITOR_OVER_LIMIT, MONITOR_ERROR = 1, 2, 3


@dataclass
class FailedRule:
    """A rule that failed for good, with what makeflow left about why."""

    node_id: int
    job_id: int
    rule: Rule | None
    attempts: int
    #: the exit code makeflow reports for the (monitor-wrapped) job
    job_exit_code: int | None
    #: the last attempt's monitor summary, kept in makeflow.failed.<node>/
    summary: TaskSummary | None
    summary_path: Path | None = None

    @property
    def name(self) -> str:
        return self.rule.name if self.rule else f"#{self.node_id}"

    @property
    def category(self) -> str | None:
        return self.rule.category if self.rule else None

    @property
    def over_limit(self) -> bool:
        """Stopped by the resource monitor for going over its category's limits."""
        if self.summary is not None:
            return self.summary.limits_exceeded or self.summary.exit_type == "limits"
        return self.job_exit_code == MONITOR_OVER_LIMIT

    def why(self) -> str:
        """Why it failed, in a few words (the over-limit case is worded by the caller, who
        may know more about what the task used)."""
        s = self.summary
        if s is not None and s.exit_type == "signal":
            try:
                return f"killed by {signal.Signals(s.signal).name}" if s.signal else "killed by a signal"
            except ValueError:
                return f"killed by signal {s.signal}"
        if self.over_limit:
            over = ", ".join(s.exceeded) if s is not None and s.exceeded else "a limit"
            return f"stopped by the resource monitor for going over {over} of its category"
        if s is not None and s.exit_status is not None:
            return f"exit code {s.exit_status}"
        if self.job_exit_code == MONITOR_ERROR:
            return "the resource monitor could not run it"
        if self.job_exit_code is not None:
            return f"exit code {self.job_exit_code}"
        return "failed"

    def attempts_text(self) -> str:
        return f", after {self.attempts} attempts" if self.attempts > 1 else ""
