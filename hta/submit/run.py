"""``hta makeflow``: run a workflow with makeflow and autoscale its workers.

:func:`run_makeflow` is the whole command as a function (the CLI only parses arguments
into :class:`~hta.submit.options.MakeflowOptions` and prints the result): it checks the
options, makes the policy and the backend (by name, from the registry in
:mod:`hta.backends`), refuses a policy that needs a signal the backend cannot measure, and
runs :func:`submit`.

:func:`submit` takes the run's lock and owns the signals; a :class:`Submission` is the run
itself, in the order it happens: open the scaling log, read the DAG ahead, start
``makeflow -T wq`` (workqueue_bridge), start the backend, run the controller beside the
failure watch and the live view until makeflow exits, stop every worker, tell whether
rules failed for good, and close the log. SIGINT and SIGTERM stop makeflow first (it
aborts its jobs), then the workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hta.backends import RunContext, make_backend
from hta.backends.base import WorkerBackend
from hta.controller import Controller, ControllerConfig, MasterSource, SummarySource
from hta.errors import UsageError
from hta.interrupts import SIGNALS, noting, quiet_in_loop, raising, take_hangup, take_received
from hta.observation import UpcomingSource
from hta.policies.base import Policy, check_signals
from hta.policies.dial import budget_spent
from hta.policies.registry import make_policy
from hta.scaling_log import EndRecord, RunRecord, WorkerRecord, paths_for
from hta.submit.failure_watch import FailureWatch
from hta.submit.options import STALL_TIMEOUT_S, MakeflowOptions, check_not_empty
from hta.submit.reload import ConfigReread
from hta.submit.run_dir import (
    RunLock,
    new_run_log,
    open_scaling_log,
    other_makeflows,
    point_latest_at,
    set_aside,
)
from hta.submit.view import ViewOptions, show
from hta.summary import RunSummary, end_run
from resource_monitor.incremental import IncrementalCategoryLearner
from workqueue_bridge.dag import Lookahead, load_dag, sizes_in
from workqueue_bridge.log_summaries import LogSummaries
from workqueue_bridge.makeflow import (
    PORT_WAIT_S,
    MakeflowError,
    MakeflowRun,
    check_installed,
    port_free,
    wait_port_free,
)
from workqueue_bridge.makeflow_args import MakeflowArgs
from workqueue_bridge.makeflow_log import MakeflowLog
from workqueue_bridge.monitor_summaries import SummaryDirectory
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
    #: makeflow's own last words when it ran no master ("nothing left to do.")
    note: str | None = None
    #: makeflow refused the workflow before its master started (a missing input, a bad
    #: option): nothing ran, and no scaling log is kept
    never_started: bool = False


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def run_from_elsewhere(error: str, workflow: Path, workdir: Path) -> str:
    """A hint for a file makeflow did not find when it runs in another folder than the
    workflow's: it reads the workflow's paths from the folder it runs in ("" otherwise)."""
    m = re.search(r"(\S+) does not exist", error)
    folder = Path(workflow).resolve().parent
    if m is None or folder == Path(workdir).resolve():
        return ""
    there = (folder / m.group(1)).exists()
    shown = os.path.relpath(folder, workdir)
    return (f"; makeflow reads a workflow's paths from the folder it runs in ({workdir}), not the workflow's"
            + (f", where {m.group(1)} is" if there else f" ({shown})")
            + f": run it from there (cd {shlex.quote(shown)} && hta makeflow {shlex.quote(Path(workflow).name)})")


def lookahead_lost(error: str) -> str:
    """The warning when the workflow cannot be read ahead of makeflow: what the user loses
    (workers for the stages to come) and what to do, in their words (not the tool's)."""
    why = " ".join(re.sub(r"^makeflow_viz could not read [^:]*: ", "", error).rstrip(".").split())
    line = (f"HTA cannot read the workflow ahead of makeflow ({why}): it buys workers for the tasks makeflow has "
            f"queued only, not for the stages to come")
    m = re.search(r"Variable (\S+) has not yet been defined", why)
    if m:
        line += (f"; if $({m.group(1)}) in a rule is a shell command, write it `{m.group(1)}` (backquotes): "
                 f"Makeflow reads $(...) as one of its own variables")
    return line


class _Stopped(Exception):
    """A signal came while the run was starting."""


class _NoMaster(Exception):
    """makeflow exited 0 without opening a master: it had nothing to run."""


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


@dataclass
class ControllerDeps:
    """What the controller reads and acts through, in a real run."""

    master: MasterSource
    backend: WorkerBackend
    summaries: SummarySource
    upcoming: UpcomingSource | None
    clock: Callable[[], float]

    def recorded(self, path: Path, config: ControllerConfig, policy: Policy, epoch: float) -> ControllerDeps:
        """The same, each answer written to ``path`` for :func:`hta.replay.replay`."""
        from hta import replay

        tape = replay.Tape(path)
        replay.record_header(tape, config, policy, epoch)
        return ControllerDeps(master=replay.RecordingMaster(self.master, tape),
                              backend=replay.RecordingBackend(self.backend, tape),
                              summaries=replay.RecordingSummaries(self.summaries, tape),
                              upcoming=replay.RecordingUpcoming(self.upcoming, tape) if self.upcoming else None,
                              clock=replay.RecordingClock(self.clock, tape))


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
    reread: ConfigReread | None = None,
) -> SubmitResult:
    """Run the workflow of makeflow's command line ``args`` to its end; ``record`` writes every
    answer the controller reads to that file, for :func:`hta.replay.replay`.
    ``stall_timeout_s``: a worker that does not answer the master for this long is dropped
    (Work Queue's keepalive) and replaced. A SIGHUP reads the config file again through
    ``reread`` (:mod:`hta.submit.reload`; None: it says there is none to read) and never
    ends the run.

    Raises :class:`UsageError` (one line) before anything starts: another run holds the
    workflow's folder, the scaling log cannot be written, or the master's port stays in use
    (waited for up to :data:`PORT_WAIT_S`) or cannot be used at all."""
    stop = asyncio.Event()
    signalled: list[int] = []
    hangups = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signalled.append(signum)
        stop.set()

    # signals first: whatever comes next, a SIGTERM ends the run the same way
    previous = {s: signal.getsignal(s) for s in (*SIGNALS, signal.SIGHUP)}
    for s in SIGNALS:
        loop.add_signal_handler(s, on_signal, s)
    loop.add_signal_handler(signal.SIGHUP, hangups.set)  # (the controller reads it once it runs: kept till then)
    # one that came before, where Python swallowed what the CLI's handler raised, stops it all the same
    came = take_received() if any(raising(previous[s]) for s in SIGNALS) else None
    if came is not None:
        on_signal(came)
    if noting(previous[signal.SIGHUP]) and take_hangup():  # (one sent while HTA started)
        hangups.set()
    try:
        workflow = args.workflow_path
        assert workflow is not None
        run_dir, default_log = paths_for(workflow)
        # (a log from before runs were numbered would be moved into it: then the folder holds more than this run's)
        fresh = not run_dir.exists() and not (default_log.is_file() and not default_log.is_symlink())
        lock = RunLock(run_dir, workflow)
        keep = False  # (the run folder of a run that never started is not left behind)
        try:
            running = other_makeflows(args.workdir, workflow.resolve())
            if running:
                raise UsageError(f"makeflow (pid {', '.join(map(str, running))}) is already running {workflow.name} in "
                                 f"this folder: wait for it to end (two would write one log and the same outputs)")
            try:
                busy = bool(port) and not port_free(port)
            except MakeflowError as exc:
                raise UsageError(str(exc)) from None
            if busy:
                await _port_or_refuse(port, stop)
            before = default_log.resolve() if default_log.is_symlink() and default_log.exists() else None
            earlier = set_aside(scaling_log_path) if scaling_log_path is not None else None

            def put_earlier_back() -> None:
                if earlier is not None and scaling_log_path is not None:
                    earlier.replace(scaling_log_path)
            try:
                run = Submission(args, run_dir, scaling_log_path or new_run_log(run_dir, default_log),
                                 policy=policy, backend=backend, config=config, lookahead=lookahead, port=port,
                                 epoch=epoch or time.time(), record=record, stall_timeout_s=stall_timeout_s,
                                 stop=stop, signalled=signalled,
                                 view=view or ViewOptions(status=False, verbosity="quiet"),
                                 hangups=hangups, reread=reread)
            except BaseException:
                put_earlier_back()
                raise
            keep = True
            result = await run.run()
            keep = not result.never_started
            if result.never_started:  # nothing ran: no log of it, and the link is the last run's
                result.scaling_log.unlink(missing_ok=True)
                put_earlier_back()  # (the earlier run's log, where it was)
                if scaling_log_path is None:
                    if before is not None:
                        point_latest_at(default_log, before)
                    else:
                        default_log.unlink(missing_ok=True)
            else:
                if earlier is not None:
                    result.warnings.append(f"the scaling log {scaling_log_path} held an earlier run's log: kept as "
                                           f"{earlier}")
                if result.did_nothing and scaling_log_path is None and before is not None:
                    # a run that ran nothing is not the run `hta report WORKFLOW` should show: the
                    # link goes back to the last one that did (this one's log is kept, numbered)
                    point_latest_at(default_log, before)
            return result
        finally:
            if fresh and not keep:  # (under the lock: a run that takes it next finds no folder half gone)
                shutil.rmtree(run_dir, ignore_errors=True)
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


class Submission:
    """One run of the workflow, under its lock; :meth:`run` once."""

    def __init__(self, args: MakeflowArgs, run_dir: Path, log_path: Path, *, policy: Policy,
                 backend: WorkerBackend, config: ControllerConfig, lookahead: bool, port: int, epoch: float,
                 record: Path | None, stall_timeout_s: float | None, stop: asyncio.Event, signalled: list[int],
                 view: ViewOptions, hangups: asyncio.Event | None = None, reread: ConfigReread | None = None):
        self.log_path = log_path
        self.run_dir = run_dir
        #: set by SIGHUP; :meth:`_reread_on_hangups` reads the config file again
        self.hangups = hangups or asyncio.Event()
        self.reread = reread
        self.policy, self.backend, self.config = policy, backend, config
        self.lookahead, self.port, self.epoch, self.record = lookahead, port, epoch, record
        self.stop, self.signalled, self.view = stop, signalled, view
        self.writer = open_scaling_log(log_path)
        self.mf = MakeflowRun(args, run_dir, port=port, stall_timeout_s=stall_timeout_s)
        self.workflow = self.mf.workflow
        self.learner = IncrementalCategoryLearner()
        self.watch = FailureWatch(self.workflow, self.mf, backend, self.learner, epoch)
        self.mflog = MakeflowLog(self.mf.log_path)
        self.summaries: SummaryDirectory | LogSummaries | None = None
        self.exit_code = 1
        self.error: str | None = None
        self.did_nothing = False
        self.note: str | None = None
        self.master_started = False
        self.stopped: list[WorkerRecord] = []

    async def run(self) -> SubmitResult:
        self.writer.write(RunRecord(
            started_at=self.epoch, workflow=str(self.workflow), policy=self.policy.name, backend=self.backend.name,
            worker_shape=self.config.worker_shape, min_workers=self.config.min_workers,
            max_workers=self.config.max_workers))
        self.summaries = await self._summaries()
        try:
            upcoming = await self._lookahead()
            self._check_stop()
            await self._run_workflow(upcoming)
        except _NoMaster:
            self.exit_code, self.did_nothing = 0, True
            said = [line.strip() for line in self.mf.output_tail(5) if line.strip()]
            if said:  # what makeflow did instead ("nothing left to do.", or what --clean removed)
                self.note = said[-1]
        except _Stopped:
            self.exit_code = 128 + self.signalled[0]
            self.error = (f"interrupted by {signal_name(self.signalled[0])} while starting; stopped everything "
                          f"it had started")
        except Exception as exc:  # noqa: BLE001 — MakeflowError and anything unexpected: clean up, then report
            self.error = str(exc) or type(exc).__name__
            hint = run_from_elsewhere(self.error, self.workflow, self.mf.workdir)
            self.error = self.error.rstrip(".") + hint if hint else self.error
        finally:
            await self._stop_everything()
        await self._check_failed_rules()
        return self._result()

    # -- the steps, in order ------------------------------------------------------------
    async def _summaries(self) -> SummaryDirectory | LogSummaries:
        """Where completed tasks are learned from: the resource monitor's summaries, or
        makeflow's log where makeflow cannot run the monitor."""
        if self.mf.monitor_dir is not None:
            return SummaryDirectory(self.mf.monitor_dir)
        log.warning("makeflow cannot run its resource monitor with %s: HTA learns runtimes from makeflow's log "
                    "and sizes tasks from their categories' declared resources", self.mf.monitor_off)
        await self.watch.rules()  # read now, off the loop: category_of is asked during the controller's steps
        return LogSummaries(self.mf.log_path, self.watch.category_of, since=self.epoch)

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise _Stopped()

    async def _lookahead(self) -> Lookahead | None:
        if not self.lookahead:
            return None
        try:
            dag = await asyncio.to_thread(load_dag, self.workflow, self.mf.format_options(), self.mf.cwd)
        except (ValueError, OSError, subprocess.SubprocessError) as exc:
            log.warning("%s", lookahead_lost(str(exc)))
            return None
        size_mb = sizes_in(self.mf.workdir)
        shared = await asyncio.to_thread(dag.shared_input_sizes, size_mb)
        own = await asyncio.to_thread(dag.task_input_sizes, size_mb)
        if shared or own:  # (before the controller is made, and before a recording writes the config down)
            self.config = dataclasses.replace(self.config, shared_inputs=shared, task_inputs_mb=own)
        return Lookahead(dag, self.mflog)

    async def _run_workflow(self, upcoming: Lookahead | None) -> None:
        """Start makeflow and the backend, then the controller beside the watch and the view,
        until makeflow exits (or a signal, or the watch, stops it)."""
        port = await self.mf.start()
        self.master_started = True
        self._check_stop()
        if port is None:  # makeflow did its job without a master (--clean, nothing left to do)
            raise _NoMaster()
        await self.backend.start("127.0.0.1", port)
        self._check_stop()
        # the master's transactions log keeps the task table current between its reads
        async with MasterStatusClient("127.0.0.1", port, transactions_log=self.mf.transactions_log) as master:
            if not await _master_answers(master, self.mf, self.stop):  # it found nothing to do and left
                raise _NoMaster()
            assert self.summaries is not None
            deps = ControllerDeps(master=master, backend=self.backend, summaries=self.summaries, upcoming=upcoming,
                                  clock=time.time)
            if self.record is not None:
                deps = deps.recorded(self.record, self.config, self.policy, self.epoch)
            controller = Controller(policy=self.policy, learner=self.learner, scaling_log=self.writer,
                                    config=self.config, epoch=self.epoch, master=deps.master, backend=deps.backend,
                                    summaries=deps.summaries, upcoming=deps.upcoming, clock=deps.clock)
            self.watch.more.append(lambda: budget_spent(controller.plan, controller.last_observation))
            finished = asyncio.Event()
            ctl = asyncio.create_task(controller.run(finished))
            viewing = asyncio.create_task(show(controller, self.view, self.policy, self.backend, self.workflow,
                                               self.epoch, finished, run_dir=self.run_dir))
            waiter = asyncio.create_task(self.mf.wait())
            stopper = asyncio.create_task(self.stop.wait())
            watcher = asyncio.create_task(self.watch.run())
            rereader = asyncio.create_task(self._reread_on_hangups(controller))
            await asyncio.wait({waiter, stopper, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                if self.stop.is_set():
                    self.error = f"interrupted by {signal_name(self.signalled[0])}; stopped makeflow and every worker"
                elif watcher.done() and watcher.exception() is None:
                    self.error = watcher.result()
                finished.set()  # no more steps: the master is going away
                await self.mf.stop()
            for t in (stopper, watcher, rereader):
                t.cancel()
            self.exit_code = await waiter
            finished.set()
            await ctl
            await viewing
        if self.signalled:
            self.exit_code = 128 + self.signalled[0]
        elif self.error is not None:
            self.exit_code = 1
        elif self.exit_code != 0:
            said = (f"see its output: {self.mf.output_path}" if self.mf.proc is not None
                    and self.mf.proc.returncode is not None and self.mf.proc.returncode < 0 else self.mf.last_error())
            self.error = f"makeflow failed ({self.mf.ended}): {said}"

    async def _reread_on_hangups(self, controller: Controller) -> None:
        """Each SIGHUP (those that came while the run started included, several at once as
        one): read the config file again and hand the controller what changed."""
        while True:
            await self.hangups.wait()
            self.hangups.clear()  # (before reading: one that comes while it reads is read again)
            if self.reread is None:
                log.warning("SIGHUP: this run has no configuration to read again: nothing changed")
                continue
            try:
                self.reread.apply(controller)
            except Exception as exc:  # noqa: BLE001 — a SIGHUP must not end the run
                log.warning("SIGHUP: reading the configuration again failed (%s): nothing changed", exc)

    async def _stop_everything(self) -> None:
        self.stopped = await self.backend.stop_all(time.time() - self.epoch)
        if self.mf.running:
            await self.mf.stop()
        self.mf.remove_monitor_wrappers()

    async def _check_failed_rules(self) -> None:
        """makeflow 8.0 exits 0 even when rules failed for good; a user must not miss that.
        (A signal seen before the run ended made the exit code 128 + N; one while stopping
        changes nothing.)"""
        assert self.summaries is not None
        learned = self.summaries.poll()
        if learned:
            self.learner.add_all(learned)
        self.mflog.poll()
        last = self.mflog.latest
        if self.exit_code != 0:
            return
        failed = self.mflog.failed_for_good(time.time(), quiet_s=0.0, since=self.epoch)
        if failed or (last is not None and (last.failed or last.aborted)):
            self.exit_code = 1
            n = len(failed) or (last.failed + last.aborted if last else 0)
            self.watch.log.poll()
            first = (await self.watch.explain(failed[:1]))[0] if failed else ""
            self.error = (f"makeflow finished but {n} rule(s) failed" + (f": {first}" if first else "")
                          + f" (makeflow's output: {self.mf.output_path})")

    def _result(self) -> SubmitResult:
        now = time.time() - self.epoch
        mflog, last = self.mflog, self.mflog.latest
        lost = [e for e in [*self.writer.records, *self.stopped] if isinstance(e, WorkerRecord) and e.took_work]
        # runtime: from submission (t = 0) until makeflow finished the workflow
        finished_at = (mflog.completed_at - self.epoch) if mflog.completed_at and mflog.completed_at >= self.epoch \
            else now
        summary = end_run(self.writer, t=now, stopped=self.stopped, categories=self.learner.models(), end=EndRecord(
            t=round(now, 3), exit_code=self.exit_code, runtime_s=round(finished_at, 3),
            tasks_done=last.complete if last else 0, tasks_failed=last.failed if last else 0,
            tasks_done_before=max(0, last.complete - mflog.completed_this_run) if last else 0,
            # makeflow's own retries, and the tasks the master ran again because their worker went away
            tasks_retried=mflog.retried + sum(e.tasks_lost for e in lost), tasks_resumed=mflog.resumed,
            lost_work_core_s=round(sum(e.lost_work_core_s for e in lost), 3),
        ), source=str(self.log_path))
        warnings = [self.writer.trouble] if self.writer.trouble else []
        never_started = self.error is not None and not self.master_started and not self.signalled
        return SubmitResult(self.exit_code, summary, self.log_path, self.mf.output_tail(), self.error, warnings,
                            self.did_nothing, self.note, never_started)


def run_makeflow(options: MakeflowOptions, verbosity: str = "normal", mode: str | None = None,
                 reread: ConfigReread | None = None) -> SubmitResult:
    """``hta makeflow`` as a function: check, build the policy and backend, run, return the result.
    ``reread``: what a SIGHUP reads again (:mod:`hta.submit.reload`).

    Raises :class:`UsageError` (one line) for anything the user must fix before a run starts."""
    args = options.check()
    if options.record is not None:
        try:  # refuse before anything starts, as for --log
            open(options.record, "a").close()
        except OSError as exc:
            raise UsageError(f"cannot write the record file {options.record} ({exc.strerror or exc}): "
                             f"choose another file with --record") from None
    try:
        policy = make_policy(options.policy_spec())  # (with --deadline or --budget as its settings)
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
                       status_token=options.status_token, control_token=options.control_token,
                       verbosity=verbosity, mode=mode)
    with asyncio.Runner() as runner:
        quiet_in_loop(runner.get_loop())
        return runner.run(submit(args, policy=policy, backend=backend, config=options.controller_config(),
                                 view=view, scaling_log_path=options.log, lookahead=options.lookahead, port=port,
                                 epoch=epoch, record=options.record, stall_timeout_s=options.stall_timeout_s,
                                 reread=reread))
