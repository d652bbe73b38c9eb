"""``hta simulate --workflow Makeflow``: a user's own workflow, in the world its last run measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hta.model import Resources
from hta.scaling_log import CategoriesRecord, EndRecord, RunRecord, ScalingLogWriter, WorkerRecord
from hta.sim.makeflow_workload import DEFAULT_RUNTIME_S, own_workflow, task_spans
from resource_monitor.model import CategoryModel
from tests.conftest import run_hta

T0 = 1_800_000_000.0  # the fake run's start (Unix s)

MAKEFLOW = """\
CATEGORY=prep
CORES=1
MEMORY=200

a.txt:
\tsleep 1 && echo a > a.txt

b.txt:
\tsleep 1 && echo b > b.txt

CATEGORY=merge
CORES=1
MEMORY=100

ab.txt: a.txt b.txt
\tcat a.txt b.txt > ab.txt
"""


def workflow(tmp_path: Path, text: str = MAKEFLOW) -> Path:
    wf = tmp_path / "wf"
    wf.mkdir()
    (wf / "Makeflow").write_text(text)
    return wf / "Makeflow"


def summary(node: int, category: str, start: float, wall: float, cores: float = 1.0, memory: float = 50) -> str:
    return json.dumps({"category": category, "command": "x", "exit_status": 0, "exit_type": "normal",
                       "start": [start, "s"], "end": [start + wall, "s"], "wall_time": [wall, "s"],
                       "cpu_time": [wall * cores, "s"], "cores": [cores, "cores"], "cores_avg": [cores, "cores"],
                       "memory": [memory, "MB"], "disk": [1, "MB"]})


def fake_run(mf: Path, *, walls: dict[int, float], spans: dict[int, float], latency: float = 4.0,
             max_workers: int = 2, started_at: float = T0, summaries_at: float = T0) -> Path:
    """What ``hta makeflow`` leaves beside a workflow: the scaling log (linked as the latest),
    the monitor's summaries, makeflow's log and the master's transactions log."""
    run_dir = mf.with_name("Makeflow.hta")
    (run_dir / "monitor").mkdir(parents=True)
    (run_dir / "runs").mkdir()
    log = run_dir / "runs" / "run-001.scaling.jsonl"
    w = ScalingLogWriter(log)
    w.write(RunRecord(started_at=started_at, workflow=str(mf), policy="hta", backend="local",
                      worker_shape=Resources(cores=1, memory_mb=1024, disk_mb=1000), max_workers=max_workers))
    for i in range(2):
        w.write(WorkerRecord(t=latency, worker=f"w{i}", event="connected", cores=1, latency_s=latency + i * 0.5))
    w.write(CategoriesRecord(t=10, categories={"prep": CategoryModel(name="prep", samples=2, runtime_mean_s=7.0,
                                                                     peak=Resources(cores=1, memory_mb=40))}))
    w.write(EndRecord(t=10, exit_code=0, runtime_s=10, tasks_done=3))
    w.close()
    mf.with_name("Makeflow.scaling.jsonl").symlink_to(log.relative_to(mf.parent))
    cats = {0: "prep", 1: "prep", 2: "merge"}
    for node, wall in walls.items():
        (run_dir / "monitor" / f"resource-rule-{node}.summary").write_text(
            summary(node, cats[node], summaries_at + 1, wall))
    us = lambda t: int(t * 1e6)
    mlog, tr = [f"# STARTED {us(started_at)}"], []
    for node, span in spans.items():
        job = node + 1
        mlog.append(f"{us(started_at + 1)} {node} 1 {job} 0 0 0 0 0 0")
        tr.append(f"{us(started_at + 2)} 99 TASK {job} RUNNING 127.0.0.1:1 FIRST_RESOURCES {{}}")
        tr.append(f"{us(started_at + 2 + span)} 99 TASK {job} WAITING_RETRIEVAL 127.0.0.1:1")
    mf.with_name("Makeflow.makeflowlog").write_text("\n".join(mlog) + "\n")
    mf.with_name("Makeflow.wqlog.tr").write_text("\n".join(tr) + "\n")
    return log


def test_no_run_reads_the_dag_and_says_what_it_assumed(tmp_path: Path) -> None:
    own = own_workflow(workflow(tmp_path).parent)  # (a folder holding the Makeflow)
    tasks = own.workload.tasks
    assert [t.category for t in tasks] == ["prep", "prep", "merge"]
    assert tasks[2].parents == ["0", "1"] and tasks[0].parents == []
    assert [t.memory_mb for t in tasks] == [200, 200, 100]  # (what the categories declare)
    assert all(t.runtime_s == DEFAULT_RUNTIME_S for t in tasks)
    assert own.workload.declared and own.workload.name == "wf"
    assert own.run is None and own.cluster == {} and own.measured == []
    assert any("3 of 3 rules run 60 s" in a and "hta makeflow" in a for a in own.assumptions)


def test_a_run_gives_runtimes_latency_cap_and_the_masters_time(tmp_path: Path) -> None:
    mf = workflow(tmp_path)
    fake_run(mf, walls={0: 1.5, 1: 2.5, 2: 0.5}, spans={0: 1.8, 1: 2.7, 2: 0.9})
    own = own_workflow(mf)
    assert [t.runtime_s for t in own.workload.tasks] == [1.5, 2.5, 0.5]
    assert [t.memory_mb for t in own.workload.tasks] == [50, 50, 50]  # (measured, not declared)
    c = own.cluster
    assert c["max_nodes"] == 2 and c["start_nodes"] == 0 and c["node_cores"] == 1
    assert c["latency_mean_s"] == pytest.approx(4.25) and c["latency_sd_s"] == pytest.approx(0.354, abs=1e-3)
    assert c["task_overhead_by_category_s"] == pytest.approx({"prep": 0.25, "merge": 0.4})
    assert not any("60 s" in a for a in own.assumptions)
    assert any("resource monitor" in m for m in own.measured)


def test_summaries_of_another_run_are_not_taken_for_this_ones(tmp_path: Path) -> None:
    """A rule's summary from a later run (the monitor folder holds the newest run's) would
    give another run's runtime: the category's mean in this run is used instead."""
    mf = workflow(tmp_path)
    fake_run(mf, walls={0: 1.5, 1: 2.5}, spans={}, summaries_at=T0 + 3600)
    own = own_workflow(mf)
    assert [t.runtime_s for t in own.workload.tasks[:2]] == [7.0, 7.0]  # prep's mean in the run's log
    assert own.workload.tasks[2].runtime_s == DEFAULT_RUNTIME_S  # merge: never measured
    assert any("1 of 3 rules run 60 s" in a for a in own.assumptions)


def test_task_spans_read_only_the_runs_own_lines(tmp_path: Path) -> None:
    """Job ids restart at 1 with each master: an earlier run's lines match other rules."""
    mlog, tr = tmp_path / "m.makeflowlog", tmp_path / "m.wqlog.tr"
    mlog.write_text("100000000 0 1 1 0\n" "200000000 5 1 1 0\n")
    tr.write_text("100000000 9 TASK 1 RUNNING a FIRST_RESOURCES {}\n100500000 9 TASK 1 WAITING_RETRIEVAL a\n"
                  "200000000 9 TASK 1 RUNNING a FIRST_RESOURCES {}\n203000000 9 TASK 1 WAITING_RETRIEVAL a\n")
    assert task_spans(tr, mlog, since=150) == {5: pytest.approx(3.0)}
    assert task_spans(tr, mlog, until=150) == {0: pytest.approx(0.5)}


def test_cli_prints_what_it_measured_and_a_flag_beats_the_run(tmp_path: Path) -> None:
    mf = workflow(tmp_path)
    fake_run(mf, walls={0: 10.0, 1: 10.0, 2: 1.0}, spans={0: 10.2, 1: 10.2, 2: 1.2})
    r = run_hta("simulate", "--workflow", str(mf), "--policies", "hta", "--seeds", "1", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "hta: measured: workers' latency 4.2 ± 0.4 s" in r.stderr
    two = json.loads(r.stdout)["runs"][0]["runtime_s"]
    r = run_hta("simulate", "--workflow", str(mf), "--policies", "hta", "--seeds", "1", "--format", "json",
                "--max-nodes", "1")
    one = json.loads(r.stdout)["runs"][0]["runtime_s"]
    assert one > two + 8  # one worker runs the two 10 s rules one after the other
    assert "hta: given: --max-nodes 1, in place of what the run measured" in r.stderr
    assert "default cluster" not in r.stderr  # (the run measured every setting)


def test_without_a_run_the_default_cluster_is_said_as_assumed(tmp_path: Path) -> None:
    mf = workflow(tmp_path)
    r = run_hta("simulate", "--workflow", str(mf), "--policies", "hta", "--seeds", "1", "--node-cores", "2")
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "default cluster" in x]
    assert "at most 20 nodes" in line and "a node latency of 157.4 s" in line
    assert "cores a node" not in line  # (--node-cores was given)


def test_cli_refuses_what_it_cannot_simulate(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello world\n")
    r = run_hta("simulate", "--workflow", str(bad))
    assert r.returncode == 2 and "neither WfCommons JSON nor a Makeflow" in r.stderr
    assert "Unrecognized keyword: hello" in r.stderr
    assert "give a WfFormat JSON instance or a Makeflow file" in r.stderr and "Traceback" not in r.stderr
    r = run_hta("simulate", "--from-run", str(tmp_path))
    assert r.returncode == 2 and "--from-run needs --workflow MAKEFLOW" in r.stderr
    r = run_hta("simulate", "--workflow", str(tmp_path))
    assert r.returncode == 2 and "holds no workflow file" in r.stderr
    mf = workflow(tmp_path)
    r = run_hta("simulate", "--workflow", str(mf), "--from-run", str(tmp_path / "nope.jsonl"))
    assert r.returncode == 2 and "--from-run" in r.stderr and "not found" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_simulating_a_real_run_comes_within_ten_percent_of_it(tmp_path: Path) -> None:
    """After one real run of a workflow the project has never seen (local workers, cap 2 × 1
    core, a 2 s emulated start), the simulator at the same cap and latency, with what that
    run measured, gives its runtime within 10 %."""
    rules = ["CATEGORY=fetch", "CORES=1", "MEMORY=100", ""]
    for i, s in enumerate((0.8, 1.3, 1.1, 0.9, 1.6, 1.2, 1.0, 1.4)):
        rules += [f"raw{i}.txt:", f"\tsleep {s} && echo {i} > raw{i}.txt", ""]
    rules += ["CATEGORY=fold", "CORES=1", "MEMORY=100", ""]
    for j, s in enumerate((2.2, 2.8, 2.5, 2.0)):
        rules += [f"fold{j}.txt: raw{2 * j}.txt raw{2 * j + 1}.txt", f"\tsleep {s} && cat raw{2 * j}.txt > fold{j}.txt", ""]
    mf = workflow(tmp_path, "\n".join(rules))
    real = run_hta("makeflow", "--max-workers", "2", "--worker-cores", "1", "--provision-delay", "2", str(mf),
                   timeout=300)
    assert real.returncode == 0, real.stderr[-2000:]
    runtime = json.loads(mf.with_name("Makeflow.scaling.jsonl").read_text().splitlines()[-1])["runtime_s"]
    sim = run_hta("simulate", "--workflow", str(mf), "--policies", "hta", "--seeds", "3", "--format", "json")
    assert sim.returncode == 0, sim.stderr
    assert re.search(r"measured: 12 of 12 rules", sim.stderr)
    simulated = sum(r["runtime_s"] for r in json.loads(sim.stdout)["runs"]) / 3
    assert abs(simulated - runtime) / runtime < 0.10, (simulated, runtime)
