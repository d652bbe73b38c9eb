"""A user's own Makeflow as a simulator workload, in the world its last run measured.

``hta simulate --workflow Makeflow`` answers "what would this policy, cap or deadline do to
my run?" before a day is spent on it. The DAG and categories come from the file through
the project's one Makeflow reader (:func:`workqueue_bridge.dag.load_dag`, makeflow_viz),
so a rule here is the rule ``hta makeflow`` would run. What each rule takes, and what the
world charges, come from the workflow's last run when there is one, because a guess of a
runtime is worth less than one measurement of it:

- each rule's runtime, cores and memory: its resource monitor summary
  (``WORKFLOW.hta/monitor/resource-rule-N.summary``) when it belongs to that run, else its
  category's learned model in the run's scaling log;
- the master's own time per task (dispatch, transfers, the monitor's start, the result):
  Work Queue's RUNNING → WAITING_RETRIEVAL of each rule (transactions log, matched through
  makeflow's log) less the rule's measured runtime, per category;
- the workers' latency (request → connected), shape and cap, from the run's records.

Without a run, runtimes and sizes come from what the categories declare and stated
defaults. Everything not measured is said as an assumption, so a verdict is read with
what it rests on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hta.controller import ControllerConfig
from hta.scaling_log import CategoriesRecord, EndRecord, LogError, RunRecord, WorkerRecord, paths_for, read_records
from hta.sim.workload import DEFAULT_MEMORY_MB, SimTask, Workload, WorkloadError
from resource_monitor.model import CategoryModel
from workqueue_bridge.dag import Dag, Rule, load_dag, sizes_in
from workqueue_bridge.monitor_summaries import TaskSummary, parse_summary

#: a rule's runtime when nothing measured it and nothing else is known: a guess, said as one
DEFAULT_RUNTIME_S = 60.0
#: the names a folder's workflow is looked for under, as makeflow users name it
MAKEFLOW_NAMES = ("Makeflow", "makeflow", "Makeflow.mf", "workflow.mf")
#: a record of the run may be this late or early against its own clock (the makeflow log and
#: the transactions log are written by other processes)
SLACK_S = 5.0


@dataclass
class MeasuredRun:
    """What one real run of the workflow measured that the simulated world takes as given."""

    log: Path
    backend: str
    policy: str
    max_workers: int
    worker_cores: float
    worker_memory_mb: float
    runtime_s: float | None
    started_at: float
    #: request → connected of each worker that connected
    latencies_s: list[float] = field(default_factory=list)
    categories: dict[str, CategoryModel] = field(default_factory=dict)

    @property
    def ends_at(self) -> float:
        return self.started_at + (self.runtime_s if self.runtime_s is not None else 7 * 86400.0)

    def latency(self) -> tuple[float, float] | None:
        """(mean, sd) of the latencies, None if no worker connected."""
        if not self.latencies_s:
            return None
        sd = statistics.stdev(self.latencies_s) if len(self.latencies_s) > 1 else 0.0
        return statistics.fmean(self.latencies_s), sd


@dataclass
class OwnWorkflow:
    """The workload, the world's figures the run measured (``ClusterModel`` fields), where
    each came from, and what was assumed."""

    workload: Workload
    run: MeasuredRun | None
    cluster: dict[str, Any] = field(default_factory=dict)
    measured: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def find_makeflow(path: Path) -> Path:
    """The Makeflow file ``path`` names: itself, or the one a folder holds."""
    if path.is_dir():
        for name in MAKEFLOW_NAMES:
            if (path / name).is_file():
                return path / name
        raise WorkloadError(f"folder {str(path)!r} holds no workflow file ({', '.join(MAKEFLOW_NAMES)}): give the "
                            f"Makeflow file itself, or a WfCommons JSON instance")
    return path


def looks_like_json(path: Path) -> bool:
    """A ``.json`` file, or one that starts as JSON does (``{`` or ``[``): a Makeflow never
    does, so a WfFormat instance is told from a Makeflow without running makeflow."""
    if path.suffix.lower() == ".json":
        return True
    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip()
    except OSError:
        return False
    return head[:1] in (b"{", b"[")


def read_dag(workflow: Path) -> Dag:
    """The workflow's rules through makeflow_viz, or one line naming both forms the option takes."""
    try:
        dag = load_dag(workflow)
    except (OSError, ValueError) as exc:
        said = str(exc).removeprefix(f"makeflow_viz could not read {workflow.name}: ")
        raise WorkloadError(f"{workflow}: neither WfCommons JSON nor a Makeflow makeflow can read ({said}): give a "
                            f"WfFormat JSON instance or a Makeflow file") from None
    if not dag.rules:
        raise WorkloadError(f"{workflow}: a Makeflow with no rules: nothing to simulate")
    return dag


def the_run(workflow: Path, from_run: Path | None) -> MeasuredRun | None:
    """The run to take figures from: ``from_run`` (a scaling log, or a workflow's run
    folder), else the workflow's latest (``WORKFLOW.scaling.jsonl``), else None. A simulated
    run's log measured nothing real: refused when named, passed over when found."""
    if from_run is None:
        latest = paths_for(workflow)[1]
        if not latest.exists():
            return None
        run = read_run(latest)
        return None if run is None else run
    log = from_run
    if from_run.is_dir():
        log = from_run / "runs"
        logs = sorted(log.glob("run-*.scaling.jsonl")) if log.is_dir() else []
        if not logs:
            raise WorkloadError(f"--from-run {str(from_run)!r}: a folder with no runs/run-*.scaling.jsonl: give a "
                                f"scaling log (WORKFLOW.scaling.jsonl) or a run folder (WORKFLOW.hta)")
        log = logs[-1]
    run = read_run(log)
    if run is None:
        raise WorkloadError(f"--from-run {str(from_run)!r}: a simulated run's log measured nothing real: give the "
                            f"log of an hta makeflow run")
    return run


def read_run(log: Path) -> MeasuredRun | None:
    """A real run's figures from its scaling log (None for a simulated run's)."""
    try:
        records, _ = read_records(log)
    except LogError as exc:
        raise WorkloadError(f"cannot use the run: {exc}") from None
    head = next((r for r in records if isinstance(r, RunRecord)), None)
    if head is None:
        raise WorkloadError(f"{log}: a scaling log with no run record: give another with --from-run")
    if head.simulated:
        return None
    end = next((r for r in records if isinstance(r, EndRecord)), None)
    cats = [r for r in records if isinstance(r, CategoriesRecord)]
    return MeasuredRun(
        log=log, backend=head.backend, policy=head.policy, max_workers=head.max_workers,
        worker_cores=head.worker_shape.cores, worker_memory_mb=head.worker_shape.memory_mb,
        runtime_s=end.runtime_s if end else None, started_at=head.started_at,
        latencies_s=[r.latency_s for r in records
                     if isinstance(r, WorkerRecord) and r.event == "connected" and r.latency_s is not None],
        categories=cats[-1].categories if cats else {})


def monitor_summaries(workflow: Path, run: MeasuredRun) -> dict[int, TaskSummary]:
    """Each rule's resource monitor summary that the run wrote (by node id)."""
    folder = paths_for(workflow)[0] / "monitor"
    out: dict[int, TaskSummary] = {}
    for p in folder.glob("resource-rule-*.summary") if folder.is_dir() else ():
        try:
            node = int(p.name.removeprefix("resource-rule-").removesuffix(".summary"))
            s = parse_summary(p.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            continue
        if s.succeeded and s.end is not None and run.started_at - SLACK_S <= s.end <= run.ends_at + SLACK_S:
            out[node] = s
    return out


def _lines(path: Path, since: float, until: float) -> Iterable[list[str]]:
    """The fields of each line of a CCTools log whose first field (µs) falls in the window."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        p = line.split()
        if line.startswith("#") or len(p) < 4 or not p[0].isdigit():
            continue
        if since <= int(p[0]) / 1e6 <= until:
            yield p


def task_spans(transactions: Path, makeflowlog: Path, since: float = 0.0,
               until: float = math.inf) -> dict[int, float]:
    """Each rule's time on a worker, by makeflow node id: RUNNING → WAITING_RETRIEVAL in Work
    Queue's transactions log, matched to the rule through makeflow's log (node → job id),
    both read within [``since``, ``until``] (Unix s): a master numbers its tasks from 1 each
    run, so another run's lines would match the wrong rules."""
    node_of: dict[int, int] = {}
    for p in _lines(makeflowlog, since, until):
        if p[2] == "1":  # submitted: node, job id
            node_of[int(p[3])] = int(p[1])
    started: dict[int, float] = {}
    spans: dict[int, float] = {}
    for p in _lines(transactions, since, until):
        if len(p) < 5 or p[2] != "TASK" or not p[3].isdigit():
            continue
        job = int(p[3])
        if p[4] == "RUNNING":
            started[job] = int(p[0]) / 1e6
        elif p[4] == "WAITING_RETRIEVAL" and job in started and job in node_of:
            spans[node_of[job]] = int(p[0]) / 1e6 - started.pop(job)
    return spans


def _task(rule: Rule, summary: TaskSummary | None, model: CategoryModel | None) -> tuple[SimTask, str]:
    """The rule as a simulated task, and where its runtime came from."""
    declared = rule.request
    if summary is not None:
        runtime, source = summary.wall_time_s, "monitor"
        peak_cores, avg_cores, memory = summary.cores, summary.cores_avg, summary.memory_mb
    elif model is not None and model.measured and model.runtime_mean_s is not None:
        runtime, source = model.runtime_mean_s, "category"
        peak_cores, avg_cores, memory = model.peak.cores, model.peak.cores, model.peak.memory_mb
    else:
        runtime, source = DEFAULT_RUNTIME_S, "default"
        peak_cores, avg_cores, memory = 0.0, 0.0, 0.0
    cores = max(1, math.ceil(declared.cores)) if declared.cores else max(1, math.ceil(peak_cores - 0.05))
    util = min(1.0, avg_cores / cores) if avg_cores > 0 else 1.0
    return SimTask(id=str(rule.node_id), category=rule.category, runtime_s=max(runtime, 0.001), cores=cores,
                   memory_mb=memory or declared.memory_mb or DEFAULT_MEMORY_MB, cpu_util=util,
                   parents=[str(p) for p in rule.parents]), source


def own_workflow(path: Path, from_run: Path | None = None) -> OwnWorkflow:
    """The Makeflow at ``path`` (a file, or a folder holding one) as a workload, with its
    last run's (or ``from_run``'s) figures."""
    workflow = find_makeflow(path).resolve()
    dag = read_dag(workflow)
    run = the_run(workflow, from_run)
    summaries = monitor_summaries(workflow, run) if run else {}
    models = run.categories if run else {}
    size_mb = sizes_in(workflow.parent)
    tasks, sources = [], {"monitor": 0, "category": 0, "default": 0}
    for rule in dag.rules:
        task, source = _task(rule, summaries.get(rule.node_id), models.get(rule.category))
        task.inputs = tuple((f, mb) for f in rule.inputs if (mb := size_mb(f)))
        task.output_mb = sum(size_mb(f) or 0.0 for f in rule.outputs)
        tasks.append(task)
        sources[source] += 1
    declared = all(r.request.cores > 0 for r in dag.rules)
    out = OwnWorkflow(Workload(workflow.parent.name if workflow.name in MAKEFLOW_NAMES else workflow.stem,
                               tasks, declared=declared), run)
    n = len(tasks)
    if sources["monitor"]:
        out.measured.append(f"{sources['monitor']} of {n} rules' runtime, cores and memory: their resource monitor "
                            f"summaries")
    if sources["category"]:
        out.measured.append(f"{sources['category']} of {n} rules' runtime and size: their category's mean in the run")
    if sources["default"]:
        why = "no run of this workflow measured them" if run is None else "the run measured no task of their category"
        out.assumptions.append(f"{sources['default']} of {n} rules run {DEFAULT_RUNTIME_S:g} s ({why}; run it once "
                               f"with hta makeflow, or give --from-run)")
    if not declared:
        out.assumptions.append("rules of categories that declare no CORES take a whole worker, as Work Queue gives them")
    if run is not None:
        _world_from(run, workflow, summaries, tasks, out)
    return out


def _world_from(run: MeasuredRun, workflow: Path, summaries: dict[int, TaskSummary], tasks: list[SimTask],
                out: OwnWorkflow) -> None:
    """The simulated cluster as the run found it: its workers' shape, cap and latency, and the
    master's own time per task."""
    out.cluster.update(max_nodes=run.max_workers, start_nodes=0, node_cores=run.worker_cores,
                       node_memory_mb=run.worker_memory_mb)
    cores = f"{run.worker_cores:g} core{'' if run.worker_cores == 1 else 's'}"
    out.measured.append(f"workers of {cores}, {run.worker_memory_mb:,.0f} MB, at most "
                        f"{run.max_workers} ({run.backend} backend, {run.log})")
    if (lat := run.latency()) is not None:
        out.cluster.update(latency_mean_s=lat[0], latency_sd_s=lat[1])
        out.measured.append(f"workers' latency {lat[0]:.1f} ± {lat[1]:.1f} s ({len(run.latencies_s)} connected)")
    else:
        out.assumptions.append("no worker connected in that run: the latency is --latency-mean's")
    spans = task_spans(workflow.with_name(workflow.name + ".wqlog.tr"), workflow.with_name(workflow.name + ".makeflowlog"),
                       run.started_at - SLACK_S, run.ends_at + SLACK_S)
    by_category: dict[str, list[float]] = {}
    for t in tasks:
        node = int(t.id)
        if node in spans and node in summaries:
            by_category.setdefault(t.category, []).append(max(0.0, spans[node] - summaries[node].wall_time_s))
    if by_category:
        overhead = {c: statistics.fmean(v) for c, v in by_category.items()}
        out.cluster["task_overhead_by_category_s"] = overhead
        out.measured.append("the master's own time per task: " + ", ".join(
            f"{c} {v:.2f} s" for c, v in sorted(overhead.items())))
    else:
        out.assumptions.append("the master adds nothing to a task's runtime (the run left no transactions log or "
                               "monitor summaries to measure it from)")
    interval = ControllerConfig.__dataclass_fields__["min_interval_s"].default  # (hta makeflow's too)
    out.cluster["min_interval_s"] = interval
    out.assumptions.append(f"decisions at most every {interval:g} s (hta makeflow's default --min-interval)")
