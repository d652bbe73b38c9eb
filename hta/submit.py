"""``hta makeflow``: run a workflow with makeflow and autoscale its workers.

:func:`run_makeflow` is the whole command as a function (the CLI only parses
arguments into :class:`MakeflowOptions` and prints the result): it checks the
options, makes the policy and the backend (by name, from the registry in
:mod:`hta.backends`), refuses a policy that needs a signal the backend cannot
measure, and runs :func:`submit`.

The submission path, :func:`submit`: start ``makeflow -T wq``
(workqueue_bridge), start the backend, run the controller until makeflow
exits, then stop every worker, write the ``end`` record and return makeflow's
exit code. SIGINT and SIGTERM stop makeflow first (it aborts its jobs), then
the workers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hta.backends import BackendOptions, RunContext, make_backend
from hta.backends.base import WorkerBackend
from hta.controller import Controller, ControllerConfig
from hta.errors import UsageError
from hta.model import Resources
from hta.policies.base import Policy, check_signals, make_policy
from hta.scaling_log import CategoriesRecord, EndRecord, RunRecord, ScalingLogWriter
from hta.summary import RunSummary, summarize
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.dag import Lookahead, load_dag
from workqueue_bridge.makeflow import MakeflowError, MakeflowRun, check_extra_args, check_installed
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


def paths_for(workflow: Path) -> tuple[Path, Path]:
    """(run directory, scaling log) next to the makeflow logs of ``workflow``."""
    wf = workflow.resolve()
    return wf.parent / f"{wf.name}.hta", wf.parent / f"{wf.name}.scaling.jsonl"


async def submit(
    workflow: Path,
    *,
    policy: Policy,
    backend: WorkerBackend,
    config: ControllerConfig,
    makeflow_args: list[str] | None = None,
    scaling_log_path: Path | None = None,
    lookahead: bool = True,
    port: int = 0,
    epoch: float | None = None,
    record: Path | None = None,
) -> SubmitResult:
    """Run ``workflow`` to its end; ``record`` writes every answer the controller reads to
    that file, for :func:`hta.replay.replay`."""
    run_dir, default_log = paths_for(workflow)
    log_path = scaling_log_path or default_log
    mf = MakeflowRun(workflow, run_dir, makeflow_args, port=port)
    writer = ScalingLogWriter(log_path)
    epoch = epoch or time.time()
    writer.write(RunRecord(
        started_at=epoch, workflow=str(workflow), policy=policy.name, backend=backend.name,
        worker_shape=config.worker_shape, min_workers=config.min_workers, max_workers=config.max_workers,
    ))
    learner = CategoryLearner()
    summaries = SummaryDirectory(mf.monitor_dir)
    controller: Controller | None = None
    exit_code = 1
    error: str | None = None
    stop = asyncio.Event()
    signalled: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signalled.append(signum)
        stop.set()

    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, on_signal, s)
    mflog = MakeflowLog(mf.log_path)
    upcoming = None
    try:
        if lookahead:
            try:
                dag = await asyncio.to_thread(load_dag, workflow)
            except (ValueError, OSError, subprocess.SubprocessError) as exc:
                log.warning("no DAG lookahead: %s", exc)
            else:
                upcoming = Lookahead(dag, mflog)
        port = await mf.start()
        await backend.start("127.0.0.1", port)
        async with MasterStatusClient("127.0.0.1", port) as master:
            deps = dict(master=master, backend=backend, summaries=summaries, upcoming=upcoming, clock=time.time)
            if record is not None:
                deps = _recording(deps, record, config, policy, epoch)
            controller = Controller(policy=policy, learner=learner, scaling_log=writer, config=config,
                                    epoch=epoch, **deps)
            finished = asyncio.Event()
            ctl = asyncio.create_task(controller.run(finished))
            waiter = asyncio.create_task(mf.wait())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                error = f"interrupted by signal {signalled[0]}; stopping makeflow and every worker"
                await mf.stop()
            stopper.cancel()
            exit_code = await waiter
            finished.set()
            await ctl
            if signalled:
                exit_code = 128 + signalled[0]
            elif exit_code != 0:
                error = f"makeflow failed (exit {exit_code}): {mf.last_error()}"
    except Exception as exc:  # MakeflowError and anything unexpected: clean up, then report
        error = str(exc)
        if mf.running:
            await mf.stop()
    finally:
        now = time.time() - epoch
        for e in await backend.stop_all(now):
            writer.write(e)
        if mf.running:
            await mf.stop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(s)

    summaries_new = summaries.poll()
    if summaries_new:
        learner.add_all(summaries_new)
    mflog.poll()
    last = mflog.latest
    now = time.time() - epoch
    writer.write(CategoriesRecord(t=round(now, 3), categories=learner.models()))
    if exit_code == 0 and last is not None and (last.failed or last.aborted):
        # makeflow 8.0 exits 0 even when rules failed for good; a user must not miss that
        exit_code = 1
        error = (f"makeflow finished but {last.failed + last.aborted} rule(s) failed "
                 f"(makeflow's output: {mf.output_path})")
    # runtime: from submission (t = 0) until makeflow finished the workflow
    finished_at = (mflog.completed_at - epoch) if mflog.completed_at else now
    writer.write(EndRecord(
        t=round(now, 3), exit_code=exit_code, runtime_s=round(finished_at, 3),
        tasks_done=last.complete if last else 0, tasks_failed=last.failed if last else 0,
        tasks_retried=mflog.retried,
    ))
    writer.close()
    return SubmitResult(exit_code, summarize(writer.records, str(log_path)), log_path, mf.output_tail(), error)


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

    workflow: Path
    makeflow_args: list[str] = Field(default_factory=list)
    backend: str = "local"
    backend_options: BackendOptions = Field(default_factory=BackendOptions)
    policy: str = "hta"
    #: master port (None: the backend's default — any free port locally, a fixed one on Kubernetes)
    port: int | None = Field(None, ge=0)
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

    def check(self) -> None:
        """Cross-field checks, as one-line :class:`UsageError`."""
        if not self.workflow.is_file():
            raise UsageError(f"workflow file {str(self.workflow)!r} not found: give the path to a Makeflow file")
        if self.min_workers > self.max_workers:
            raise UsageError(f"--min-workers ({self.min_workers}) is above --max-workers ({self.max_workers})")
        if self.min_interval_s > self.max_interval_s:
            raise UsageError(f"--min-interval ({self.min_interval_s:g}) is above --max-interval "
                             f"({self.max_interval_s:g})")

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


def run_makeflow(options: MakeflowOptions) -> SubmitResult:
    """``hta makeflow`` as a function: check, build the policy and backend, run, return the result.

    Raises :class:`UsageError` (one line) for anything the user must fix before a run starts."""
    options.check()
    extra = list(options.makeflow_args)
    try:
        policy = make_policy(options.policy)
        check_installed()
        check_extra_args(extra)
    except (ValueError, MakeflowError) as exc:
        raise UsageError(str(exc)) from None
    epoch = time.time()
    run_dir, _ = paths_for(options.workflow)
    try:
        backend = make_backend(options.backend, options.backend_options,
                               RunContext(workflow=options.workflow, run_dir=run_dir, epoch=epoch))
        check_signals(policy, backend.name, backend.signals, getattr(backend, "signals_why", ""))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    port = getattr(backend, "default_port", 0) if options.port is None else options.port
    return asyncio.run(submit(options.workflow, policy=policy, backend=backend,
                              config=options.controller_config(), makeflow_args=extra,
                              scaling_log_path=options.log, lookahead=options.lookahead, port=port, epoch=epoch,
                              record=options.record))
