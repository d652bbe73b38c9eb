"""``hta makeflow``: run a workflow with makeflow and autoscale its workers.

The submission path: start ``makeflow -T wq`` (workqueue_bridge), start the
backend, run the controller until makeflow exits, then stop every worker,
write the ``end`` record and return makeflow's exit code. SIGINT and SIGTERM
stop makeflow first (it aborts its jobs), then the workers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from hta.backends.base import WorkerBackend
from hta.controller import Controller, ControllerConfig
from hta.policies.base import Policy
from hta.scaling_log import CategoriesRecord, EndRecord, RunRecord, ScalingLogWriter
from hta.summary import RunSummary, summarize
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.dag import Lookahead, load_dag
from workqueue_bridge.makeflow import MakeflowRun
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
) -> SubmitResult:
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
            controller = Controller(
                master=master, backend=backend, policy=policy, learner=learner, summaries=summaries,
                scaling_log=writer, config=config, epoch=epoch, upcoming=upcoming,
            )
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
