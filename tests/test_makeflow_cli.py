"""Whatever runs under ``makeflow -T wq`` runs under ``hta makeflow``: real
makeflow, real workers, small workflows of each kind a user brought."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_hta

pytestmark = pytest.mark.slow

TWO_RULES = "CATEGORY=small\nCORES=1\nout.txt:\n\techo hi > out.txt\nout2.txt: out.txt\n\tcat out.txt out.txt > out2.txt\n"


def ok(r) -> None:
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr


def end_of(log: Path) -> dict:
    return [json.loads(line) for line in log.read_text().splitlines() if '"kind":"end"' in line][-1]


def test_run_from_another_folder_writes_where_makeflow_would(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/Makeflow").write_text(TWO_RULES)
    r = run_hta("makeflow", "-q", "sub/Makeflow", cwd=tmp_path, timeout=120)
    ok(r)
    # as `makeflow -T local sub/Makeflow`: outputs in the current folder, the log beside the workflow
    assert (tmp_path / "out2.txt").read_text() == "hi\nhi\n"
    assert (tmp_path / "sub/Makeflow.makeflowlog").is_file()
    records = [json.loads(line) for line in (tmp_path / "sub/Makeflow.scaling.jsonl").read_text().splitlines()]
    connected = [r for r in records if r.get("event") == "connected"]
    assert connected, "a short run's worker that ran the tasks is counted as connected"


def test_change_directory_reads_the_log_makeflow_writes(tmp_path: Path):
    (tmp_path / "wf").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "wf/F").write_text("a.txt:\n\tfalse\n")
    r = run_hta("makeflow", "-q", str(tmp_path / "wf/F"), "--", "-X", "out", "--retry-count=1", cwd=tmp_path,
                timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rule a.txt" in r.stderr and "failed" in r.stderr
    (tmp_path / "wf/G").write_text("b.txt:\n\techo b > b.txt\n")
    ok(run_hta("makeflow", "-q", str(tmp_path / "wf/G"), "--", "-X", "out", cwd=tmp_path, timeout=120))
    assert (tmp_path / "out/b.txt").read_text() == "b\n"


def test_a_workflow_named_in_argv_needs_no_workflow_argument(tmp_path: Path):
    (tmp_path / "W").write_text(TWO_RULES)
    (tmp_path / "argv.json").write_text(json.dumps({"MAKEFLOW": "W", "max-remote": "2"}))
    ok(run_hta("makeflow", "-q", "--", "--argv", "argv.json", cwd=tmp_path, timeout=120))
    assert (tmp_path / "out2.txt").is_file()


def test_makeflow_ending_without_a_master_is_a_success(tmp_path: Path):
    (tmp_path / "W").write_text(TWO_RULES)
    ok(run_hta("makeflow", "-q", "W", cwd=tmp_path, timeout=120))
    ok(run_hta("makeflow", "-q", "W", cwd=tmp_path, timeout=120))  # nothing left to do
    r = run_hta("makeflow", "-q", "W", "--", "--clean", cwd=tmp_path, timeout=120)
    ok(r)
    assert not (tmp_path / "out2.txt").exists()
    # each run keeps its own scaling log; the workflow's points at the latest that ran the
    # workflow, the one `hta report W` shows: not a run where makeflow had nothing to do
    runs = sorted(p.name for p in (tmp_path / "W.hta/runs").iterdir())
    assert runs == ["run-001.scaling.jsonl", "run-002.scaling.jsonl", "run-003.scaling.jsonl"]
    assert all(end_of(tmp_path / "W.hta/runs" / run)["exit_code"] == 0 for run in runs)
    assert (tmp_path / "W.scaling.jsonl").resolve() == (tmp_path / "W.hta/runs/run-001.scaling.jsonl")
    assert end_of(tmp_path / "W.scaling.jsonl")["tasks_done"] == 2
    report = run_hta("report", "W", cwd=tmp_path)
    assert report.returncode == 0 and re.search(r"tasks done/failed/retried +│ 2/0/0 ", report.stdout), report.stdout
    # --log FILE that holds an earlier run's log: that log is kept, numbered (it was overwritten)
    (tmp_path / "mine.jsonl").write_text('{"kind": "run"}\n')
    r = run_hta("makeflow", "-q", "--log", "mine.jsonl", "W", cwd=tmp_path, timeout=120)
    ok(r)
    assert (tmp_path / "mine.jsonl.1").read_text() == '{"kind": "run"}\n' and end_of(tmp_path / "mine.jsonl")
    assert "hta: warning: the scaling log mine.jsonl held an earlier run's log: kept as mine.jsonl.1" in r.stderr


def test_shared_fs_runs_without_the_monitor_and_still_learns_runtimes(tmp_path: Path):
    # a quote in a command: without the monitor's wrapper the master's /task_status shows
    # it as \', which strict JSON refuses; every step failed and the run hung for good
    # (and a backslash beside it, which CCTools does escape: its \\. must stay one backslash;
    # the Makeflow writes it twice, as makeflow's parser takes one)
    (tmp_path / "W").write_text(TWO_RULES.replace("echo hi >", "echo 'h.i' | sed 's/\\\\./_/' >"))
    r = run_hta("makeflow", "W", "--", "--shared-fs", str(tmp_path), cwd=tmp_path, timeout=120)
    ok(r)
    assert "resource monitor" in r.stderr and "--shared-fs" in r.stderr
    assert "step failed" not in r.stderr, r.stderr
    assert (tmp_path / "out2.txt").read_text() == "h_i\nh_i\n"
    cats = [json.loads(line) for line in (tmp_path / "W.scaling.jsonl").read_text().splitlines()
            if '"kind":"categories"' in line][-1]["categories"]
    assert cats["small"]["samples"] == 2


def test_jx_workflow_gets_lookahead(tmp_path: Path):
    rules = [{"command": f"echo {i} > o{i}.txt", "outputs": [f"o{i}.txt"], "inputs": []} for i in range(3)]
    (tmp_path / "w.json").write_text(json.dumps({"rules": rules}))
    r = run_hta("makeflow", "w.json", "--", "--json", cwd=tmp_path, timeout=120)
    ok(r)
    assert "no DAG lookahead" not in r.stderr
    assert all((tmp_path / f"o{i}.txt").is_file() for i in range(3))


@pytest.mark.parametrize("argv,needle", [
    (["W", "--policy", "static", "-j", "3"], "hta makeflow has no option -j"),
    (["--max-wrkers", "3", "W"], "hta makeflow has no option --max-wrkers: did you mean --max-workers?"),
    (["W", "--polcy=static"], "hta makeflow has no option --polcy: did you mean --policy?"),
    (["W", "--retry-count=2"], "has no option --retry-count=2: makeflow's own options go after --"),
    (["W", "--", "-Tlocal"], "makeflow option -Tlocal cannot be used under HTA"),
    (["empty"], "has no rules"),
    (["W", "--", "--password", "W"], "makeflow option --password cannot be used under HTA"),
    (["W", "--log", "/nonexistent-dir/x.jsonl"], "does not exist"),
])
def test_refused_before_anything_starts(tmp_path: Path, argv, needle):
    (tmp_path / "W").write_text(TWO_RULES)
    (tmp_path / "empty").write_text("# nothing here\nX=1\n")
    r = run_hta("makeflow", *argv, cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("hta: error: ") and needle in line, line
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "nonexistent-dir").exists()


def test_a_log_file_an_earlier_run_wrote_is_set_aside_numbered_not_overwritten(tmp_path: Path):
    from hta.submit.run_dir import set_aside

    log = tmp_path / "run.jsonl"
    assert set_aside(log) is None  # (nothing there)
    log.write_text("")
    assert set_aside(log) is None and log.exists()  # (empty: nothing to keep)
    for n in (1, 2):
        log.write_text(f"run {n}\n")
        assert set_aside(log) == tmp_path / f"run.jsonl.{n}" and not log.exists()
    assert [(tmp_path / f"run.jsonl.{n}").read_text() for n in (1, 2)] == ["run 1\n", "run 2\n"]
