"""What CSS did on each worker of a run, read back from the workers' CSS decision logs.

Every worker runs CSS beside its tasks and logs its decisions on its own node
(``hta.node.css.daemon``: a line per task per interval, one per trial). Workers the
local backend starts write that log into the run directory
(``WORKFLOW.hta/logs/WORKER.css.jsonl``), next to the run's scaling log in
``WORKFLOW.hta/runs/``; ``hta report`` shows it per worker, so whoever reads the
report sees whether CSS pinned anything, what it classed the tasks as, and whether
its plan won its trials against the kernel's scheduling. Slurm jobs and worker pods
keep their log where they run: a report on such a run has no such rows.

The worker logs are shared by the runs of one workflow (worker names start again at
``w1`` each run), so only the lines within the run's own time are read.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel


class WorkerCSS(BaseModel):
    """One worker's CSS over a run."""

    worker: str
    #: the futex counter it used (``perf``, ``bpftrace``, ``proc``)
    backend: str | None
    #: how the plan reached the tasks: ``affinity``, ``cpuset`` or ``dry-run``
    pinned_by: str | None
    #: task·intervals it classified (a line per task per management interval)
    task_intervals: int
    #: of those, classed I/O-intensive (futex-heavy)
    io_intervals: int
    #: of those, pinned by the plan to fewer cores than the worker has (the plan applied,
    #: and different from the kernel's every core)
    pinned_intervals: int
    trials: int
    trials_kept: int
    #: trials decided by the tasks' durations (kinds with enough ends), not the CPU they received
    trials_by_ends: int = 0
    #: of the kept, those the tasks' durations decided
    kept_by_ends: int = 0


def css_logs_beside(scaling_log: Path) -> list[Path]:
    """The workers' CSS logs of the run directory that holds ``scaling_log``
    (``WORKFLOW.hta/runs/run-NNN.scaling.jsonl`` → ``WORKFLOW.hta/logs/*.css.jsonl``)."""
    run_dir = scaling_log.resolve().parent
    if run_dir.name == "runs":
        run_dir = run_dir.parent
    logs = run_dir / "logs"
    return sorted(logs.glob("*.css.jsonl"), key=lambda p: (len(p.name), p.name)) if logs.is_dir() else []


def summarize_css(paths: list[Path], start: float, end: float) -> list[WorkerCSS]:
    """Per worker log, its lines from ``start`` to ``end`` (Unix time) summed up; a log
    with none in that time (another run's worker) is left out, as are unreadable lines."""
    out = []
    for path in paths:
        recs = []
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # (a line cut short by a killed worker)
            if isinstance(rec, dict) and isinstance(rec.get("time"), (int, float)) and start <= rec["time"] <= end:
                recs.append(rec)
        tasks = [r for r in recs if "container" in r]
        trials = [r for r in recs if "trial" in r]
        if not tasks and not trials:
            continue
        every: set = set().union(*(set(r.get("cpus") or ()) for r in tasks))
        out.append(WorkerCSS(
            worker=path.name.removesuffix(".css.jsonl"),
            backend=next((r.get("backend") for r in tasks), None),
            pinned_by=next((r.get("pinned_by") for r in tasks), None),
            task_intervals=len(tasks),
            io_intervals=sum(1 for r in tasks if r.get("class") == "io"),
            pinned_intervals=sum(1 for r in tasks if r.get("plan") and r.get("pinned_by") != "dry-run"
                                 and set(r.get("cpus") or ()) < every),
            trials=len(trials),
            trials_kept=sum(1 for r in trials if r.get("trial") == "plan kept"),
            trials_by_ends=sum(1 for r in trials if r.get("evidence") == "completions"),
            kept_by_ends=sum(1 for r in trials if r.get("evidence") == "completions" and r.get("trial") == "plan kept"),
        ))
    return out


CSS_HEADER = ["worker", "backend", "pins by", "samples", "I/O", "pinned", "trials kept", "by task ends"]
#: what the columns mean, printed under the table
CSS_CAPTION = ("samples: a task seen in one management interval; I/O: of them, classed futex-heavy; "
               "pinned: of them, run on fewer cores by CSS's plan; trials kept: trials the plan won "
               "against the kernel's scheduling; by task ends: trials the tasks' durations decided (the "
               "rest: the CPU time the tasks received), and of them kept")


def css_rows(workers: list[WorkerCSS]) -> list[list[str]]:
    def pct(n: int, of: int) -> str:
        return f"{100 * n / of:.0f} %" if of else "—"

    return [[w.worker, w.backend or "—", w.pinned_by or "—", str(w.task_intervals),
             pct(w.io_intervals, w.task_intervals), pct(w.pinned_intervals, w.task_intervals),
             f"{w.trials_kept} of {w.trials}", f"{w.trials_by_ends} ({w.kept_by_ends} kept)"] for w in workers]
