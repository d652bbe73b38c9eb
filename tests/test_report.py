"""`hta report` on hand-made logs, every number worked out by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import HTA, run_hta


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


RUN = {"kind": "run", "t": 0, "started_at": 1.7e9, "workflow": "wf/Makeflow", "policy": "hta", "backend": "local",
       "worker_shape": {"cores": 2, "memory_mb": 1000, "disk_mb": 1000}, "max_workers": 4}


def obs(t, s, u, d, workers, waiting=0, running=0, pending=0, done=0):
    return {"kind": "observation", "t": t, "supply_cores": s, "in_use_cores": u, "demand_cores": d,
            "waiting": waiting, "running": running, "workers": workers, "pending": pending, "tasks_done": done}


def hand_log(tmp_path: Path, name="a.jsonl", end=True) -> Path:
    recs = [
        RUN,
        {"kind": "decision", "t": 0, "add": 2, "next_decision_s": 10, "reason": "x"},
        {"kind": "worker", "t": 0, "worker": "w1", "event": "requested", "cores": 2},
        {"kind": "worker", "t": 0, "worker": "w2", "event": "requested", "cores": 2},
        obs(0, 0, 0, 4, 0, waiting=4, pending=2),
        {"kind": "worker", "t": 10, "worker": "w1", "event": "connected", "cores": 2, "latency_s": 10,
         "phases": {"node": 7, "start": 2, "connect": 1}},
        {"kind": "worker", "t": 12, "worker": "w2", "event": "connected", "cores": 2, "latency_s": 12,
         "phases": {"node": 8, "start": 3, "connect": 1}},
        obs(10, 2, 2, 4, 1, waiting=2, running=2, pending=1),
        obs(12, 4, 4, 4, 2, running=4),
        obs(30, 4, 1, 1, 2, running=1, done=3),
        {"kind": "decision", "t": 30, "drain": ["w2"], "next_decision_s": 10, "reason": "y"},
        {"kind": "worker", "t": 30, "worker": "w2", "event": "drained", "cores": 2},
        obs(30, 2, 1, 1, 1, running=1, done=3),
        {"kind": "categories", "t": 40, "categories": {"align": {
            "name": "align", "samples": 4, "peak": {"cores": 1, "memory_mb": 50, "disk_mb": 5},
            "runtime_mean_s": 20, "runtime_median_s": 19, "runtime_p90_s": 25}}},
    ]
    if end:
        recs.append({"kind": "end", "t": 40, "exit_code": 0, "runtime_s": 40, "tasks_done": 4, "tasks_failed": 0,
                     "tasks_retried": 1})
    return write(tmp_path / name, recs)


def test_every_number_by_hand(tmp_path):
    log = hand_log(tmp_path)
    r = run_hta("report", "--format", "json", str(log))
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    # waste = ∫max(S−U,0): 0..10: 0; 10..12: 0; 12..30: 0; 30..30: 3·0; 30..40: (2−1)·10 = 10
    assert run["waste_core_s"] == pytest.approx(10)
    # shortage = ∫(D−U): 0..10: 4·10; 10..12: 2·2; 12..30: 0; 30..40: 0 → 44
    assert run["shortage_core_s"] == pytest.approx(44)
    # node·s from request: w1 0..40 = 40, w2 0..30 = 30
    assert run["node_s"] == pytest.approx(70)
    # utilisation = ∫U / ∫S = (0·10 + 2·2 + 4·18 + 1·10) / (0·10 + 2·2 + 4·18 + 2·10) = 86 / 96
    assert run["utilization"] == pytest.approx(86 / 96)
    assert run["runtime_s"] == 40 and run["tasks_done"] == 4 and run["tasks_retried"] == 1
    assert run["policy"] == "hta" and run["workflow"] == "wf/Makeflow" and run["complete"] is True
    assert (run["scale_up_actions"], run["scale_down_actions"], run["scale_actions"]) == (1, 1, 2)
    assert (run["workers_requested"], run["workers_connected"], run["workers_drained"]) == (2, 2, 1)
    assert run["latency_count"] == 2 and run["latency_median_s"] == 11 and run["latency_p90_s"] == 12
    assert run["latency_phases_median_s"] == {"connect": 1, "node": 7.5, "start": 2.5}
    assert run["categories"]["align"]["runtime_p90_s"] == 25 and run["peak_workers"] == 2


def test_truncated_log_is_reported_up_to_its_last_complete_record(tmp_path):
    log = hand_log(tmp_path, end=False)
    with open(log, "a") as fh:
        fh.write('{"kind": "observation", "t": 35, "supply_co')
    r = run_hta("report", "--format", "json", str(log))
    assert r.returncode == 0
    (run,) = json.loads(r.stdout)["runs"]
    assert run["complete"] is False and run["runtime_s"] == 40  # last complete record: categories at t=40
    assert f"{log}:15: truncated last line" in r.stderr and "in progress" in r.stderr
    assert run["waste_core_s"] == pytest.approx(10)


def test_bad_inputs_name_file_and_line_and_the_rest_is_reported(tmp_path):
    good = hand_log(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    other = write(tmp_path / "other.jsonl", [{"hello": "world"}])
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(RUN) + "\nnot json\n" + json.dumps(obs(1, 1, 1, 1, 1)) + "\n")
    garbage = tmp_path / "garbage.jsonl"  # one line, not JSON: not a log whose last line was cut
    garbage.write_text("garbage\n")
    short = write(tmp_path / "short.jsonl", [{"kind": "run", "t": 0}])
    r = run_hta("report", "--format", "json", str(tmp_path / "missing.jsonl"), str(empty), str(other),
                str(broken), str(garbage), str(short), str(good))
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert [x["source"] for x in data["runs"]] == [str(good)]
    err = r.stderr
    assert f"{tmp_path / 'missing.jsonl'}: no such file" in err
    assert f"{empty}: empty log" in err
    assert f"{other}:1: not an HTA scaling log" in err
    assert f"{broken}:2: not JSON" in err
    assert f"{garbage}:1: not JSON" in err
    # the record's first problem in a few words, not pydantic's dump of every union member
    assert f"{short}:1: bad 'run' record: started_at: field required (and 4 more); is this an HTA scaling log?" in err
    assert "validation error" not in err and "tagged-union" not in err


def test_tables_and_plots(tmp_path):
    a = hand_log(tmp_path, "a.jsonl")
    b = hand_log(tmp_path, "b.jsonl")
    r = run_hta("report", str(a), str(b), "--plot", str(tmp_path / "fig"))
    assert r.returncode == 0, r.stderr
    assert "waste core·s" in r.stdout and "categories" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    pngs = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    assert pngs == ["comparison.png", "run1-hta.png", "run2-hta.png"]
    assert all((tmp_path / "fig" / p).stat().st_size > 10_000 for p in pngs)
    assert (tmp_path / "fig" / "run1-hta.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = run_hta("report", "--format", "markdown", str(a))
    assert md.returncode == 0 and "| waste core·s | 10.0 |" in md.stdout


def test_figures_in_every_asked_format_and_runs_labelled(tmp_path):
    a = hand_log(tmp_path, "a.jsonl")
    rec = json.loads(a.read_text().splitlines()[0])
    rec["workflow"] = "/data/runs/Makeflow"
    lines = a.read_text().splitlines()
    a.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    r = run_hta("report", str(a), "--plot", str(tmp_path / "fig"), "--plot-format", "png,svg,pdf")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert names == ["run1-hta.pdf", "run1-hta.png", "run1-hta.svg"]
    assert (tmp_path / "fig/run1-hta.pdf").read_bytes()[:5] == b"%PDF-"
    svg = (tmp_path / "fig/run1-hta.svg").read_text()
    assert ">runs — hta</text>" in svg and ">idle workers</text>" in svg
    bad = run_hta("report", str(a), "--plot", str(tmp_path / "fig"), "--plot-format", "gif")
    assert bad.returncode == 2 and "choose among png, svg, pdf" in bad.stderr


def test_report_on_a_workflow_reads_its_latest_run(tmp_path):
    runs = tmp_path / "Makeflow.hta" / "runs"
    runs.mkdir(parents=True)
    (tmp_path / "Makeflow").write_text("x:\n\ttouch x\n")
    hand_log(runs, "run-001.scaling.jsonl")
    second = hand_log(runs, "run-002.scaling.jsonl", end=False)
    (tmp_path / "Makeflow.scaling.jsonl").symlink_to("Makeflow.hta/runs/run-002.scaling.jsonl")
    r = run_hta("report", "--format", "json", str(tmp_path / "Makeflow"))
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert run["source"] == str(second) and run["complete"] is False


def test_every_row_label_is_distinct(tmp_path):
    """Rows are keyed by their label: two alike labels would show one value twice."""
    from hta.report import load_runs, rows

    (run,), _ = load_runs([hand_log(tmp_path)])
    labels = [k for k, _ in rows(run.summary)]
    assert len(labels) == len(set(labels)), labels


def css_line(t, container, cls, cpus, plan=True, pinned_by="affinity"):
    return {"time": 1.7e9 + t, "container": container, "futex": 100 if cls == "io" else 0, "class": cls,
            "cpus": cpus, "backend": "perf", "pinned_by": pinned_by, "processes": 2, "plan": plan}


def test_the_report_shows_what_css_did_on_each_worker_of_that_run(tmp_path):
    """The workers' CSS logs beside the run (WORKFLOW.hta/logs) are summed up per worker,
    only the lines within the run's own time (worker names start again each run)."""
    runs = tmp_path / "Makeflow.hta" / "runs"
    logs = tmp_path / "Makeflow.hta" / "logs"
    runs.mkdir(parents=True)
    logs.mkdir()
    log = hand_log(runs, "run-002.scaling.jsonl")
    write(logs / "w1.css.jsonl", [
        css_line(-500, "task-0", "io", [0]),  # an earlier run's worker w1
        css_line(5, "task-1", "io", [0]), css_line(5, "task-2", "cpu", [1]),
        css_line(10, "task-1", "io", [0, 1], plan=False), css_line(10, "task-2", "cpu", [0, 1], plan=False),
        {"time": 1.7e9 + 10, "trial": "kernel scheduling", "gain": 0.01, "noise": 0.02, "worst_loss": 0.2, "tasks": 2},
        {"time": 1.7e9 + 20, "trial": "plan kept", "gain": 0.06, "noise": 0.01, "worst_loss": 0, "tasks": 2},
    ])
    write(logs / "w2.css.jsonl", [css_line(15, "task-3", "cpu", [0, 1], pinned_by="dry-run")])
    write(logs / "w3.css.jsonl", [css_line(-500, "task-9", "cpu", [0, 1])])  # only in an earlier run
    r = run_hta("report", "--format", "json", str(log))
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    w1, w2 = run["css"]
    assert (w1["worker"], w1["task_intervals"], w1["io_intervals"], w1["pinned_intervals"]) == ("w1", 4, 2, 2)
    assert (w1["trials"], w1["trials_kept"], w1["backend"], w1["pinned_by"]) == (2, 1, "perf", "affinity")
    assert (w2["worker"], w2["task_intervals"], w2["pinned_intervals"], w2["pinned_by"]) == ("w2", 1, 0, "dry-run")
    table = run_hta("report", str(log)).stdout
    assert "CSS on each worker" in table and "1 of 2" in table


def test_a_simulated_run_has_no_css_rows(tmp_path):
    runs = tmp_path / "x.hta" / "runs"
    (tmp_path / "x.hta" / "logs").mkdir(parents=True)
    runs.mkdir()
    write(tmp_path / "x.hta" / "logs" / "w1.css.jsonl", [css_line(5, "task-1", "io", [0])])
    log = hand_log(runs, "run-001.scaling.jsonl")
    text = log.read_text().replace('"backend": "local"', '"backend": "local", "simulated": true')
    log.write_text(text)
    r = run_hta("report", "--format", "json", str(log))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["runs"][0]["css"] == []


def test_a_path_that_is_no_regular_file_is_refused_at_once(tmp_path):
    """A named pipe would wait for a writer forever; a device never ends: refused before
    they are read, each in one line, and the other logs are reported."""
    good = hand_log(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = run_hta("report", "--format", "json", str(fifo), "/dev/zero", str(tmp_path), str(good), timeout=30)
    assert r.returncode != 0
    assert f"hta: error: {fifo}: not a regular file (a named pipe): give a scaling log (WORKFLOW.hta/runs/*.jsonl) " \
           f"or a workflow\n" in r.stderr
    assert "hta: error: /dev/zero: not a regular file (a character device): give a scaling log" in r.stderr
    assert f"hta: error: {tmp_path}: is a directory" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 3
    assert [x["source"] for x in json.loads(r.stdout)["runs"]] == [str(good)]
    # a shell's pipe has its writer: read as a file is (`hta report <(zcat run.jsonl.gz)`, `… | hta report /dev/stdin`)
    r = subprocess.run([*HTA, "report", "--format", "json", "/dev/stdin"], input=good.read_text(), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and len(json.loads(r.stdout)["runs"]) == 1, r.stderr


def lines_of(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_a_number_that_is_nan_or_infinite_refuses_the_log_naming_its_line(tmp_path):
    """Python's json reads NaN, Infinity and 1e999, which HTA never writes (a NaN would
    be written null): a damaged line, refused as any other bad value is, not a report
    of ``waste nan``."""
    from hta.report import load_runs

    logs = []
    for name, old, new in (("nan", '"supply_cores": 4', '"supply_cores": NaN'),
                           ("inf", '"demand_cores": 1', '"demand_cores": -Infinity'),
                           ("big", '"start": 3', '"start": 1e999')):
        lines = lines_of(hand_log(tmp_path, f"{name}.jsonl"))
        n = next(i for i, line in enumerate(lines) if old in line)
        lines[n] = lines[n].replace(old, new, 1)
        logs.append((tmp_path / f"{name}.jsonl", n + 1))
        logs[-1][0].write_text("\n".join(lines) + "\n")
    runs, errors = load_runs([p for p, _ in logs])
    assert runs == []
    (nan, n1), (inf, n2), (big, n3) = logs
    assert errors == [
        f"{nan}:{n1}: bad 'observation' record: supply_cores is NaN, not a number HTA writes: the log is damaged; "
        f"correct or delete line {n1}",
        f"{inf}:{n2}: bad 'observation' record: demand_cores is -Infinity, not a number HTA writes: the log is "
        f"damaged; correct or delete line {n2}",
        f"{big}:{n3}: bad 'worker' record: phases.start is Infinity, not a number HTA writes: the log is damaged; "
        f"correct or delete line {n3}",
    ]
    r = run_hta("report", str(nan))
    assert r.returncode != 0 and "nan" not in r.stdout and "Traceback" not in r.stderr


def test_a_record_out_of_time_is_left_out_with_a_warning(tmp_path):
    """A record at a negative time, or one going back in time (a clock set back while the
    run ran: makeflow runs read the wall clock), is left out of the report with one
    warning naming file and line: the rest is reported as if it were not there."""
    from hta.report import load_runs

    back = tmp_path / "back.jsonl"
    lines = lines_of(hand_log(tmp_path, "back.jsonl"))
    lines.insert(9, json.dumps(obs(5, 0, 0, 100, 0)))  # line 10, after line 9's observation at t 12
    back.write_text("\n".join(lines) + "\n")
    early = tmp_path / "early.jsonl"
    lines = lines_of(hand_log(tmp_path, "early.jsonl"))
    lines[3:3] = [json.dumps({"kind": "worker", "t": -50, "worker": "w3", "event": "requested", "cores": 2}),
                  json.dumps(obs(-50, 0, 0, 100, 0))]  # lines 4 and 5
    early.write_text("\n".join(lines) + "\n")
    runs, errors = load_runs([back, early])
    assert errors == []
    assert runs[0].warnings == [f"{back}:10: 'observation' record at t 5 goes back in time (line 9 is at t 12): "
                                f"left out of the report (a clock set back during the run, or an edited log?)"]
    assert runs[1].warnings == [f"{early}:4: 'worker' record at t -50, before the run started: left out of the "
                                f"report, and 1 more line(s) out of time order, up to line 5 (a clock set back "
                                f"during the run, or an edited log?)"]
    for run in runs:  # the hand log's numbers (test_every_number_by_hand)
        s = run.summary
        assert (s.waste_core_s, s.shortage_core_s, s.node_s, s.complete) == (pytest.approx(10), pytest.approx(44),
                                                                             pytest.approx(70), True)
    r = run_hta("report", "--format", "json", str(back))
    assert r.returncode == 0 and f"hta: warning: {back}:10: 'observation' record at t 5 goes back" in r.stderr


def test_a_log_with_every_time_out_of_order_is_refused(tmp_path):
    from hta.report import load_runs

    log = tmp_path / "shifted.jsonl"
    lines = lines_of(hand_log(tmp_path, "shifted.jsonl"))
    shifted = [lines[0]] + [json.dumps({**json.loads(x), "t": json.loads(x)["t"] - 100}) for x in lines[1:]]
    log.write_text("\n".join(shifted) + "\n")
    assert load_runs([log]) == ([], [
        f"{log}:2: 'decision' record at t -100, before the run started, and every record after it is out of time "
        f"order too: nothing to report; times are seconds since the run started (0 and up): correct them, or give "
        f"another log"])


def test_two_logs_joined_in_one_file_are_refused_naming_the_second_run(tmp_path):
    """``cat a.jsonl b.jsonl > c.jsonl`` is two runs, not one with twice the shortage."""
    a, b = hand_log(tmp_path, "a.jsonl"), hand_log(tmp_path, "b.jsonl")
    c = tmp_path / "c.jsonl"
    c.write_text(a.read_text() + b.read_text())
    n = len(lines_of(a)) + 1
    r = run_hta("report", "--format", "json", str(c))
    assert r.returncode != 0 and json.loads(r.stdout)["runs"] == []
    assert r.stderr == (f"hta: error: {c}:{n}: a second 'run' record: two runs in one file (logs joined?): split it "
                        f"before line {n}; each run has its own log, WORKFLOW.hta/runs/*.jsonl\n")


def test_json_that_is_no_log_is_not_taken_for_a_workflow(tmp_path):
    """JSON, or a file named .json/.jsonl, is plainly not a Makeflow: it is said to be no
    scaling log, not offered to `hta makeflow`; text (a Makeflow perhaps) and a JX
    workflow (a JSON object with rules) still are."""
    from hta.report import load_runs

    arr = tmp_path / "arr.json"
    arr.write_text("[1,2,3]\n")
    number = tmp_path / "number"
    number.write_text("42\n")
    pretty = tmp_path / "instance.json"  # a WfCommons instance, say
    pretty.write_text(json.dumps({"name": "x", "workflow": {"tasks": []}}, indent=1))
    text = tmp_path / "notes.json"
    text.write_text("hello there\n")
    makeflow = tmp_path / "text.txt"
    makeflow.write_text("hello there\n")
    jx = tmp_path / "wf.json"
    jx.write_text(json.dumps({"rules": [{"command": "echo hi > x", "outputs": ["x"]}]}, indent=1))
    runs, errors = load_runs([arr, number, pretty, text, makeflow, jx])
    fix = "give a scaling log (WORKFLOW.hta/runs/*.jsonl) or a workflow"
    assert runs == []
    assert errors == [
        f"{arr}:1: not an HTA scaling log (first record must be kind 'run'): {fix}",
        f"{number}:1: not an HTA scaling log (first record must be kind 'run'): {fix}",
        f"{pretty}: a JSON document over several lines, not an HTA scaling log (a JSON record a line): {fix}",
        f"{text}:1: not JSON (Expecting value): not an HTA scaling log; {fix}",
        f"{makeflow}: no scaling log, and no HTA run of it as a workflow (text.txt.scaling.jsonl is not there; a run "
        f"with --log FILE writes FILE only): give a scaling log, or run hta makeflow {makeflow} first",
        f"{jx}: no scaling log, and no HTA run of it as a workflow (wf.json.scaling.jsonl is not there; a run "
        f"with --log FILE writes FILE only): give a scaling log, or run hta makeflow {jx} first",
    ]
