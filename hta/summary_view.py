"""The one-screen summary ``hta makeflow`` prints at the end of a run."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from hta.console import PipeConsole
from hta.plural import counted, node_hours, span
from hta.summary import RunSummary


def _s(v: float | None, unit: str = "s", digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f} {unit}".strip()


def _shown_path(path: str | Path) -> str:
    """A path as a person typed it: relative to the current folder when it is inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def core_s(v: float | None, unit: str = "core·s") -> str:
    """A core·s (or node·s) figure as the summary and the report both show it: one decimal
    below 100, whole above."""
    if v is None:
        return "—"
    return f"{v:,.1f} {unit}".strip() if abs(v) < 100 else f"{v:,.0f} {unit}".strip()


def _earlier(s: RunSummary) -> str:
    """What an earlier run of the workflow had done: ``(9 before this run, 4 begun by the run
    before and run again from the start)``. A rule the run before had begun and not
    completed is run again whole (a Work Queue task cannot resume): never "resumed"."""
    parts = ([f"{s.tasks_done_before} before this run"] if s.tasks_done_before else []) + \
        ([f"{s.tasks_resumed} begun by the run before and run again from the start"] if s.tasks_resumed else [])
    return f" ({', '.join(parts)})" if parts else ""


def deadline_verdict(s: RunSummary) -> str | None:
    """Whether the run ended by its ``--deadline`` (the workflow's end, its runtime, against
    the deadline, both from the run's start), and by how much: ``1h40m: met, ended 22m before
    it``, ``1h40m: missed by 4m``. None without a deadline."""
    if s.plan is None or s.plan.deadline_s is None:
        return None
    deadline = s.plan.deadline_s
    ask, early = span(deadline), deadline - s.runtime_s
    if not s.complete:  # (a log still being written, or cut short: its last record is no end)
        last = f"the log's last record is at {span(s.runtime_s)}"
        if early < 0:
            return f"{ask}: missed by {span(-early)} at least (still running: {last})"
        return f"{ask}: not over yet ({last}, {span(early)} before it)"
    if s.exit_code not in (0, None):
        return f"{ask}: not met, the workflow failed (exit code {s.exit_code}) at {span(s.runtime_s)}"
    if early >= 0:
        return f"{ask}: met, ended {span(early)} before it"
    return f"{ask}: missed by {span(-early)} (ended at {span(s.runtime_s)})"


def budget_verdict(s: RunSummary) -> str | None:
    """Whether the run kept its ``--budget``: the node·s paid (:attr:`RunSummary.node_s`, the
    report's and the summary's one count) against it: ``16.7 node·h: kept, 15.9 node·h paid
    (0.8 node·h to spare)``, ``16.7 node·h: overrun by 0.3 node·h (17 node·h paid)``. None
    without a budget."""
    if s.plan is None or s.plan.budget_node_s is None:
        return None
    budget, paid = s.plan.budget_node_s, s.node_s
    ask = node_hours(budget)
    stop = "; buying stopped once it was spent" if s.plan.exhausted else ""
    if not s.complete:
        so_far = f"{node_hours(paid)} paid by the log's last record"
        if paid > budget:
            return f"{ask}: overrun by {node_hours(paid - budget)} already ({so_far}){stop}"
        return f"{ask}: not over yet ({so_far}, {node_hours(budget - paid)} left){stop}"
    if paid <= budget:
        return f"{ask}: kept, {node_hours(paid)} paid ({node_hours(budget - paid)} to spare){stop}"
    return f"{ask}: overrun by {node_hours(paid - budget)} ({node_hours(paid)} paid){stop}"


def with_dial_rows(rows: list[tuple[str, str]], s: RunSummary, after_runtime: str,
                   after_node_s: str) -> list[tuple[str, str]]:
    """``rows`` with a ``deadline`` row after the row ``after_runtime`` and a ``budget`` row
    after ``after_node_s``, for a run given either (:func:`deadline_verdict`,
    :func:`budget_verdict`); ``rows`` as they are for a run without."""
    out = []
    for key, value in rows:
        out.append((key, value))
        verdict = deadline_verdict(s) if key == after_runtime else budget_verdict(s) if key == after_node_s else None
        if verdict is not None:
            out.append(("deadline" if key == after_runtime else "budget", verdict))
    return out


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    lat = "none measured" if not s.workers_connected else "not measured (no worker waited for a node to be made)"
    if s.latency_count:
        lat = f"median {_s(s.latency_median_s)}, p90 {_s(s.latency_p90_s)} ({counted(s.latency_count, 'worker')})"
    util = "—" if s.utilization is None else f"{100 * s.utilization:.0f} %"
    rows = [
        ("workflow", _shown_path(s.workflow) if s.workflow else (s.workload or "—")),
        ("result", "complete" if s.exit_code == 0 else f"exit code {s.exit_code}"),
        ("runtime", _s(s.runtime_s)),
        ("tasks", f"{s.tasks_done} done{_earlier(s)}, {s.tasks_failed} failed, {s.tasks_retried} retried"),
        ("workers", f"{s.workers_requested} requested, {s.workers_connected} connected, "
                    f"{s.workers_drained} drained, peak {s.peak_workers}"),
        ("scale actions", f"{s.scale_up_actions} up, {s.scale_down_actions} down"),
        # the two parts overlap (idle workers after the end are both): "of it", not a sum
        ("waste", f"{core_s(s.waste_core_s)} ({core_s(s.idle_waste_core_s, '')} of it on idle workers, "
                  f"{core_s(s.teardown_waste_core_s, '')} of it after the end)"),
        ("shortage", core_s(s.shortage_core_s) + _beyond(s)),
        ("node time paid", f"{core_s(s.node_s, 'node·s')} ({core_s(s.teardown_node_s, '')} after the end)"),
        ("utilisation", util),
        ("preparation latency", lat),
    ]
    if s.tasks_lost or s.workers_failed:
        gone = [f"{s.workers_lost} worker(s) lost"] + ([f"{s.workers_failed} failed to start"] if s.workers_failed else [])
        causes = "".join(f"; {core_s(v, '')} of it to {cause}" for cause, v in sorted(s.lost_by_cause.items())
                         if len(s.lost_by_cause) > 1 or cause != "other")
        rows.insert(5, ("lost work", f"{s.tasks_lost} task(s) run again, {core_s(s.lost_work_core_s)} "
                                     f"({', '.join(gone)}{causes})"))
    return with_dial_rows(rows, s, "runtime", "node time paid")


def _beyond(s: RunSummary) -> str:
    """The shortage's part beyond the cap, the user's choice: ``(12.0 of it beyond the cap,
    --max-workers 4)``."""
    if not s.shortage_beyond_cap_core_s or s.shortage_beyond_cap_core_s < 0.05:
        return ""
    return f" ({core_s(s.shortage_beyond_cap_core_s, '')} of it beyond the cap, --max-workers {s.max_workers})"


def print_summary(s: RunSummary, log_path: Path | str | None = None, console: Console | None = None) -> None:
    console = console or PipeConsole(width=100)
    t = Table(title=f"HTA run summary — policy {s.policy}, backend {s.backend}", show_header=False,
              title_justify="left")
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for k, v in summary_rows(s):
        t.add_row(k, v)
    console.print(t)
    if log_path:
        console.print(f"scaling log: {_shown_path(log_path)}", soft_wrap=True, highlight=False)
