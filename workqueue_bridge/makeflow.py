"""Launch and stop the real ``makeflow -T wq``.

Makeflow always runs its own Work Queue master; HTA starts it as a child in
the workflow's directory with resource monitoring on, a unique project name,
a catalog on this host (so nothing tries to reach the public catalog) and a
port it picks itself (``-p 0 -Z portfile``), then reads that master.

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
import json
import os
import re
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from hta.processes import die_with_parent, stop
from workqueue_bridge.monitor_summaries import TaskSummary, parse_summary

#: makeflow options HTA sets itself; a user passing them would break the run
RESERVED = {"-T", "--batch-type", "-p", "--port", "-Z", "--port-file", "-N", "--project-name",
            "--monitor", "-l", "--makeflow-log"}


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


#: makeflow's options for Work Queue's keepalive (interval, timeout)
KEEPALIVE_OPTIONS = ({"-u", "--wq-keepalive-interval"}, {"-t", "--wq-keepalive-timeout"})


def keepalive_args(stall_timeout_s: float | None, extra: list[str]) -> list[str]:
    """``--wq-keepalive-interval`` and ``--wq-keepalive-timeout`` that drop a worker silent
    for ``stall_timeout_s`` at most (a check every half of it, half of it to answer); none
    if the user set either option."""
    if not stall_timeout_s:
        return []
    for a in extra:
        key = a.split("=", 1)[0]
        if any(key in opts or (len(key) > 2 and key[:2] in opts and key[2:].isdigit()) for opts in KEEPALIVE_OPTIONS):
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
        stall_timeout_s: float | None = None,
    ):
        self.workflow = Path(workflow).resolve()
        self.cwd = self.workflow.parent
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args or [])
        self.catalog = catalog
        self.project = project or f"hta-{uuid.uuid4().hex[:10]}"
        self.requested_port = port
        self.stall_timeout_s = stall_timeout_s
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
            *keepalive_args(self.stall_timeout_s, self.extra_args),
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
                raise MakeflowError(f"makeflow exited ({exit_description(self.proc.returncode)}) before its master "
                                    f"started: {self.last_error()}")
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
        """makeflow's exit code; death by signal N is reported as 128 + N, as a shell does
        (:attr:`ended` says it in words)."""
        assert self.proc is not None
        rc = await self.proc.wait()
        return 128 - rc if rc < 0 else rc

    @property
    def ended(self) -> str:
        """How makeflow ended, in words (``exit code 1``, ``killed by SIGKILL``)."""
        return exit_description(None if self.proc is None else self.proc.returncode)

    def failed_rule(self, node_id: int, job_id: int, attempts: int, rules: "dict[int, RuleInfo]") -> "FailedRule":
        """What makeflow left about rule ``node_id`` that failed for good (its last job ``job_id``)."""
        rule = rules.get(node_id)
        saved = (self.cwd / f"makeflow.failed.{node_id}" / os.path.relpath(self.monitor_dir, self.cwd)
                 / f"resource-rule-{node_id}.summary")
        summary = None
        try:
            summary = parse_summary(saved.read_text(errors="replace"))
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


@dataclass
class RuleInfo:
    """One rule of the workflow, as ``makeflow_viz -D json`` gives it."""

    node_id: int
    outputs: list[str]
    command: str
    category: str
    #: rules that need this one's outputs, directly or not
    dependents: int = 0
    #: what its category declares (CORES, MEMORY in MB, DISK in MB; None: not declared)
    limits: dict[str, float] | None = None

    @property
    def name(self) -> str:
        shown = " ".join(self.outputs[:3]) + (" …" if len(self.outputs) > 3 else "")
        return shown or f"#{self.node_id}"


_BAD_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')


def read_rules(workflow: Path, timeout_s: float = 60.0) -> dict[int, RuleInfo]:
    """Every rule by node id (file order, makeflow's numbering), from ``makeflow_viz -D json``;
    empty if it cannot be read (this is for messages only)."""
    wf = Path(workflow).resolve()
    try:
        out = subprocess.run(["makeflow_viz", "-D", "json", wf.name], cwd=wf.parent, capture_output=True,
                             text=True, timeout=timeout_s)
        text = out.stdout
        try:
            data = json.loads(text)
        except json.JSONDecodeError:  # makeflow_viz writes \' for a quote in a command
            data = json.loads(_BAD_ESCAPE.sub(r"\\\\", text).replace("\\\\'", "'"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}
    rules: dict[int, RuleInfo] = {}
    producer: dict[str, int] = {}
    inputs: dict[int, list[str]] = {}

    def name(f) -> str:
        return f if isinstance(f, str) else str(f.get("dag_name", ""))

    cats = data.get("categories") or {}
    for i, r in enumerate(data.get("rules") or []):
        outs = [name(f) for f in r.get("outputs", [])]
        cat = str(r.get("category") or data.get("default_category") or "default")
        c = cats.get(cat) or {}
        limits = {k: float(c[k]) for k in ("cores", "memory", "disk") if isinstance(c.get(k), (int, float)) and c[k] > 0}
        rules[i] = RuleInfo(node_id=i, outputs=outs, command=str(r.get("command", "")), category=cat,
                            limits=limits or None)
        inputs[i] = [name(f) for f in r.get("inputs", [])]
        for o in outs:
            producer[o] = i
    children: dict[int, set[int]] = {}
    for i, ins in inputs.items():
        for f in ins:
            if f in producer and producer[f] != i:
                children.setdefault(producer[f], set()).add(i)
    for i, rule in rules.items():
        seen: set[int] = set()
        stack = list(children.get(i, ()))
        while stack:
            c = stack.pop()
            if c not in seen:
                seen.add(c)
                stack.extend(children.get(c, ()))
        rule.dependents = len(seen)
    return rules


#: the exit codes of ``resource_monitor`` around a task (makeflow --monitor)
MONITOR_TASK_FAILED, MONITOR_OVER_LIMIT, MONITOR_ERROR = 1, 2, 3


@dataclass
class FailedRule:
    """A rule that failed for good, with what makeflow left about why."""

    node_id: int
    job_id: int
    rule: RuleInfo | None
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
