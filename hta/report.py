"""``hta report``: what an autoscaler did, from one or more scaling logs.

Reads logs written by ``hta makeflow`` and ``hta simulate`` (one format),
summarises each with :func:`hta.summary.summarize` (so every number means
what it means everywhere else), and renders a table (rich, 80 columns),
Markdown or JSON, plus a supply / in-use / demand figure per run with the
scale actions marked — the view of the thesis's Figures 7.12/7.13.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hta.css_log import CSS_CAPTION, CSS_HEADER, WorkerCSS, css_logs_beside, css_rows, summarize_css
from hta.plural import span
from hta.scaling_log import DecisionRecord, LogError, ObservationRecord, RunRecord, read_records
from hta.summary import RunSummary, summarize
from hta.summary_view import budget_verdict, core_s, deadline_verdict, with_dial_rows


@dataclass
class LoadedRun:
    path: Path
    summary: RunSummary
    records: list
    warnings: list[str] = field(default_factory=list)
    #: what CSS did on each worker, from the workers' logs beside a real run
    css: list[WorkerCSS] = field(default_factory=list)

    @property
    def label(self) -> str:
        s = self.summary
        if s.workload:
            name = s.workload
        elif s.workflow:
            wf = Path(s.workflow)
            name = f"{wf.parent.name}/{wf.name}" if wf.parent.name else wf.name
        else:
            name = self.path.stem
        seed = f" seed {s.seed}" if s.seed is not None else ""
        return f"{s.policy} · {name}{seed}"


def _could_be_a_workflow(path: Path) -> bool:
    """Whether ``path``, a file with no HTA run of it beside it, may be a workflow not run
    yet: a Makeflow (text whose first line is not JSON) or a JX one (a JSON object with
    ``rules``). Anything else (empty, named ``.json``/``.jsonl``, other JSON) is read as a
    scaling log, and :func:`read_records` says what it is."""
    if path.name.endswith(".jsonl"):  # (a log's name: not read twice)
        return False
    try:
        with path.open("rb") as f:
            head = f.read(1 << 24)
    except OSError:
        return False  # (read_records says what is wrong)
    first = next((line.strip() for line in head.splitlines() if line.strip()), b"")
    if not first or b"\0" in head:  # (empty, or binary: hta makeflow refuses it too)
        return False
    try:
        line, line_is_json = json.loads(first), True
    except ValueError:
        line, line_is_json = None, False
    if isinstance(line, dict) and "kind" in line:  # a scaling log's record
        return False
    try:
        doc = json.loads(head)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "rules" in doc:  # a JX workflow (makeflow --jx)
        return True
    return not (path.name.endswith(".json") or line_is_json or first.startswith((b"{", b"[")))


def load_runs(paths: list[Path]) -> tuple[list[LoadedRun], list[str]]:
    """Every readable run, and one message per unreadable file (naming file and line)."""
    runs, errors = [], []
    for p in paths:
        latest = Path(f"{p}.scaling.jsonl")
        if Path(p).is_file() and latest.exists():  # a workflow: its latest run
            p = latest.resolve()
        elif Path(p).is_file() and _could_be_a_workflow(Path(p)):
            errors.append(f"{p}: no scaling log, and no HTA run of it as a workflow ({latest.name} is not there; "
                          f"a run with --log FILE writes FILE only): give a scaling log, or run hta makeflow {p} first")
            continue
        try:
            records, problems = read_records(p)
            runs.append(LoadedRun(Path(p), summarize(records, str(p)), records, problems, _css_of(Path(p), records)))
        except LogError as exc:
            errors.append(str(exc))
        except ValueError as exc:
            errors.append(f"{p}: {exc}")
    return runs, errors


def _css_of(path: Path, records: list) -> list[WorkerCSS]:
    first = records[0] if records else None
    if not isinstance(first, RunRecord) or first.simulated:
        return []
    start = first.started_at
    return summarize_css(css_logs_beside(path), start - 1.0, start + records[-1].t + 1.0)


def _f(v: float | None, digits: int = 0, unit: str = "") -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}{(' ' + unit) if unit else ''}"


def rows(s: RunSummary) -> list[tuple[str, str]]:
    phases = ", ".join(f"{k} {v:.1f}" for k, v in s.latency_phases_median_s.items()) or "—"
    status = "complete" if s.complete else "IN PROGRESS (up to its last record)"
    if s.complete and s.exit_code not in (0, None):
        status = f"ended, exit {s.exit_code}"
    return with_dial_rows([
        ("status", status),
        ("runtime s", _f(s.runtime_s, 1)),
        ("tasks done/failed/retried", f"{s.tasks_done}/{s.tasks_failed}/{s.tasks_retried}"
                                      + (f" ({s.tasks_done_before} done before this run)" if s.tasks_done_before else "")
                                      + (f" ({s.tasks_resumed} begun before, run again)" if s.tasks_resumed
                                         else "")),
        ("waste core·s", core_s(s.waste_core_s, "")),
        ("  on idle workers", core_s(s.idle_waste_core_s, "")),
        ("  after the workflow ended", core_s(s.teardown_waste_core_s, "")),
        ("shortage core·s", core_s(s.shortage_core_s, "")),
        ("  under the cap (the policy's)", core_s(s.shortage_core_s - s.shortage_beyond_cap_core_s, "")),
        ("  beyond the cap (the user's)", core_s(s.shortage_beyond_cap_core_s, "")
         + (f" (cap: {s.max_workers} workers)" if s.max_workers else "")),
        ("node·s paid", core_s(s.node_s, "")),
        ("  node·s after it ended", core_s(s.teardown_node_s, "")),
        ("lost work core·s", core_s(s.lost_work_core_s, "")),
        *((f"  to {cause}", core_s(v, "")) for cause, v in sorted(s.lost_by_cause.items())),
        ("utilisation", "—" if s.utilization is None else f"{100 * s.utilization:.0f} %"),
        ("scale actions up/down", f"{s.scale_up_actions}/{s.scale_down_actions}"),
        ("workers req/conn/drain/rm", f"{s.workers_requested}/{s.workers_connected}/{s.workers_drained}/"
                                      f"{s.workers_removed}"),
        ("latency n / median / p90 s", f"{s.latency_count} / {_f(s.latency_median_s, 1)} / {_f(s.latency_p90_s, 1)}"),
        ("latency phases (median s)", phases),
    ], s, "runtime s", "  node·s after it ended")


def row_names(per_run: list[list[tuple[str, str]]]) -> list[str]:
    """Every run's row labels, each once, in their order: a row only some runs have (a
    deadline, a budget) is placed after the row it follows in the first run that has it."""
    names: list[str] = []
    for run_rows in per_run:
        prev: str | None = None
        for k, _ in run_rows:
            if k not in names:
                names.insert(names.index(prev) + 1 if prev is not None else 0, k)
            prev = k
    return names


def category_rows(s: RunSummary) -> list[list[str]]:
    out = []
    for name, c in s.categories.items():
        out.append([name, str(c.samples), _f(c.peak.cores, 0), _f(c.peak.memory_mb, 0), _f(c.peak.disk_mb, 0),
                    _f(c.runtime_median_s, 1), _f(c.runtime_p90_s, 1)])
    return out


CATEGORY_HEADER = ["category", "tasks", "cores", "mem MB", "disk MB", "rt med s", "rt p90 s"]


def render_table(runs: list[LoadedRun], console: Console) -> None:
    t = Table(title="HTA scaling report", title_justify="left")
    t.add_column("", style="bold", no_wrap=True)
    for r in runs:
        t.add_column(r.label, overflow="fold")
    all_rows = [rows(r.summary) for r in runs]
    per_run = [dict(rs) for rs in all_rows]
    for k in row_names(all_rows):
        t.add_row(k, *(pr.get(k, "—") for pr in per_run))
    console.print(t)
    for r in runs:
        cats = category_rows(r.summary)
        if not cats:
            continue
        ct = Table(title=f"categories — {r.label}", title_justify="left")
        for h in CATEGORY_HEADER:
            ct.add_column(h, justify="left" if h == "category" else "right")
        for row in cats:
            ct.add_row(*row)
        console.print(ct)
    for r in runs:
        if r.css:
            st = Table(title=f"CSS on each worker — {r.label}", title_justify="left", caption=CSS_CAPTION,
                       caption_justify="left")
            for h in CSS_HEADER:
                st.add_column(h, justify="left" if h in ("worker", "backend", "pins by") else "right")
            for row in css_rows(r.css):
                st.add_row(*row)
            console.print(st)


def render_markdown(runs: list[LoadedRun]) -> str:
    lines = ["| | " + " | ".join(r.label for r in runs) + " |", "|---|" + "---|" * len(runs)]
    all_rows = [rows(r.summary) for r in runs]
    per_run = [dict(rs) for rs in all_rows]
    for k in row_names(all_rows):
        lines.append(f"| {k} | " + " | ".join(pr.get(k, "—") for pr in per_run) + " |")
    for r in runs:
        cats = category_rows(r.summary)
        if cats:
            lines += ["", f"Categories — {r.label}", "", "| " + " | ".join(CATEGORY_HEADER) + " |",
                      "|" + "---|" * len(CATEGORY_HEADER)]
            lines += ["| " + " | ".join(row) + " |" for row in cats]
        if r.css:
            lines += ["", f"CSS on each worker — {r.label}", "", "| " + " | ".join(CSS_HEADER) + " |",
                      "|" + "---|" * len(CSS_HEADER)]
            lines += ["| " + " | ".join(row) + " |" for row in css_rows(r.css)]
            lines += ["", CSS_CAPTION]
    return "\n".join(lines) + "\n"


def render_json(runs: list[LoadedRun], errors: list[str]) -> str:
    out = []
    for r in runs:
        d = r.summary.model_dump(mode="json")
        d["warnings"] = r.warnings
        d["css"] = [w.model_dump(mode="json") for w in r.css]
        out.append(d)
    return json.dumps({"runs": out, "errors": errors}, indent=1)


#: figure formats ``hta report --plot-format`` can write
PLOT_FORMATS = ("png", "svg", "pdf")


def _save(fig, stem: Path, formats: tuple[str, ...]) -> list[Path]:
    out = []
    for fmt in formats:
        p = stem.with_suffix(f".{fmt}")
        fig.savefig(p, dpi=150 if fmt == "png" else None)
        out.append(p)
    return out


def plot(runs: list[LoadedRun], out_dir: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """One figure per run (supply, in use and demand, waste and shortage shaded); with
    several runs one more with a panel each, each on its own time axis; with a real and a
    simulated run, both on one axes (``real-vs-simulated``). Each in every one of ``formats``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def draw(ax, r: LoadedRun) -> None:
        obs = [x for x in r.records if isinstance(x, ObservationRecord)]
        if not obs:
            ax.text(0.5, 0.5, "no observations", ha="center", transform=ax.transAxes)
            return
        t = [o.t for o in obs] + [r.summary.runtime_s if r.summary.complete else obs[-1].t]
        supply = [o.supply_cores for o in obs]
        in_use = [o.in_use_cores for o in obs]
        demand = [o.demand_cores for o in obs]
        u, sp, dm = in_use + in_use[-1:], supply + supply[-1:], demand + demand[-1:]
        cap = r.summary.cap_cores
        # zero-height where there is none: a step fill with `where` drops single steps
        ax.fill_between(t, u, [max(a, b) for a, b in zip(sp, u)], step="post", color="tab:orange", alpha=0.22,
                        lw=0, label="waste (cores paid, unused)")
        under = [max(a, b) for a, b in zip([min(x, cap) for x in dm] if cap else dm, sp)]
        ax.fill_between(t, sp, under, step="post", color="tab:red", alpha=0.12, lw=0, hatch="///",
                        label="shortage under the cap (the policy's)" if cap else "shortage (cores wanted, not there)")
        if cap:
            beyond = [max(d, cap) for d in dm]
            if any(b > cap + 1e-9 for b in beyond):
                ax.fill_between(t, [max(cap, s) for s in sp], [max(b, s) for b, s in zip(beyond, sp)], step="post",
                                color="tab:purple", alpha=0.10, lw=0, hatch="..",
                                label="shortage beyond the cap (the cap's)")
            ax.axhline(cap, color="tab:purple", ls=(0, (2, 3)), lw=1.2,
                       label=f"cap: {r.summary.max_workers} workers (--max-workers)")
        # supply wide and light under in use, demand dotted: where lines coincide each stays visible
        for key, label, color, width, style, alpha in (
                ("supply_cores", "supply", "tab:blue", 3.6, "-", 0.45),
                ("in_use_cores", "in use", "tab:green", 1.3, "-", 1.0),
                ("demand_cores", "demand", "tab:red", 1.4, (0, (4, 2)), 1.0)):
            v = [getattr(o, key) for o in obs]
            ax.step(t, v + v[-1:], where="post", label=label, color=color, lw=width, ls=style, alpha=alpha)
        top = max(max(o.demand_cores, o.supply_cores) for o in obs) or 1
        if cap:
            top = max(top, cap)
        for d in (x for x in r.records if isinstance(x, DecisionRecord)):
            if d.add:
                ax.plot(d.t, top * 1.03, marker="^", color="tab:blue", ms=6)
            if d.drain or d.remove:
                ax.plot(d.t, top * 1.03, marker="v", color="tab:orange", ms=6)
        ax.set_ylabel("cores")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # (cores: no 2.5 on a small run's axis)
        s = r.summary
        deadline_mark(ax, s, t[-1])
        past_cap = f" ({core_s(s.shortage_beyond_cap_core_s, '')} beyond the cap)" \
            if s.shortage_beyond_cap_core_s >= 0.05 else ""
        # the deadline's or the budget's outcome under the title (no axis of spend to draw a budget on)
        dial = [f"{k} {v}" for k, v in (("deadline", deadline_verdict(s)), ("budget", budget_verdict(s))) if v]
        ax.set_title(f"{r.label} — runtime {s.runtime_s:,.0f} s, waste {core_s(s.waste_core_s, '')}, "
                     f"shortage {core_s(s.shortage_core_s, '')}{past_cap} core·s"
                     + "".join(f"\n{line}" for line in dial), fontsize=9)
        ax.grid(alpha=0.3)

    for i, r in enumerate(runs):
        fig, ax = plt.subplots(figsize=(9, 4.2))
        draw(ax, r)
        ax.set_xlabel("time since submission (s)")
        scale_markers(ax)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, fontsize=8, frameon=False)
        fig.tight_layout()
        written += _save(fig, out_dir / f"run{i + 1}-{r.summary.policy}", formats)
        plt.close(fig)
    real = [r for r in runs if not r.summary.simulated]
    sim = [r for r in runs if r.summary.simulated]
    if real and sim:
        written += overlay(real[0], sim[0], out_dir, plt, formats)
    if len(runs) > 1:
        # each run on its own time axis: runs of different length stay readable
        fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.8 * len(runs)), squeeze=False)
        for ax, r in zip(axes[:, 0], runs):
            draw(ax, r)
            ax.set_xlabel("time since submission (s)", fontsize=8)
        scale_markers(axes[-1, 0])
        axes[-1, 0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize=7, frameon=False)
        fig.tight_layout()
        written += _save(fig, out_dir / "comparison", formats)
        plt.close(fig)
    return written


#: a deadline further than this many times the run's last time is said at the axis' edge, not
#: drawn at its place: a run that ended far before it would be squeezed into the left of the plot
DEADLINE_SHOWN_WITHIN = 1.5


#: a label's light box: readable over the lines it crosses
_LABEL_BOX = {"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}


def deadline_mark(ax, s: RunSummary, t_last: float) -> None:
    """The run's ``--deadline`` on the time axis: a vertical line labelled ``deadline``; one far
    past the run's end (:data:`DEADLINE_SHOWN_WITHIN`) is named at the right edge instead."""
    if s.plan is None or s.plan.deadline_s is None:
        return
    deadline = s.plan.deadline_s
    if deadline > DEADLINE_SHOWN_WITHIN * max(t_last, 1.0):
        ax.text(0.995, 0.88, f"deadline {span(deadline)} →", transform=ax.transAxes, ha="right", va="top",
                fontsize=8, color="black", bbox=_LABEL_BOX)
        return
    ax.axvline(deadline, color="black", ls=(0, (6, 3)), lw=1.3, label=f"deadline ({span(deadline)})")
    # (below the scale markers along the top)
    ax.annotate("deadline", xy=(deadline, 0.88), xycoords=("data", "axes fraction"), xytext=(-3, 0),
                textcoords="offset points", ha="right", va="top", rotation=90, fontsize=8, bbox=_LABEL_BOX)


def scale_markers(ax) -> None:
    """The legend's entries for the decision markers drawn above the lines (a marker per
    decision has no label of its own)."""
    ax.plot([], [], marker="^", ls="", color="tab:blue", label="scale up")
    ax.plot([], [], marker="v", ls="", color="tab:orange", label="scale down")


def overlay(real: LoadedRun, sim: LoadedRun, out_dir: Path, plt, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """A real run and a simulated one on one axes (the thesis's Figs 7.12–7.13 style): supply,
    in use and demand, real solid, simulated dashed. A real run compressed k times (policy
    ``NAME@k``) is drawn in the experiment's time, t × k."""
    from hta.policies.time_scale import time_scale_of

    k = time_scale_of(real.summary.policy)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for r, scale, style, tag in ((real, k, "-", "real"), (sim, 1.0, "--", "simulated")):
        obs = [x for x in r.records if isinstance(x, ObservationRecord)]
        if not obs:
            continue
        end = r.summary.runtime_s if r.summary.complete else obs[-1].t
        t = [o.t * scale for o in obs] + [end * scale]
        for key, label, color in (("demand_cores", "demand", "tab:red"), ("supply_cores", "supply", "tab:blue"),
                                  ("in_use_cores", "in use", "tab:green")):
            v = [getattr(o, key) for o in obs]
            ax.step(t, v + v[-1:], where="post", ls=style, color=color, lw=1.3, label=f"{label}, {tag}")
    ax.set_xlabel("time since submission (s)" + (f", real run × {k:g}" if k != 1 else ""))
    ax.set_ylabel("cores")
    ax.set_title(f"{real.label} (real) vs {sim.label} (simulated) — runtime {real.summary.runtime_s * k:,.0f} vs "
                 f"{sim.summary.runtime_s:,.0f} s", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, ncol=2)
    fig.tight_layout()
    out = _save(fig, out_dir / "real-vs-simulated", formats)
    plt.close(fig)
    return out
