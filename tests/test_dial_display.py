"""The time–cost dial's plan wherever a run shows itself: ``/status`` and ``/metrics``, the
terminal panel (the page's line is the snapshot's, checked in a browser by
test_status_page.py), the end-of-run summary, and ``hta report``'s met / missed, kept / overrun
lines and its figure, on hand-made scaling logs whose numbers are worked out by hand."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import run_hta
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from hta.controller import Controller
from hta.model import DialPlan
from hta.policies.registry import make_policy
from hta.report import deadline_mark, load_runs, render_markdown, rows
from hta.scaling_log import DecisionRecord, ScalingLogWriter, read_records
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload
from hta.status.metrics import DIAL_METRICS, METRICS, make_registry
from hta.status.panel import render
from hta.status.snapshot import FORMAT, RunInfo, StatusSnapshot, build_snapshot, plan_line
from hta.summary import summarize
from hta.summary_view import summary_rows

INFO = RunInfo(workflow="workflows/blast/Makeflow", policy="hta", backend="simulated", started_at=1_700_000_000.0)


def dial_controller(policy: str) -> Controller:
    """Production's controller after 100 simulated seconds of a small two-stage workflow, its
    policy given a deadline or a budget (``hta:deadline_s=…``, ``hta:budget_node_s=…``)."""
    tasks = ([SimTask(f"s{i}", "split", 30 + 2 * i, cores=1) for i in range(24)]
             + [SimTask(f"a{i}", "align", 15 + i, cores=1, parents=[f"s{i}"]) for i in range(12)])
    cluster = ClusterModel(max_nodes=6, latency_mean_s=20, latency_sd_s=3, horizon_s=100.0, teardown_s=0)
    sim = Simulation(Workload("w", tasks), make_policy(policy), cluster, log=ScalingLogWriter())
    sim.run()
    return sim.controller


def metrics_of(controller: Controller) -> dict[str, list]:
    text = generate_latest(make_registry(lambda: build_snapshot(controller, INFO))).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def gauge(families: dict, name: str) -> float:
    (sample,) = families[name].samples
    return sample.value


DEADLINE = DialPlan(deadline_s=6000, nodes=12, projected_end_s=4860, spent_node_s=11520, forecast_node_s=50400)
BUDGET = DialPlan(budget_node_s=60120, nodes=5, projected_end_s=3900, spent_node_s=11520, forecast_node_s=55080)


# -- /status ---------------------------------------------------------------------------------------

def test_status_carries_the_controllers_latest_plan():
    """The plan the policy made last, as the controller keeps it and the scaling log has it,
    and through JSON as ``hta status`` reads it."""
    controller = dial_controller("hta:deadline_s=300")
    assert controller.plan is not None and controller.plan == controller.decisions[-1].plan
    s = build_snapshot(controller, INFO)
    assert s.plan is not None and DialPlan(**s.plan.model_dump(exclude={"line"})) == controller.plan
    assert s.plan.line == plan_line(controller.plan) and s.plan.line.startswith("deadline 5m · ")
    back = StatusSnapshot.model_validate_json(s.model_dump_json())
    assert back.plan == s.plan and back.format == FORMAT == "hta-status/1"


def test_status_carries_a_hand_set_plan_and_none_without():
    controller = dial_controller("hta")
    assert controller.plan is None and build_snapshot(controller, INFO).plan is None
    controller.plan = BUDGET
    p = build_snapshot(controller, INFO).plan
    assert p is not None
    assert (p.budget_node_s, p.spent_node_s, p.forecast_node_s, p.nodes) == (60120, 11520, 55080, 5)


def test_an_older_status_without_a_plan_still_reads():
    """A status from an HTA before plans (the same format, no ``plan`` key) reads as no plan."""
    data = json.loads(build_snapshot(dial_controller("hta"), INFO).model_dump_json())
    del data["plan"]
    assert StatusSnapshot.model_validate(data).plan is None


# -- /metrics --------------------------------------------------------------------------------------

def test_metrics_carry_a_deadlines_plan():
    controller = dial_controller("hta")
    controller.plan = DEADLINE
    m = metrics_of(controller)
    assert gauge(m, "hta_deadline_seconds") == 6000 and gauge(m, "hta_projected_end_seconds") == 4860
    assert gauge(m, "hta_spent_node_seconds") == 11520
    assert "hta_budget_node_seconds" not in m  # (no budget: no value to give)
    for name in ("hta_deadline_seconds", "hta_projected_end_seconds", "hta_spent_node_seconds"):
        assert m[name].type == "gauge" and len(m[name].documentation) > 20, name


def test_metrics_carry_a_budgets_plan_from_a_run():
    controller = dial_controller("hta:budget_node_s=600")
    plan = controller.plan
    assert plan is not None and plan.projected_end_s is not None
    m = metrics_of(controller)
    assert gauge(m, "hta_budget_node_seconds") == 600
    assert gauge(m, "hta_spent_node_seconds") == pytest.approx(plan.spent_node_s) and plan.spent_node_s > 0
    assert gauge(m, "hta_projected_end_seconds") == pytest.approx(plan.projected_end_s)
    assert "hta_deadline_seconds" not in m
    assert set(m) <= set(METRICS) and set(DIAL_METRICS) - set(m) == {"hta_deadline_seconds"}


def test_metrics_without_a_plan_have_none_of_the_dials():
    m = metrics_of(dial_controller("hta"))
    assert set(m) == set(METRICS) - set(DIAL_METRICS)


# -- the panel's line --------------------------------------------------------------------------------

@pytest.mark.parametrize("plan, line", [
    (DEADLINE, "deadline 1h40m · projected end 1h21m (12 workers)"),
    (DialPlan(deadline_s=6000), "deadline 1h40m · no forecast until a first task ends"),
    (DEADLINE.model_copy(update={"feasible": False, "nodes": 20, "projected_end_s": 7500}),
     "deadline 1h40m · cannot be kept: projected end 2h05m (20 workers), going as fast as it can"),
    (BUDGET, "budget 16.7 node·h · spent 3.2 + forecast 12.1 node·h (5 workers)"),
    (BUDGET.model_copy(update={"feasible": False, "nodes": 1}),
     "budget 16.7 node·h · cannot be kept: spent 3.2 + forecast 12.1 node·h (1 worker), going as cheaply as it can"),
    (BUDGET.model_copy(update={"feasible": False, "exhausted": True, "spent_node_s": 61200}),
     "budget 16.7 node·h · spent 17 node·h: the budget is spent, nothing more is bought"),
])
def test_the_plans_line(plan: DialPlan, line: str):
    assert plan_line(plan) == line


@pytest.mark.parametrize("feasible", [True, False])
def test_the_panel_shows_the_plan_marked_where_it_cannot_be_kept(feasible: bool):
    controller = dial_controller("hta")
    controller.plan = DEADLINE.model_copy(update={"feasible": feasible})
    console = Console(record=True, width=160, file=io.StringIO(), force_terminal=True, color_system="standard")
    console.print(render(build_snapshot(controller, INFO)))
    (row,) = [ln for ln in console.export_text(styles=True).splitlines() if "deadline 1h40m" in ln]
    assert "plan" in row
    assert ("\x1b[1;33m" in row) == (not feasible)  # bold yellow: the ask cannot be kept
    controller.plan = None
    console.print(render(build_snapshot(controller, INFO)))
    assert "deadline" not in console.export_text()


# -- hta report and the end-of-run summary ------------------------------------------------------------

RUN = {"kind": "run", "t": 0, "started_at": 1.7e9, "workflow": "wf/Makeflow", "policy": "hta", "backend": "local",
       "worker_shape": {"cores": 2, "memory_mb": 1000, "disk_mb": 1000}, "max_workers": 4}


def obs(t, s, u, d, workers, waiting=0, running=0, pending=0):
    return {"kind": "observation", "t": t, "supply_cores": s, "in_use_cores": u, "demand_cores": d,
            "waiting": waiting, "running": running, "workers": workers, "pending": pending}


def dial_log(tmp_path: Path, plan: dict | None, name: str = "run.jsonl", end: bool = True) -> Path:
    """Two workers asked for at 0; w2 drained at 3000 s; the workflow ends at 6000 s (1h40m).
    Node·s paid: w1 0..6000 + w2 0..3000 = 9000 = 2.5 node·h. ``plan``: the dial's plan on
    each decision (the last one counts), or no ``plan`` key at all, as a log from before it."""
    def decision(t, **kw):
        d = {"kind": "decision", "t": t, "next_decision_s": 10, "reason": "x", **kw}
        if plan is not None:
            d["plan"] = {**plan, "spent_node_s": 4 * t}
        return d
    recs = [
        RUN,
        decision(0, add=2),
        {"kind": "worker", "t": 0, "worker": "w1", "event": "requested", "cores": 2},
        {"kind": "worker", "t": 0, "worker": "w2", "event": "requested", "cores": 2},
        obs(0, 0, 0, 4, 0, waiting=2, pending=2),
        {"kind": "worker", "t": 100, "worker": "w1", "event": "connected", "cores": 2, "latency_s": 100},
        {"kind": "worker", "t": 100, "worker": "w2", "event": "connected", "cores": 2, "latency_s": 100},
        obs(100, 4, 4, 4, 2, running=2),
        decision(3000, drain=["w2"]),
        {"kind": "worker", "t": 3000, "worker": "w2", "event": "drained", "cores": 2},
        obs(3000, 2, 2, 2, 1, running=1),
    ]
    if end:
        recs.append({"kind": "end", "t": 6000, "exit_code": 0, "runtime_s": 6000, "tasks_done": 3})
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def report_rows(log: Path) -> dict[str, str]:
    (run,), errors = load_runs([log])
    assert errors == []
    return dict(rows(run.summary))


@pytest.mark.parametrize("plan, key, line", [
    ({"deadline_s": 7200}, "deadline", "2h: met, ended 20m before it"),
    ({"deadline_s": 5400}, "deadline", "1h30m: missed by 10m (ended at 1h40m)"),
    ({"budget_node_s": 10800}, "budget", "3 node·h: kept, 2.5 node·h paid (0.5 node·h to spare)"),
    ({"budget_node_s": 7200}, "budget", "2 node·h: overrun by 0.5 node·h (2.5 node·h paid)"),
    ({"budget_node_s": 7200, "exhausted": True, "feasible": False}, "budget",
     "2 node·h: overrun by 0.5 node·h (2.5 node·h paid); buying stopped once it was spent"),
], ids=["deadline-met", "deadline-missed", "budget-kept", "budget-overrun", "budget-spent"])
def test_the_report_says_whether_the_deadline_or_budget_was_kept(tmp_path: Path, plan, key, line):
    r = report_rows(dial_log(tmp_path, plan))
    assert r["node·s paid"] == "9,000" and r["runtime s"] == "6,000.0"  # (what the verdicts weigh)
    assert r[key] == line
    assert {"deadline", "budget"} - {key} - set(r) == {"deadline", "budget"} - {key}
    names = list(r)  # each beside the figure it weighs
    assert names.index(key) == names.index("runtime s" if key == "deadline" else "  node·s after it ended") + 1


def test_the_end_of_run_summary_says_it_too(tmp_path: Path):
    records, _ = read_records(dial_log(tmp_path, {"deadline_s": 5400}))
    assert summarize(records).plan.spent_node_s == 4 * 3000  # (the last decision's plan: HTA's count at its end)
    s = dict(summary_rows(summarize(records)))
    assert s["deadline"] == "1h30m: missed by 10m (ended at 1h40m)"
    records, _ = read_records(dial_log(tmp_path, {"budget_node_s": 10800}))
    assert dict(summary_rows(summarize(records)))["budget"] == "3 node·h: kept, 2.5 node·h paid (0.5 node·h to spare)"


def test_a_run_not_ended_is_not_judged(tmp_path: Path):
    """A log still being written (no end record: its last record, at 3000 s, is no end)."""
    r = report_rows(dial_log(tmp_path, {"deadline_s": 7200}, end=False))
    assert r["deadline"] == "2h: not over yet (the log's last record is at 50m, 1h10m before it)"
    r = report_rows(dial_log(tmp_path, {"deadline_s": 1800}, end=False))
    assert r["deadline"] == "30m: missed by 20m at least (still running: the log's last record is at 50m)"


def test_an_older_log_without_plans_reads_and_has_no_such_line(tmp_path: Path):
    log = dial_log(tmp_path, None)
    assert '"plan"' not in log.read_text()
    records, problems = read_records(log)
    assert problems == [] and all(r.plan is None for r in records if isinstance(r, DecisionRecord))
    assert summarize(records).plan is None
    r = report_rows(log)
    assert "deadline" not in r and "budget" not in r and r["node·s paid"] == "9,000"
    assert "deadline" not in dict(summary_rows(summarize(records)))


def test_runs_with_and_without_a_dial_side_by_side(tmp_path: Path):
    """A row only some runs have is a dash for the others, in every format."""
    logs = [dial_log(tmp_path, {"deadline_s": 7200}, "a.jsonl"), dial_log(tmp_path, None, "b.jsonl"),
            dial_log(tmp_path, {"budget_node_s": 7200}, "c.jsonl")]
    runs, _ = load_runs(logs)
    md = render_markdown(runs)
    assert "| deadline | 2h: met, ended 20m before it | — | — |" in md
    assert "| budget | — | — | 2 node·h: overrun by 0.5 node·h (2.5 node·h paid) |" in md
    labels = [ln.split(" | ")[0] for ln in md.splitlines()]  # (each beside the figure it weighs, in every run)
    assert labels.index("| deadline") == labels.index("| runtime s") + 1
    assert labels.index("| budget") == labels.index("|   node·s after it ended") + 1
    table = run_hta("report", *map(str, logs))
    assert table.returncode == 0, table.stderr
    assert re.search(r"│ deadline +│ 2h: met, +│ — +│ — +│", table.stdout)
    assert re.search(r"│ budget +│ — +│ — +│ 2 node·h: +│", table.stdout)
    j = json.loads(run_hta("report", "--format", "json", *map(str, logs)).stdout)
    assert [r["plan"] and (r["plan"]["deadline_s"], r["plan"]["budget_node_s"]) for r in j["runs"]] == [
        (7200, None), None, (None, 7200)]


# -- the report's figure -------------------------------------------------------------------------------

def test_the_figure_draws_the_deadline_and_names_the_budget(tmp_path: Path):
    logs = [dial_log(tmp_path, {"deadline_s": 7200}, "a.jsonl"), dial_log(tmp_path, {"budget_node_s": 7200}, "b.jsonl"),
            dial_log(tmp_path, None, "c.jsonl")]
    r = run_hta("report", *map(str, logs), "--plot", str(tmp_path / "fig"), "--plot-format", "svg")
    assert r.returncode == 0, r.stderr
    deadline, budget, plain = ((tmp_path / "fig" / f"run{i}-hta.svg").read_text() for i in (1, 2, 3))
    # (the figure's words are the SVG's <text> elements)
    assert ">deadline</text>" in deadline and ">deadline (2h)</text>" in deadline
    assert ">deadline 2h: met, ended 20m before it</text>" in deadline
    assert ">budget 2 node·h: overrun by 0.5 node·h (2.5 node·h paid)</text>" in budget
    assert "deadline" not in budget and "deadline" not in plain and "budget" not in plain


def test_the_deadline_line_is_at_the_deadline_or_named_at_the_edge(tmp_path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for deadline, drawn in ((7200, True), (5400, True), (60000, False)):
        (run,), _ = load_runs([dial_log(tmp_path, {"deadline_s": deadline})])
        fig, ax = plt.subplots()
        ax.plot([0, 6000], [0, 4])
        deadline_mark(ax, run.summary, 6000)
        lines = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("deadline")]
        texts = [t.get_text() for t in ax.texts]
        if drawn:
            (line,) = lines
            assert list(line.get_xdata()) == [deadline, deadline] and "deadline" in texts
            assert ax.get_xlim()[1] >= deadline  # (on the axis, not clipped off)
        else:  # ten times the run's length: named at the edge, the run not squeezed to the left
            assert lines == [] and texts == ["deadline 16h40m →"] and ax.get_xlim()[1] < 10000
        plt.close(fig)
