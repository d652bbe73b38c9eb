"""``hta report``: what an autoscaler did, from one or more scaling logs.

Reads logs written by ``hta makeflow`` and ``hta simulate`` (one format),
summarises each with :func:`hta.summary.summarize` (so every number means
what it means everywhere else), and renders a table (rich, 80 columns),
Markdown or JSON, plus a supply / in-use / demand figure per run with the
scale actions marked — the view of the thesis's Figures 7.12/7.13.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hta.css_log import CSS_CAPTION, CSS_HEADER, WorkerCSS, css_logs_beside, css_rows, summarize_css
from hta.plural import span
from hta.scaling_log import DecisionRecord, LogError, ObservationRecord, RunRecord, read_records
from hta.summary import RunSummary, summarize
from hta.summary_view import _s, budget_verdict, core_s, deadline_verdict, with_dial_rows


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

#: a run's figure, in inches, when ``--size`` is not given
RUN_FIGSIZE = (9.0, 4.2)
#: the comparison's height per run, in inches, when ``--size`` is not given (its width: a run's)
PANEL_HEIGHT = 2.8
#: a PNG's dots per inch when ``--dpi`` is not given
DEFAULT_DPI = 150
#: the longest side a PNG may have, in pixels: a mistyped ``--dpi`` (30000 for 300) would ask
#: for a picture of tens of gigapixels and exhaust the memory before writing anything
MAX_PNG_SIDE_PX = 20_000

#: the plain words of the figure, one place: no option names (``--max-workers``), no thesis terms
#: (supply, demand, shortage, waste) a reader of a paper would have to look up
WORDS = {
    "supply": "worker cores",
    "in_use": "cores in use",
    "demand": "cores tasks want",
    "waste": "idle workers",
    "shortage": "waiting for workers",
    "beyond_cap": "waiting beyond the worker limit",
    "added": "workers added",
    "removed": "workers removed",
    "time": "time since the start (s)",
    "cores": "cores",
}


@dataclass(frozen=True)
class FigureStyle:
    """How ``hta report --plot`` sizes and heads its figures, for a paper or a slide: ``title``
    replaces the heading of words (workflow — policy) a figure gets by default (with several
    runs, it heads the comparison: a run's own figure keeps its run's name, not another's);
    ``size`` is a run's figure's (width, height) in inches, and each panel's in the comparison,
    which is as wide and that high a run (so its panels read as the runs' own figures; None: 9 ×
    4.2 a run, 2.8 in high a panel); ``dpi`` is the PNG's resolution."""

    title: str | None = None
    dpi: int = DEFAULT_DPI
    size: tuple[float, float] | None = None

    def run_size(self) -> tuple[float, float]:
        return self.size or RUN_FIGSIZE

    def comparison_size(self, n_runs: int) -> tuple[float, float]:
        width, height = self.size or (RUN_FIGSIZE[0], PANEL_HEIGHT)
        return width, height * n_runs

    def largest_png_side(self, n_runs: int) -> int:
        """The longest side, in pixels, of the PNGs :func:`plot` would write for ``n_runs`` runs."""
        sizes = [self.run_size()] + ([self.comparison_size(n_runs)] if n_runs > 1 else [])
        return math.ceil(max(max(w, h) for w, h in sizes) * self.dpi)


def workflow_name(r: LoadedRun) -> str:
    """The workflow as a reader names it: the simulator's workload (``io-bound``), or the
    workflow's folder when its file has makeflow's usual name (``workflows/blast/Makeflow``:
    ``blast``), else the file's name; the log's name when the log says neither."""
    s = r.summary
    if s.workload:
        return s.workload
    if s.workflow:
        wf = Path(s.workflow)
        if wf.name.split(".")[0].lower() in ("makeflow", "workflow") and wf.parent.name:
            return wf.parent.name
        return wf.name
    return r.path.stem


def heading(r: LoadedRun) -> str:
    """A run's title in words: ``blast — hta``; a simulated run's seed after it (``io-bound —
    hta, seed 3``), which tells its seeds' figures apart."""
    seed = f", seed {r.summary.seed}" if r.summary.seed is not None else ""
    return f"{workflow_name(r)} — {r.summary.policy}{seed}"


def detail_lines(s: RunSummary, fits: Callable[[str], bool]) -> list[str]:
    """The run's numbers under its title, rounded as the run's summary rounds them (runtime
    ``5.6 s``, core·s whole from 100), in the legend's words; as few lines as ``fits`` (whether
    a line fits the figure's width) allows, broken between figures; the deadline's and the
    budget's outcome a line each."""
    # (the summary's own formatter of seconds: a title of "6 s" beside a summary of "5.6 s" reads
    # as two different runs)
    pieces = [("", f"runtime {_s(s.runtime_s)}"), (" · ", f"{WORDS['waste']} {core_s(s.waste_core_s)}"),
              (" · ", f"{WORDS['shortage']} {core_s(s.shortage_core_s)}")]
    if s.shortage_beyond_cap_core_s >= 0.05:
        pieces.append((" ", f"({core_s(s.shortage_beyond_cap_core_s, '')} beyond the worker limit)"))
    lines: list[str] = []
    for joint, piece in pieces:
        if lines and fits(lines[-1] + joint + piece):
            lines[-1] += joint + piece
        else:
            lines.append(piece)
    dial = [f"{k} {v}" for k, v in (("deadline", deadline_verdict(s)), ("budget", budget_verdict(s))) if v]
    return lines + dial


def _fits(fig, fontsize: float) -> Callable[[str], bool]:
    """Whether a line of text at ``fontsize`` fits across ``fig`` (measured as it is drawn)."""
    from matplotlib.font_manager import FontProperties

    renderer, font = fig.canvas.get_renderer(), FontProperties(size=fontsize)
    return lambda text: renderer.get_text_width_height_descent(text, font, ismath=False)[0] <= 0.96 * fig.bbox.width


def font_size(width_in: float) -> float:
    """The figure's text size in points for a figure ``width_in`` wide: 8 from 6 in wide, less
    in proportion down to 6 from 4.5 in (a paper's column is 3.3 in), so that on a narrow
    figure the title, the numbers and the legend still leave the axes room."""
    return max(6.0, min(8.0, 8.0 * width_in / 6.0))


def _head(ax, title: str | None, detail: list[str], fontsize: float) -> None:
    """``title`` over the axes, and the run's numbers (``detail``) between it and the axes, in
    smaller grey: what the figure is reads first, its numbers second."""
    ax.annotate("\n".join(detail), xy=(0.5, 1.0), xycoords="axes fraction", xytext=(0, 4), textcoords="offset points",
                ha="center", va="bottom", fontsize=fontsize, color="0.25", linespacing=1.25)
    ax.set_title(title or "", fontsize=fontsize + 2, pad=4 + len(detail) * fontsize * 1.25 + 3)


def _legend(fig, axes, fontsize: float) -> None:
    """One legend for the figure, under the axes (constrained layout leaves no band below it),
    each label once (the comparison's panels share theirs), in as many columns as fit the
    figure's width."""
    handles, labels = [], []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(len(labels), 5), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False,
                            columnspacing=1.2, handlelength=1.8)
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return
        legend.remove()


def _save(fig, stem: Path, formats: tuple[str, ...], dpi: int = DEFAULT_DPI) -> list[Path]:
    """``fig`` as ``stem.FMT`` for each format; ``dpi`` is the PNG's (SVG and PDF are vectors).
    Exactly the figure's size: no ``bbox_inches="tight"``, which would crop it to another size
    than ``--size`` asked for (constrained layout already leaves no margin)."""
    out = []
    for fmt in formats:
        p = stem.with_suffix(f".{fmt}")
        fig.savefig(p, dpi=dpi if fmt == "png" else None)
        out.append(p)
    return out


def plot(runs: list[LoadedRun], out_dir: Path, formats: tuple[str, ...] = ("png",),
         style: FigureStyle | None = None) -> list[Path]:
    """One figure per run (the cores of workers, those in use and those tasks want; idle
    workers and the wait for workers shaded); with several runs one more with a panel each, each
    on its own time axis; with a real and a simulated run, both on one axes
    (``real-vs-simulated``). Each in every one of ``formats``, laid out as ``style`` says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = style or FigureStyle()
    out_dir.mkdir(parents=True, exist_ok=True)
    # the figure's text stays text: an SVG keeps its words as <text> (editable in Inkscape or
    # Illustrator, searchable), a PDF embeds TrueType fonts (Type 42; the Type 3 fonts matplotlib
    # makes by default are refused by many publishers' checks). Around these figures only: nothing
    # changes for other figures drawn in the same process.
    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42, "ps.fonttype": 42}):
        return _plot(runs, out_dir, formats, style, plt)


def _plot(runs: list[LoadedRun], out_dir: Path, formats: tuple[str, ...], style: FigureStyle, plt) -> list[Path]:
    from matplotlib.ticker import MaxNLocator

    written = []

    def draw(ax, r: LoadedRun, title: str | None, fontsize: float) -> None:
        obs = [x for x in r.records if isinstance(x, ObservationRecord)]
        s = r.summary
        _head(ax, title, detail_lines(s, _fits(ax.figure, fontsize)), fontsize)
        ax.set_ylabel(WORDS["cores"], fontsize=fontsize + 1)
        ax.tick_params(labelsize=fontsize)
        ax.grid(alpha=0.3)
        if not obs:
            ax.text(0.5, 0.5, "no observations in the log", ha="center", transform=ax.transAxes)
            return
        t = [o.t for o in obs] + [s.runtime_s if s.complete else obs[-1].t]
        sp, u, dm = ([getattr(o, key) for o in obs] for key in ("supply_cores", "in_use_cores", "demand_cores"))
        sp, u, dm = sp + sp[-1:], u + u[-1:], dm + dm[-1:]
        cap = s.cap_cores
        # (lines first: the legend lists them first) supply wide and light under in use, demand
        # dashed: where lines coincide each stays visible
        for v, label, color, width, ls, alpha in (
                (sp, WORDS["supply"], "tab:blue", 3.6, "-", 0.45),
                (u, WORDS["in_use"], "tab:green", 1.3, "-", 1.0),
                (dm, WORDS["demand"], "tab:red", 1.4, (0, (4, 2)), 1.0)):
            ax.step(t, v, where="post", label=label, color=color, lw=width, ls=ls, alpha=alpha)
        # zero-height where there is none: a step fill with `where` drops single steps
        ax.fill_between(t, u, [max(a, b) for a, b in zip(sp, u)], step="post", color="tab:orange", alpha=0.22,
                        lw=0, label=WORDS["waste"])
        under = [max(a, b) for a, b in zip([min(x, cap) for x in dm] if cap else dm, sp)]
        ax.fill_between(t, sp, under, step="post", color="tab:red", alpha=0.12, lw=0, hatch="///",
                        label=WORDS["shortage"])
        if cap:
            beyond = [max(d, cap) for d in dm]
            if any(b > cap + 1e-9 for b in beyond):
                ax.fill_between(t, [max(cap, x) for x in sp], [max(b, x) for b, x in zip(beyond, sp)], step="post",
                                color="tab:purple", alpha=0.10, lw=0, hatch="..", label=WORDS["beyond_cap"])
            ax.axhline(cap, color="tab:purple", ls=(0, (2, 3)), lw=1.2,
                       label=f"worker limit ({s.max_workers} workers)")
        deadline_mark(ax, s, t[-1])
        top = max(max(o.demand_cores, o.supply_cores) for o in obs) or 1
        if cap:
            top = max(top, cap)
        for d in (x for x in r.records if isinstance(x, DecisionRecord)):
            if d.add:
                ax.plot(d.t, top * 1.03, marker="^", color="tab:blue", ms=0.75 * fontsize)
            if d.drain or d.remove:
                ax.plot(d.t, top * 1.03, marker="v", color="tab:orange", ms=0.75 * fontsize)
        scale_markers(ax, 0.75 * fontsize)
        ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))  # (cores: no 2.5; fewer on a short axis)

    one_title = style.title if len(runs) == 1 else None
    for i, r in enumerate(runs):
        size = style.run_size()
        fs = font_size(size[0])
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        draw(ax, r, heading(r) if one_title is None else one_title, fs)
        ax.set_xlabel(WORDS["time"], fontsize=fs + 1)
        _legend(fig, [ax], fs)
        written += _save(fig, out_dir / f"run{i + 1}-{r.summary.policy}", formats, style.dpi)
        plt.close(fig)
    real = [r for r in runs if not r.summary.simulated]
    sim = [r for r in runs if r.summary.simulated]
    if real and sim:
        written += overlay(real[0], sim[0], out_dir, plt, formats, style)
    if len(runs) > 1:
        # each run on its own time axis: runs of different length stay readable
        size = style.comparison_size(len(runs))
        fs = max(6.0, font_size(size[0]) - 1)  # (a panel is lower than a run's own figure)
        fig, axes = plt.subplots(len(runs), 1, figsize=size, squeeze=False, layout="constrained")
        for ax, r in zip(axes[:, 0], runs):
            draw(ax, r, heading(r), fs)
            ax.set_xlabel(WORDS["time"], fontsize=fs + 1)
        if style.title:
            fig.suptitle(style.title, fontsize=fs + 4)
        _legend(fig, list(axes[:, 0]), fs)
        written += _save(fig, out_dir / "comparison", formats, style.dpi)
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


def scale_markers(ax, ms: float = 6.0) -> None:
    """The legend's entries for the decision markers drawn above the lines (a marker per
    decision has no label of its own), as large as they are drawn (``ms``): in words, what a
    reader sees happen, not "scale up"."""
    ax.plot([], [], marker="^", ls="", color="tab:blue", ms=ms, label=WORDS["added"])
    ax.plot([], [], marker="v", ls="", color="tab:orange", ms=ms, label=WORDS["removed"])


def overlay(real: LoadedRun, sim: LoadedRun, out_dir: Path, plt, formats: tuple[str, ...] = ("png",),
            style: FigureStyle | None = None) -> list[Path]:
    """A real run and a simulated one on one axes (the thesis's Figs 7.12–7.13 style): the
    cores of workers, in use and wanted, real solid, simulated dashed. A real run compressed k
    times (policy ``NAME@k``) is drawn in the experiment's time, t × k."""
    from hta.policies.time_scale import time_scale_of

    style = style or FigureStyle()
    k = time_scale_of(real.summary.policy)
    size = style.run_size()
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    for r, scale, ls, tag in ((real, k, "-", "real"), (sim, 1.0, "--", "simulated")):
        obs = [x for x in r.records if isinstance(x, ObservationRecord)]
        if not obs:
            continue
        end = r.summary.runtime_s if r.summary.complete else obs[-1].t
        t = [o.t * scale for o in obs] + [end * scale]
        for key, label, color in (("supply_cores", WORDS["supply"], "tab:blue"),
                                  ("in_use_cores", WORDS["in_use"], "tab:green"),
                                  ("demand_cores", WORDS["demand"], "tab:red")):
            v = [getattr(o, key) for o in obs]
            ax.step(t, v + v[-1:], where="post", ls=ls, color=color, lw=1.3, label=f"{label}, {tag}")
    fs = font_size(size[0])
    ax.set_xlabel(WORDS["time"] + (f", real run × {k:g}" if k != 1 else ""), fontsize=fs + 1)
    ax.set_ylabel(WORDS["cores"], fontsize=fs + 1)
    ax.tick_params(labelsize=fs)
    names = heading(real) if workflow_name(real) == workflow_name(sim) and real.summary.policy == sim.summary.policy \
        else f"{heading(real)} and {heading(sim)}"
    _head(ax, style.title if style.title is not None else f"{names}: real and simulated",
          [f"runtime {_s(real.summary.runtime_s * k)} real, {_s(sim.summary.runtime_s)} simulated"], fs)
    ax.grid(alpha=0.3)
    _legend(fig, [ax], fs)
    out = _save(fig, out_dir / "real-vs-simulated", formats, style.dpi)
    plt.close(fig)
    return out
