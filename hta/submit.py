"""``hta makeflow``: run a workflow with makeflow and autoscale its workers.

:func:`run_makeflow` is the whole command as a function (the CLI only parses
arguments into :class:`MakeflowOptions` and prints the result): it checks the
options, makes the policy and the backend (by name, from the registry in
:mod:`hta.backends`), refuses a policy that needs a signal the backend cannot
measure, and runs :func:`submit`.

The submission path, :func:`submit`: take the run's lock, open the scaling
log, start ``makeflow -T wq`` (workqueue_bridge), start the backend, run the
controller until makeflow exits, then stop every worker, write the ``end``
record and return makeflow's exit code. SIGINT and SIGTERM stop makeflow
first (it aborts its jobs), then the workers.

Beside the controller a watch ends the run, with one line that says why,
when it cannot end well by itself:

- a rule failed for good and makeflow has nothing left to run (makeflow 8.0
  never exits when other rules depend on the failed one): makeflow is stopped
  and the rule, its exit code or the limit it went over are named;
- the backend cannot start workers (``backend.fatal``).

Two runs of one workflow in one folder would run every task twice and write
one log together: a lock (``WORKFLOW.hta/lock``) refuses the second.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hta.backends import BackendOptions, RunContext, make_backend
from hta.backends.base import WorkerBackend
from hta.controller import Controller, ControllerConfig
from hta.errors import UsageError
from hta.interrupts import SIGNALS, quiet_in_loop, raising, take_received
from hta.model import Resources
from hta.policies.base import Policy, check_signals
from hta.policies.registry import make_policy
from hta.scaling_log import CategoriesRecord, EndRecord, RunRecord, ScalingLogWriter, WorkerRecord
from hta.summary import RunSummary, summarize
from resource_monitor.categories import CategoryLearner
from resource_monitor.incremental import IncrementalCategoryLearner
from workqueue_bridge.dag import Lookahead, Rule, load_dag, read_rules
from workqueue_bridge.makeflow import (
    PORT_WAIT_S,
    FailedRule,
    MakeflowError,
    MakeflowRun,
    check_extra_args,
    check_installed,
    port_free,
    wait_port_free,
)
from workqueue_bridge.log_summaries import LogSummaries
from workqueue_bridge.makeflow_args import ArgsError, MakeflowArgs
from workqueue_bridge.makeflow_log import MakeflowLog, NodeEvent
from workqueue_bridge.monitor_summaries import SummaryDirectory, TaskSummary
from workqueue_bridge.status import MasterStatusClient

log = logging.getLogger("hta")


@dataclass
class SubmitResult:
    exit_code: int
    summary: RunSummary
    scaling_log: Path
    makeflow_output: list[str] = field(default_factory=list)
    error: str | None = None
    #: trouble that did not change the result (e.g. a scaling log that could not be written)
    warnings: list[str] = field(default_factory=list)
    #: makeflow ran no master: it had nothing left to do (or did what --clean asks)
    did_nothing: bool = False


#: default for ``--worker-stall-timeout``: a worker silent this long is dropped by the master
STALL_TIMEOUT_S = 120.0
#: how often the watch looks at makeflow's log and the backend
WATCH_EVERY_S = 1.0
#: a rule FAILED and not put back to WAITING within this long failed for good; makeflow with
#: nothing running that has not exited this long after its last log line never will
FAILED_QUIET_S = 3.0


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class RunLock:
    """One run of a workflow at a time in its folder: ``flock`` on ``WORKFLOW.hta/lock``
    (released by the kernel when the holder dies, even by SIGKILL; not inherited by children)."""

    def __init__(self, run_dir: Path, workflow: Path):
        self.path = run_dir / "lock"
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot create the run directory {run_dir} ({exc.strerror or exc}): run the workflow "
                             f"from a folder you can write to") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(self.fd, 64, 0).decode(errors="replace").split()
            except OSError:
                holder = []
            os.close(self.fd)
            self.fd = None
            who = f" (pid {holder[0]})" if holder and holder[0].isdigit() else ""
            raise UsageError(f"another hta run{who} is already running {workflow} in this folder: wait for it to "
                             f"end or stop it (two runs would run every task twice)") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the lock
            self.fd = None


def open_scaling_log(path: Path) -> ScalingLogWriter:
    """The scaling log, or one line that says why it cannot be written and what to do."""
    try:
        return ScalingLogWriter(path)
    except OSError as exc:
        raise UsageError(f"cannot write the scaling log {path} ({exc.strerror or exc}): "
                         f"choose another file with --log") from None


async def _port_or_refuse(port: int, stop: asyncio.Event) -> None:
    """A requested master port that is in use: a killed HTA's makeflow may still be letting go
    of it, so wait a little (saying so), then refuse in one line before anything starts. A
    signal ends the wait at once."""
    log.warning("port %d is in use: waiting up to %.0f s for it to be free (Ctrl-C to stop)", port, PORT_WAIT_S)
    waiting = asyncio.ensure_future(wait_port_free(port, PORT_WAIT_S))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for t in (waiting, stopping):
        t.cancel()
    if stop.is_set():
        raise _Stopped()
    if not waiting.result():
        raise UsageError(f"port {port} is in use: choose another with --port, or stop what listens on it")


async def _master_answers(master: MasterStatusClient, mf: MakeflowRun, stop: asyncio.Event,
                          timeout_s: float = 30.0) -> bool:
    """Whether makeflow's master answers: False if makeflow exited 0 first, as it does when it
    opens its port and then finds nothing left to do (no "step failed" warnings for that).
    True too on a signal, on makeflow failing (its own words end the run) and after
    ``timeout_s`` (the controller's retries take over)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            await master.queue_status()
            return True
        except Exception:  # noqa: BLE001 — not listening yet, or gone
            if mf.proc is not None and mf.proc.returncode is not None:
                return mf.proc.returncode != 0
            if stop.is_set() or loop.time() > deadline:
                return True
            await asyncio.sleep(0.1)


class _Stopped(Exception):
    """A signal came while the run was starting."""


class _NoMaster(Exception):
    """makeflow exited 0 without opening a master: it had nothing to run."""


def paths_for(workflow: Path) -> tuple[Path, Path]:
    """(run directory, latest scaling log) next to the makeflow logs of ``workflow``; the
    latest log is a link to the newest of the run directory's ``runs/run-NNN.scaling.jsonl``."""
    wf = workflow.resolve()
    return wf.parent / f"{wf.name}.hta", wf.parent / f"{wf.name}.scaling.jsonl"


def point_latest_at(latest: Path, log: Path) -> None:
    """Make ``latest`` a link to ``log`` (atomically: a reader sees one run or the other)."""
    try:
        tmp = latest.with_name(latest.name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(os.path.relpath(log, latest.parent))
        tmp.replace(latest)
    except OSError:
        pass  # the numbered log is what matters; the link is a convenience


def new_run_log(run_dir: Path, latest: Path) -> Path:
    """A fresh, numbered scaling log for this run (a second run never overwrites the first's),
    with ``latest`` pointing at it. Called under the run's lock."""
    runs = run_dir / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        if latest.is_file() and not latest.is_symlink():  # a log from before runs were numbered: keep it
            latest.rename(runs / "run-000.scaling.jsonl")
    except OSError as exc:
        raise UsageError(f"cannot keep the run's logs in {runs} ({exc.strerror or exc}): run the workflow from a "
                         f"folder you can write to, or give --log FILE") from None
    numbers = [int(p.name[4:7]) for p in runs.glob("run-[0-9][0-9][0-9]*.scaling.jsonl") if p.name[4:7].isdigit()]
    path = runs / f"run-{max(numbers, default=0) + 1:03d}.scaling.jsonl"
    point_latest_at(latest, path)
    return path


async def submit(
    args: MakeflowArgs,
    *,
    policy: Policy,
    backend: WorkerBackend,
    config: ControllerConfig,
    scaling_log_path: Path | None = None,
    lookahead: bool = True,
    port: int = 0,
    epoch: float | None = None,
    record: Path | None = None,
    stall_timeout_s: float | None = STALL_TIMEOUT_S,
    view: ViewOptions | None = None,
) -> SubmitResult:
    """Run the workflow of makeflow's command line ``args`` to its end; ``record`` writes every answer the controller reads to
    that file, for :func:`hta.replay.replay`. ``stall_timeout_s``: a worker that does not
    answer the master for this long is dropped (Work Queue's keepalive) and replaced.

    Raises :class:`UsageError` (one line) before anything starts: another run holds the
    workflow's folder, the scaling log cannot be written, or the master's port stays in use
    (waited for up to :data:`PORT_WAIT_S`) or cannot be used at all."""
    stop = asyncio.Event()
    signalled: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signalled.append(signum)
        stop.set()

    # signals first: whatever comes next, a SIGTERM ends the run the same way
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in previous:
        loop.add_signal_handler(s, on_signal, s)
    # one that came before, where Python swallowed what the CLI's handler raised, stops it all the same
    came = take_received() if any(raising(h) for h in previous.values()) else None
    if came is not None:
        on_signal(came)
    try:
        workflow = args.workflow_path
        assert workflow is not None
        run_dir, default_log = paths_for(workflow)
        lock = RunLock(run_dir, workflow)
        try:
            try:
                busy = bool(port) and not port_free(port)
            except MakeflowError as exc:
                raise UsageError(str(exc)) from None
            if busy:
                await _port_or_refuse(port, stop)
            before = default_log.resolve() if default_log.is_symlink() and default_log.exists() else None
            result = await _submit(args, run_dir, scaling_log_path or new_run_log(run_dir, default_log),
                                   policy=policy, backend=backend, config=config, lookahead=lookahead,
                                   port=port, epoch=epoch or time.time(), record=record,
                                   stall_timeout_s=stall_timeout_s, stop=stop, signalled=signalled,
                                   view=view or ViewOptions(status=False, verbosity="quiet"))
            if result.did_nothing and scaling_log_path is None and before is not None:
                # a run that ran nothing is not the run `hta report WORKFLOW` should show: the
                # link goes back to the last one that did (this one's log is kept, numbered)
                point_latest_at(default_log, before)
            return result
        finally:
            lock.release()
    except _Stopped:  # before anything started: the caller's handler says so (128 + N)
        stopped_by = signalled[0]
    finally:
        # held back while they change hands: between the two, a SIGTERM would meet the
        # default action (remove_signal_handler's) and end HTA with no line
        signal.pthread_sigmask(signal.SIG_BLOCK, previous)
        try:
            for s, handler in previous.items():
                loop.remove_signal_handler(s)
                if handler is not None:
                    signal.signal(s, handler)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, previous)
    signal.raise_signal(stopped_by)  # the CLI's handler ends the run here with its line
    # a caller whose handler does not raise (asyncio's own, or SIG_IGN): end as that signal would
    raise KeyboardInterrupt if stopped_by == signal.SIGINT else SystemExit(128 + stopped_by)


async def _submit(args: MakeflowArgs, run_dir: Path, log_path: Path, *, policy: Policy, backend: WorkerBackend,
                  config: ControllerConfig, lookahead: bool, port: int,
                  epoch: float, record: Path | None, stall_timeout_s: float | None, stop: asyncio.Event,
                  signalled: list[int], view: ViewOptions) -> SubmitResult:
    writer = open_scaling_log(log_path)
    did_nothing = False
    mf = MakeflowRun(args, run_dir, port=port, stall_timeout_s=stall_timeout_s)
    workflow = mf.workflow
    writer.write(RunRecord(
        started_at=epoch, workflow=str(workflow), policy=policy.name, backend=backend.name,
        worker_shape=config.worker_shape, min_workers=config.min_workers, max_workers=config.max_workers,
    ))
    learner = IncrementalCategoryLearner()
    watch = _Watch(workflow, mf, backend, learner, epoch)
    summaries: SummaryDirectory | LogSummaries
    if mf.monitor_dir is not None:
        summaries = SummaryDirectory(mf.monitor_dir)
    else:
        log.warning("makeflow cannot run its resource monitor with %s: HTA learns runtimes from makeflow's log "
                    "and sizes tasks from their categories' declared resources", mf.monitor_off)
        await watch.rules()  # read now, off the loop: category_of is asked during the controller's steps
        summaries = LogSummaries(mf.log_path, watch.category_of, since=epoch)
    controller: Controller | None = None
    exit_code = 1
    error: str | None = None
    mflog = MakeflowLog(mf.log_path)
    upcoming = None

    def check_stop() -> None:
        if stop.is_set():
            raise _Stopped()

    try:
        if lookahead:
            try:
                dag = await asyncio.to_thread(load_dag, workflow, mf.format_options(), mf.cwd)
            except (ValueError, OSError, subprocess.SubprocessError) as exc:
                log.warning("no DAG lookahead: %s", exc)
            else:
                upcoming = Lookahead(dag, mflog)
        check_stop()
        port = await mf.start()
        check_stop()
        if port is None:  # makeflow did its job without a master (--clean, nothing left to do)
            raise _NoMaster()
        await backend.start("127.0.0.1", port)
        check_stop()
        async with MasterStatusClient("127.0.0.1", port) as master:
            if not await _master_answers(master, mf, stop):  # it opened its port, found nothing to do, left
                raise _NoMaster()
            deps = dict(master=master, backend=backend, summaries=summaries, upcoming=upcoming, clock=time.time)
            if record is not None:
                deps = _recording(deps, record, config, policy, epoch)
            controller = Controller(policy=policy, learner=learner, scaling_log=writer, config=config,
                                    epoch=epoch, **deps)
            finished = asyncio.Event()
            ctl = asyncio.create_task(controller.run(finished))
            viewing = asyncio.create_task(_show(controller, view, policy, backend, workflow, epoch, finished))
            waiter = asyncio.create_task(mf.wait())
            stopper = asyncio.create_task(stop.wait())
            watcher = asyncio.create_task(watch.run())
            await asyncio.wait({waiter, stopper, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                if stop.is_set():
                    error = f"interrupted by {signal_name(signalled[0])}; stopped makeflow and every worker"
                elif watcher.done() and watcher.exception() is None:
                    error = watcher.result()
                finished.set()  # no more steps: the master is going away
                await mf.stop()
            for t in (stopper, watcher):
                t.cancel()
            exit_code = await waiter
            finished.set()
            await ctl
            await viewing
            if signalled:
                exit_code = 128 + signalled[0]
            elif error is not None:
                exit_code = 1
            elif exit_code != 0:
                said = (f"see its output: {mf.output_path}" if mf.proc is not None and mf.proc.returncode < 0
                        else mf.last_error())
                error = f"makeflow failed ({mf.ended}): {said}"
    except _NoMaster:
        exit_code = 0
        did_nothing = True
        said = [line.strip() for line in mf.output_tail(5) if line.strip()]
        if said:  # what makeflow did instead ("nothing left to do.", or what --clean removed)
            log.warning("makeflow: %s", said[-1])
    except _Stopped:
        exit_code = 128 + signalled[0]
        error = f"interrupted by {signal_name(signalled[0])} while starting; stopped everything it had started"
    except Exception as exc:  # MakeflowError and anything unexpected: clean up, then report
        error = str(exc) or type(exc).__name__
    finally:
        now = time.time() - epoch
        for e in await backend.stop_all(now):
            writer.write(e)
        if mf.running:
            await mf.stop()
        mf.remove_monitor_wrappers()

    summaries_new = summaries.poll()
    if summaries_new:
        learner.add_all(summaries_new)
    mflog.poll()
    last = mflog.latest
    if exit_code == 0:  # (a signal seen before the run ended made it 128 + N; one while stopping changes nothing)
        # makeflow 8.0 exits 0 even when rules failed for good; a user must not miss that
        failed = mflog.failed_for_good(time.time(), quiet_s=0.0, since=epoch)
        if failed or (last is not None and (last.failed or last.aborted)):
            exit_code = 1
            n = len(failed) or (last.failed + last.aborted if last else 0)
            watch.log.poll()
            first = (await watch.explain(failed[:1]))[0] if failed else ""
            error = (f"makeflow finished but {n} rule(s) failed" + (f": {first}" if first else "")
                     + f" (makeflow's output: {mf.output_path})")
    now = time.time() - epoch
    writer.write(CategoriesRecord(t=round(now, 3), categories=learner.models()))
    lost = [r for r in writer.records if isinstance(r, WorkerRecord) and r.event in ("lost", "removed", "failed")]
    tasks_lost = sum(r.tasks_lost for r in lost)
    # runtime: from submission (t = 0) until makeflow finished the workflow
    finished_at = (mflog.completed_at - epoch) if mflog.completed_at and mflog.completed_at >= epoch else now
    writer.write(EndRecord(
        t=round(now, 3), exit_code=exit_code, runtime_s=round(finished_at, 3),
        tasks_done=last.complete if last else 0, tasks_failed=last.failed if last else 0,
        tasks_done_before=max(0, last.complete - mflog.completed_this_run) if last else 0,
        # makeflow's own retries, and the tasks the master ran again because their worker went away
        tasks_retried=mflog.retried + tasks_lost,
        lost_work_core_s=round(sum(r.lost_work_core_s for r in lost), 3),
    ))
    writer.close()
    warnings = [writer.trouble] if writer.trouble else []
    return SubmitResult(exit_code, summarize(writer.records, str(log_path)), log_path, mf.output_tail(), error,
                        warnings, did_nothing)


@dataclass
class ViewOptions:
    """What a person sees while the run goes: the status server and the terminal view."""

    status: bool = True
    status_port: int = 0
    status_host: str = "127.0.0.1"
    #: quiet | normal | verbose
    verbosity: str = "normal"
    #: panel | lines (None: a panel on a terminal, lines elsewhere)
    mode: str | None = None


async def _show(controller: Controller, view: ViewOptions, policy: Policy, backend: WorkerBackend, workflow: Path,
                epoch: float, finished: asyncio.Event) -> None:
    """The status server and the live view, until ``finished``; neither can end the run."""
    from hta.status.panel import LiveView
    from hta.status.server import StatusServer
    from hta.status.snapshot import RunInfo

    info = RunInfo(workflow=str(workflow), policy=policy.name, backend=backend.name, started_at=epoch)
    server = None
    if view.status:
        server = StatusServer.for_controller(controller, info, host=view.status_host, port=view.status_port)
        try:
            url = await server.start()
        except OSError as exc:
            log.warning("no status server: cannot listen on %s port %d (%s); the run goes on (choose another "
                        "--status-port, or --no-status)", view.status_host, view.status_port, exc.strerror or exc)
            server = None
        else:
            if view.verbosity != "quiet":
                print(f"hta: live status at {url} (also /status, /metrics; or: hta status {url})",
                      file=sys.stderr, flush=True)
    # the view says decisions and step failures itself: the controller's own log lines would repeat them
    quiet = logging.getLogger("hta.controller")
    level = quiet.level
    if view.verbosity != "quiet":
        quiet.setLevel(logging.ERROR)
    try:
        await LiveView(controller, info, mode=view.mode, verbosity=view.verbosity).run(finished)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 — a broken view must not end the run
        log.warning("the live view stopped: %s", exc)
        await finished.wait()
    finally:
        quiet.setLevel(level)
        if server is not None:
            await server.stop()


class _Watch:
    """Watches what the controller does not: rules that failed for good (from a makeflowlog
    reader of its own) and a backend that cannot start workers. :meth:`run` returns the
    one line that ends the run; it never returns while the run can still end well."""

    def __init__(self, workflow: Path, mf: MakeflowRun, backend: WorkerBackend, learner: CategoryLearner,
                 epoch: float):
        self.workflow = workflow
        self.mf = mf
        self.backend = backend
        self.learner = learner
        self.epoch = epoch
        self.log = MakeflowLog(mf.log_path)
        self._rules: dict[int, Rule] | None = None
        self._told: set[int] = set()
        self._learned: set[int] = set()

    async def rules(self) -> dict[int, Rule]:
        if self._rules is None:
            self._rules = await asyncio.to_thread(read_rules, self.workflow, self.mf.format_options(), self.mf.cwd)
        return self._rules

    def category_of(self, node_id: int) -> str | None:
        """A rule's category (for :class:`LogSummaries`; :meth:`rules` has read them)."""
        rule = (self._rules or {}).get(node_id)
        return rule.category if rule else None

    async def run(self) -> str:
        failures = 0
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                why = await self.check()
            except Exception as exc:  # noqa: BLE001 — the watch must not end the run by itself
                failures += 1
                if failures == 1:
                    log.warning("cannot watch makeflow's log (%s); retrying", exc)
                continue
            if why:
                return why

    async def check(self) -> str | None:
        if self.backend.fatal:
            return self.backend.fatal
        self.log.poll()
        now = time.time()
        failed = self.log.failed_for_good(now, FAILED_QUIET_S, since=self.epoch)
        new = [e for e in failed if e.node_id not in self._told]
        running = self.log.latest.running if self.log.latest else 0
        if new and running:  # with nothing running, the run ends now and says it once
            self._told.update(e.node_id for e in new)
            for text in await self.explain(new):
                log.warning("%s; waiting for the %d task(s) still running", text, running)
        stuck = self.log.stuck(now, FAILED_QUIET_S, since=self.epoch)
        if stuck:
            rules = await self.rules()
            texts = await self.explain(stuck[:1])
            blocked = sum(rules[e.node_id].dependents for e in stuck if e.node_id in rules)
            more = f" and {len(stuck) - 1} other rule(s)" if len(stuck) > 1 else ""
            waits = (f"{blocked} rule(s) depending on it can never run, and makeflow 8.0 would wait forever"
                     if blocked else "makeflow did not end by itself")
            return (f"{texts[0]}{more}; {waits}: stopped makeflow and every worker "
                    f"(makeflow's output: {self.mf.output_path})")
        return None

    async def explain(self, events: list[NodeEvent]) -> list[str]:
        """One clause per failed rule: which rule, and why (learning from an over-limit task)."""
        rules = await self.rules()
        out = []
        for e in events:
            f = self.mf.failed_rule(e.node_id, e.job_id, self.log.submissions.get(e.node_id, 1), rules)
            if f.over_limit:
                out.append(self._over_limit(f))
            else:
                cmd = f.rule.command if f.rule else ""
                cmd = cmd if len(cmd) <= 60 else cmd[:57] + "..."
                out.append(f"rule {f.name}" + (f" (`{cmd}`)" if cmd else "") + f" failed for good: {f.why()}"
                           + f.attempts_text())
        return out

    def _over_limit(self, f: FailedRule) -> str:
        """A task the resource monitor stopped: its summary is gone, so what it used comes
        from the backend's own sampling, if it has any; the learner is told."""
        cat = f.category or "default"
        limits = (f.rule.limits if f.rule else None) or {}
        peak = self.backend.task_peak_memory_mb(f.job_id)
        limit = limits.get("memory")
        shown = ", ".join(f"{k} {v:g}" + (" MB" if k != "cores" else "") for k, v in limits.items())
        text = f"rule {f.name} (category {cat}) was stopped by the resource monitor for going over its category's limits"
        text += f" ({shown})" if shown else ""
        if peak is not None and limit and peak > limit:
            text += (f": its processes reached {peak:.0f} MB of memory (sampled by HTA); raise MEMORY of category "
                     f"{cat} to at least {peak:.0f}")
            if f.node_id not in self._learned:
                self._learned.add(f.node_id)
                self.learner.add(TaskSummary(category=cat, command=f.rule.command if f.rule else "",
                                             exit_type="limits", limits_exceeded=True, exceeded=["memory"],
                                             memory_mb=peak))
        else:
            text += (": makeflow deleted its resource summary and HTA did not see it go over, so what it used "
                     "is not known; raise its category's limits")
        return text


def _recording(deps: dict, path: Path, config: ControllerConfig, policy: Policy, epoch: float) -> dict:
    from hta import replay

    tape = replay.Tape(path)
    replay.record_header(tape, config, policy, epoch)
    return dict(master=replay.RecordingMaster(deps["master"], tape),
                backend=replay.RecordingBackend(deps["backend"], tape),
                summaries=replay.RecordingSummaries(deps["summaries"], tape),
                upcoming=replay.RecordingUpcoming(deps["upcoming"], tape) if deps["upcoming"] else None,
                clock=replay.RecordingClock(deps["clock"], tape))


class MakeflowOptions(BaseModel):
    """Every option of ``hta makeflow``, validated in one place."""

    model_config = ConfigDict(extra="forbid")

    #: the Makeflow file (None: named by MAKEFLOW in an ``--argv`` file among makeflow_args)
    workflow: Path | None = None
    #: makeflow's own options, passed through (those HTA sets itself are refused)
    makeflow_args: list[str] = Field(default_factory=list)
    #: where makeflow runs, as if the user had typed ``makeflow`` here
    cwd: Path = Field(default_factory=Path.cwd)
    backend: str = "local"
    backend_options: BackendOptions = Field(default_factory=BackendOptions)
    policy: str = "hta"
    #: master port (None: the backend's default — any free port locally, a fixed one on Kubernetes)
    port: int | None = Field(None, ge=0, le=65535)
    min_workers: int = Field(0, ge=0)
    max_workers: int = Field(4, ge=1)
    worker_cores: int = Field(1, ge=1)
    worker_memory_mb: int = Field(1024, ge=1)
    worker_disk_mb: int = Field(4096, ge=1)
    poll_interval_s: float = Field(1.0, ge=0.1)
    min_interval_s: float = Field(2.0, ge=0.1)
    max_interval_s: float = Field(300.0, ge=0.1)
    #: preparation latency assumed until one is measured (None: provision delay + 2 s)
    latency_prior_s: float | None = Field(None, gt=0)
    log: Path | None = None
    lookahead: bool = True
    #: write every answer the controller reads here (for hta.replay)
    record: Path | None = None
    #: a worker that does not answer the master for this long is dropped and replaced
    stall_timeout_s: float = Field(STALL_TIMEOUT_S, ge=2)
    #: serve /status, /metrics and a live page during the run
    status: bool = True
    #: the status server's port (0: any free port)
    status_port: int = Field(0, ge=0, le=65535)
    #: the address it listens on (0.0.0.0 to be reached from other hosts, e.g. in a pod)
    status_host: str = "127.0.0.1"

    @field_validator("policy")
    @classmethod
    def _a_policy(cls, spec: str) -> str:
        """A spec that names no policy is refused here, so the error line says where it came from
        (``--policy``, ``HTA_POLICY``, a config file's key)."""
        make_policy(spec)  # (ValueError: the choices, or what is wrong with the settings)
        return spec

    def invocation(self) -> MakeflowArgs:
        """makeflow's command line (options and workflow) as makeflow will read it."""
        try:
            args = MakeflowArgs.parse([*self.makeflow_args, *([str(self.workflow)] if self.workflow else [])],
                                      cwd=self.cwd)
            check_extra_args(args)
        except (ArgsError, MakeflowError) as exc:
            raise UsageError(str(exc)) from None
        return args

    def check_settings(self) -> MakeflowArgs:
        """What :meth:`check` refuses short of the workflow file itself (``hta config`` runs
        it, so that it prints no configuration ``hta makeflow`` would refuse)."""
        from hta.backends import BACKENDS

        args = self.invocation()
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        # (the policy was checked when the options were built: _a_policy)
        if self.log is not None:
            if self.log.is_dir():
                raise UsageError(f"--log {self.log} is a directory: give a file name, e.g. {self.log}/run.scaling.jsonl")
            if not self.log.parent.is_dir():
                raise UsageError(f"--log {self.log}: folder {self.log.parent} does not exist: create it or choose "
                                 f"another file")
        if self.min_workers > self.max_workers:
            raise UsageError(f"--min-workers ({self.min_workers}) is above --max-workers ({self.max_workers})")
        if self.min_interval_s > self.max_interval_s:
            raise UsageError(f"--min-interval ({self.min_interval_s:g}) is above --max-interval "
                             f"({self.max_interval_s:g})")
        return args

    def check_workflow(self, args: MakeflowArgs) -> None:
        """The workflow file: named, there, a file, text."""
        wf = args.workflow_path
        if wf is None:
            raise UsageError("no workflow given: hta makeflow WORKFLOW (or MAKEFLOW in an --argv file)")
        shown = args.dagfile
        if wf.is_dir():
            inside = " (it holds one: " + str(Path(shown) / "Makeflow") + ")" if (wf / "Makeflow").is_file() else ""
            raise UsageError(f"workflow {shown!r} is a folder: give the path to a Makeflow file{inside}")
        if not wf.is_file():
            raise UsageError(f"workflow file {shown!r} not found: give the path to a Makeflow file")
        why = not_text(wf)
        if why:
            raise UsageError(f"workflow file {shown!r} is not a text file ({why}): give the path to a "
                             f"Makeflow file")

    def check(self) -> MakeflowArgs:
        """Cross-field checks, as one-line :class:`UsageError`; returns makeflow's command line."""
        args = self.check_settings()
        self.check_workflow(args)
        return args

    def controller_config(self) -> ControllerConfig:
        prior = self.latency_prior_s
        if prior is None:
            prior = self.backend_options.provision_delay_s + 2.0
        return ControllerConfig(
            worker_shape=Resources(cores=self.worker_cores, memory_mb=self.worker_memory_mb,
                                   disk_mb=self.worker_disk_mb),
            min_workers=self.min_workers, max_workers=self.max_workers, poll_interval_s=self.poll_interval_s,
            min_interval_s=self.min_interval_s, max_interval_s=self.max_interval_s, latency_prior_s=prior,
        )


def run_makeflow(options: MakeflowOptions, verbosity: str = "normal", mode: str | None = None) -> SubmitResult:
    """``hta makeflow`` as a function: check, build the policy and backend, run, return the result.

    Raises :class:`UsageError` (one line) for anything the user must fix before a run starts."""
    args = options.check()
    if options.record is not None:
        try:  # refuse before anything starts, as for --log
            open(options.record, "a").close()
        except OSError as exc:
            raise UsageError(f"cannot write the record file {options.record} ({exc.strerror or exc}): "
                             f"choose another file with --record") from None
    try:
        policy = make_policy(options.policy)
        check_installed()
    except (ValueError, MakeflowError) as exc:
        raise UsageError(str(exc)) from None
    assert args.workflow_path is not None
    if not args.ends_before_master():
        check_not_empty(args)
    epoch = time.time()
    run_dir, _ = paths_for(args.workflow_path)
    try:
        backend = make_backend(options.backend, options.backend_options,
                               RunContext(workflow=args.workflow_path, run_dir=run_dir, epoch=epoch))
        check_signals(policy, backend.name, backend.signals, backend.signals_why)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    port = backend.default_port if options.port is None else options.port
    view = ViewOptions(status=options.status, status_port=options.status_port, status_host=options.status_host,
                       verbosity=verbosity, mode=mode)
    with asyncio.Runner() as runner:
        quiet_in_loop(runner.get_loop())
        return runner.run(submit(args, policy=policy, backend=backend, config=options.controller_config(),
                                 view=view, scaling_log_path=options.log, lookahead=options.lookahead, port=port,
                                 epoch=epoch, record=options.record, stall_timeout_s=options.stall_timeout_s))


#: where makeflow's parser (makeflow_viz shares it) says a workflow is wrong: "… line: 3 column: 1"
_PARSE_ERROR = re.compile(r"(.*?)\.? line: (\d+)(?: column: (\d+))?")


def check_not_empty(args: MakeflowArgs) -> None:
    """Refuse a workflow without a rule (makeflow would exit 0 having done nothing), or one
    makeflow's parser refuses at a line (makeflow would refuse it too, after hta had started
    a run and written its log). Any other failure of makeflow_viz is left to makeflow."""
    from workqueue_bridge.dag import viz_json

    assert args.workflow_path is not None
    try:
        data = viz_json(args.workflow_path, args.format_options(), args.cwd, timeout_s=60)
    except ValueError as exc:
        said = str(exc).split(": ", 1)[-1]
        m = _PARSE_ERROR.search(said)
        if m:
            where = f"line {m.group(2)}" + (f", column {m.group(3)}" if m.group(3) else "")
            rule = " (a rule is `OUTPUTS: INPUTS` followed by a tab-indented command)" if "keyword" in said else ""
            raise UsageError(f"workflow {args.dagfile} does not parse at {where}: {m.group(1)}: fix that "
                             f"line{rule}") from None
        return
    except (OSError, subprocess.SubprocessError):
        return
    if not data.get("rules"):
        raise UsageError(f"workflow {args.dagfile} has no rules: nothing to run (a rule is `OUTPUTS: INPUTS` "
                         f"followed by a tab-indented command)")


def not_text(path: Path, sample: int = 65536) -> str | None:
    """Why ``path`` is not a text file (makeflow and makeflow_viz spin for minutes on a
    binary one), or None if it is one."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(sample)
    except OSError as exc:
        return exc.strerror or str(exc)
    if b"\0" in head:
        return "it holds NUL bytes: it looks binary"
    control = sum(1 for b in head if b < 32 and b not in b"\t\n\r\f\v\x1b")
    if head and control / len(head) > 0.05:
        return f"{100 * control / len(head):.0f} % of its first bytes are control characters: it looks binary"
    return None
