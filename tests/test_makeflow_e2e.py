"""`hta makeflow` end to end: the real makeflow, real work_queue_workers, no mocks."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import HTA, cctools_processes, run_hta, wait

pytestmark = pytest.mark.slow


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_gone(marker: str, timeout: float = 15.0) -> list:
    """Processes that mention ``marker`` (makeflow, hta worker, work_queue_worker, tasks) still alive."""
    wait(lambda: not cctools_processes(marker, any_name=True), timeout, every=0.2)
    return cctools_processes(marker, any_name=True)


def drains_seen_by_master(tape: Path) -> list[dict]:
    """Every ``drained`` event of a run recorded with ``--record``, with what the master said
    about that worker in the snapshot the drain was decided and carried out on: the worker's
    ``ip:port`` (from the backend's ``worker_ids`` answer of that step), its
    ``tasks_running`` and ``task_ids`` from ``/worker_status``, the running tasks the task
    table placed on it, and ``ran_again``: those of them that any later snapshot shows
    waiting again or running on another worker.

    ``/worker_status`` is read last in a snapshot, so it says whether the worker was idle.
    The task table is read before it, or kept from an earlier read within the read budget:
    a task it still shows on the worker may have ended since, and only ``ran_again`` tells
    a task taken from a busy worker from one that had finished."""
    snaps, ids, out = [], {}, []
    for entry in records(tape):
        call, value = entry["call"], entry["value"]
        if call == "snapshot":
            snaps.append(value)
        elif call == "worker_ids":
            ids = value
        elif call == "drain":
            snap = snaps[-1]
            address_of = {wid: addr for addr, wid in ids.items()}
            workers = {w["address"]: w for w in snap["workers"]}
            for e in value:
                if e["event"] != "drained":
                    continue
                addr = address_of.get(e["worker"])
                w = workers.get(addr)
                out.append({"t": e["t"], "worker": e["worker"], "address": addr, "after": len(snaps),
                            "tasks_running": None if w is None else w["tasks_running"],
                            "task_ids": None if w is None else w["task_ids"],
                            "tasks_on_it": [t["task_id"] for t in snap["tasks"]
                                            if t["worker"] == addr and t["state"] == "running"]})
    for d in out:
        d["ran_again"] = sorted({t["task_id"] for later in snaps[d.pop("after"):] for t in later["tasks"]
                                 if t["task_id"] in d["tasks_on_it"]
                                 and (t["state"] == "waiting" or t["state"] == "running" and t["worker"] != d["address"])})
    return out


def test_blast_completes_with_correct_outputs_and_scales_up_then_down(blast_copy: Path, tmp_path: Path):
    # reference: the same workflow run serially by plain makeflow -T local
    ref = tmp_path / "ref"
    shutil.copytree(blast_copy, ref)
    subprocess.run(["makeflow", "-T", "local", "-j", "2", "Makeflow"], cwd=ref, check=True, capture_output=True)

    tape = tmp_path / "tape.jsonl"
    # (no hold: idle workers are drained in the narrow stage, while tasks run beside them)
    r = run_hta("makeflow", "--policy", "hta:hold_latencies=0", "--max-workers", "3", "--worker-cores", "1",
                "--provision-delay", "2", "--min-interval", "1", "--record", str(tape), str(blast_copy / "Makeflow"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HTA run summary" in r.stdout and "waste" in r.stdout and "preparation latency" in r.stdout

    for s in (1, 2, 3):
        got = (blast_copy / f"result{s}.txt").read_text()
        assert got == (ref / f"result{s}.txt").read_text()
        queries, correct = got.splitlines()[0].split()[2::2]
        assert queries == correct and int(queries) > 0

    recs = records(blast_copy / "Makeflow.scaling.jsonl")
    kinds = [x["kind"] for x in recs]
    assert kinds[0] == "run" and kinds[-1] == "end" and recs[-1]["exit_code"] == 0
    assert recs[-1]["tasks_done"] == 1 + 3 * 2 + 12 + 1 + 4  # prepare + 3×(split, reduce) + aligns
    adds = [x["t"] for x in recs if x["kind"] == "decision" and x["add"] > 0]
    drains = [x["t"] for x in recs if x["kind"] == "worker" and x["event"] == "drained"]
    assert adds and drains and min(adds) < min(drains), "workers must be added, then drained"
    peak = max(x["workers"] for x in recs if x["kind"] == "observation")
    assert peak >= 2
    connected = [x for x in recs if x["kind"] == "worker" and x["event"] == "connected"]
    assert connected and all(x["latency_s"] >= 2.0 for x in connected)  # the emulated provisioning delay
    # a worker is never drained while it runs a task: for every drained worker, the master's
    # snapshot the drain was carried out on shows it connected and running nothing
    drained = drains_seen_by_master(tape)
    assert sorted((d["t"], d["worker"]) for d in drained) == sorted(
        (x["t"], x["worker"]) for x in recs if x["kind"] == "worker" and x["event"] == "drained")
    for d in drained:
        assert d["address"] is not None and d["tasks_running"] is not None, f"drained an unknown worker: {d}"
        assert d["tasks_running"] == 0 and not d["task_ids"] and not d["ran_again"], \
            f"worker drained while the master had tasks on it: {d}"
    assert not wait_gone(str(blast_copy))


def test_failing_workflow_exits_nonzero_and_leaves_nothing(tmp_path: Path):
    wf = tmp_path / "fail"
    wf.mkdir()
    (wf / "Makeflow").write_text("CATEGORY=x\nCORES=1\n\nout.txt:\n\tsleep 1; exit 3\n")
    r = run_hta("makeflow", "--max-workers", "1", str(wf / "Makeflow"), timeout=300)
    assert r.returncode != 0
    assert "hta: error: makeflow finished but 1 rule(s) failed" in r.stderr
    assert not wait_gone(str(wf))
    end = records(wf / "Makeflow.scaling.jsonl")[-1]
    assert end["kind"] == "end" and end["exit_code"] == r.returncode


def _sleep_workflow(tmp_path: Path, n: int = 6, seconds: int = 60) -> Path:
    wf = tmp_path / "sleepy"
    wf.mkdir()
    rules = "".join(f"s{i}.txt:\n\tsleep {seconds}; echo {i} > s{i}.txt\n\n" for i in range(n))
    (wf / "Makeflow").write_text("CATEGORY=sleep\nCORES=1\nMEMORY=50\nDISK=50\n\n" + rules)
    return wf


def _start_and_wait_for_workers(wf: Path) -> subprocess.Popen:
    p = subprocess.Popen([*HTA, "makeflow", "--max-workers", "2", str(wf / "Makeflow")], cwd=wf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = wf / "Makeflow.scaling.jsonl"
    if not wait(lambda: log.exists() and '"connected"' in log.read_text(), 60, every=0.3):
        p.kill()
        pytest.fail("no worker connected within 60 s")
    assert cctools_processes(str(wf))  # makeflow and its workers are running
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_makeflow_and_every_worker(tmp_path: Path, sig: int):
    wf = _sleep_workflow(tmp_path)
    p = _start_and_wait_for_workers(wf)
    import psutil

    tree = psutil.Process(p.pid).children(recursive=True)  # everything hta started, tasks included
    assert any(x.name() == "work_queue_worker" for x in tree)
    assert wait(lambda: list(wf.glob("resource_monitor_*")), 30, every=0.2)  # makeflow's per-rule wrappers
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig
    assert "interrupted" in err
    assert not wait_gone(str(wf))
    # makeflow deletes a wrapper when its rule ends, not those of the rules it aborts
    assert not list(wf.glob("resource_monitor_*")), "the aborted rules' monitor wrappers were left behind"

    def alive():
        return [x for x in tree if x.is_running() and x.status() != "zombie"]

    wait(lambda: not alive(), 15, every=0.2)
    assert not alive(), "a process hta started survived"


def test_sigkill_of_hta_leaves_no_orphans(tmp_path: Path):
    wf = _sleep_workflow(tmp_path)
    p = _start_and_wait_for_workers(wf)
    p.kill()
    p.wait()
    assert not wait_gone(str(wf), timeout=20), "makeflow/workers outlived a SIGKILLed hta"


def test_a_run_after_a_sigkilled_one_leaves_no_monitor_wrapper_behind(tmp_path: Path):
    """A SIGKILLed HTA's makeflow dies with it and leaves its rules' resource_monitor_N_*
    wrappers in the workflow's folder; the next run removes them with its own."""
    wf = _sleep_workflow(tmp_path, n=2, seconds=8)
    p = _start_and_wait_for_workers(wf)
    assert wait(lambda: list(wf.glob("resource_monitor_*")), 30, every=0.2)  # the rules run
    p.kill()
    p.wait()
    assert not wait_gone(str(wf), timeout=20)
    assert list(wf.glob("resource_monitor_*")), "makeflow died with its wrappers in place"
    again = run_hta("makeflow", "-q", str(wf / "Makeflow"), timeout=120)
    assert again.returncode == 0, again.stderr
    assert not list(wf.glob("resource_monitor_*")), "the killed run's monitor wrappers were left behind"


def test_missing_workflow_is_one_line_exit_2(tmp_path: Path):
    r = run_hta("makeflow", str(tmp_path / "nope" / "Makeflow"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not found" in r.stderr and "hta: error:" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--max-workers", "0"], "--max-workers must be at least 1"),
    (["--worker-cores", "two"], "--worker-cores must be a whole number"),
    (["--min-workers", "5", "--max-workers", "2"], "--min-workers (5) is above --max-workers (2)"),
    (["--policy", "magic"], "unknown policy 'magic'"),
])
def test_invalid_options_are_one_line_exit_2(tmp_path: Path, args, needle):
    wf = _sleep_workflow(tmp_path, n=1, seconds=1)
    r = run_hta("makeflow", *args, str(wf / "Makeflow"))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and r.stderr.strip().count("\n") == 0
    assert not cctools_processes(str(wf))


def test_reserved_makeflow_argument_is_refused(tmp_path: Path):
    wf = _sleep_workflow(tmp_path, n=1, seconds=1)
    r = run_hta("makeflow", str(wf / "Makeflow"), "--", "-T", "local")
    assert r.returncode == 2 and "makeflow option -T cannot be used under HTA" in r.stderr


@pytest.mark.parametrize("text, said", [
    ("out.txt: in.txt\n\tcat in.txt > out.txt\nthis is : not : valid\n",
     "does not parse at line 4, column 2: Rule does not have a command: fix that line"),
    ("out.txt:\n\techo hi > out.txt\nbroken line\n",
     "does not parse at line 3, column 1: Unrecognized keyword: broken: fix that line (a rule is"),
])
def test_a_workflow_makeflows_parser_refuses_is_bad_input_refused_before_a_run(tmp_path: Path, text, said):
    # makeflow's parser's words, where it stopped, in one line, exit 2: no run started, so
    # no run folder or scaling log is left (makeflow itself would have refused it after hta
    # had started the run: exit 1 and an empty summary)
    wf = tmp_path / "bad"
    wf.mkdir()
    (wf / "Makeflow").write_text(text)
    r = run_hta("makeflow", str(wf / "Makeflow"), timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"hta: error: workflow {wf / 'Makeflow'} {said}")
    assert r.stderr.strip().count("\n") == 0 and not r.stdout
    assert sorted(p.name for p in wf.iterdir()) == ["Makeflow"]
    assert not wait_gone(str(wf))


def test_a_missing_input_is_named_by_makeflows_consistency_check(tmp_path: Path):
    wf = tmp_path / "missing"
    wf.mkdir()
    (wf / "Makeflow").write_text("out.txt: missing_input.txt\n\tcat missing_input.txt > out.txt\n")
    r = run_hta("makeflow", str(wf / "Makeflow"), timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == ("hta: error: makeflow exited (exit code 1) before its master started: "
                                                "error: missing_input.txt does not exist, and is not created by any "
                                                "rule."), r.stderr  # (it said: workflow failed.)


def test_makeflow_not_installed_is_one_line(tmp_path: Path):
    wf = _sleep_workflow(tmp_path, n=1, seconds=1)
    venv_bin = str(Path(HTA[0]).parent)
    r = run_hta("makeflow", str(wf / "Makeflow"), env={"PATH": venv_bin})
    assert r.returncode == 2 and "makeflow not found on PATH" in r.stderr and "setup.sh" in r.stderr


def test_cost_preset_runs_a_workflow_on_probe_pods_a_third_of_a_node(blast_copy: Path):
    """``hta-cost`` buys a third of a node for a never-measured task (probes) and cuts
    later workers to what the tasks measured: on the real stack the workflow still
    completes, every output right, with workers smaller than the node shape."""
    r = run_hta("makeflow", "--policy", "hta-cost", "--max-workers", "4", "--worker-cores", "3",
                "--provision-delay", "2", "--min-interval", "1", str(blast_copy / "Makeflow"))
    assert r.returncode == 0, r.stdout + r.stderr
    for s in (1, 2, 3):
        queries, correct = (blast_copy / f"result{s}.txt").read_text().splitlines()[0].split()[2::2]
        assert queries == correct and int(queries) > 0
    recs = records(blast_copy / "Makeflow.scaling.jsonl")
    assert recs[0]["policy"] == "hta-cost" and recs[-1]["exit_code"] == 0
    requested = [x["cores"] for x in recs if x["kind"] == "worker" and x["event"] == "requested"]
    assert requested and min(requested) < 3, f"no worker smaller than a node was asked for: {requested}"
    assert not wait_gone(str(blast_copy))
