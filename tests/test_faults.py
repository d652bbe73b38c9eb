"""Faults injected into real runs (real makeflow, real workers): the run ends, says why in
one line, reports the work it lost, and leaves nothing behind. The fast subset of
``bench/faults.py``; each test failed before the fix it covers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import HTA, cctools_processes, run_hta, wait

pytestmark = pytest.mark.slow


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return out


def left_behind(marker: Path, timeout: float = 15.0) -> list:
    wait(lambda: not cctools_processes(str(marker), any_name=True), timeout, every=0.2)
    return cctools_processes(str(marker), any_name=True)


def error_line(stderr: str) -> str:
    """The one ``hta: error:`` line (and there is exactly one)."""
    errors = [ln for ln in stderr.splitlines() if ln.startswith("hta: error:")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


def says_code(text: str, code: int) -> bool:
    """Whether ``text`` names a raw return code such as -9 (a signal is to be named instead);
    a path with the digits in it (pytest's /tmp/pytest-of-root/pytest-90/) does not count."""
    return re.search(rf"(?<![\w/.-]){code}(?!\d)", text) is not None


def test_a_raw_return_code_is_told_from_digits_in_a_path():
    assert says_code("makeflow exited with -9", -9) and says_code("(-15)", -15)
    assert not says_code("see /tmp/pytest-of-root/pytest-90/x/makeflow.out", -9)
    assert not says_code("pytest-150 and -90", -9) and not says_code("killed by SIGKILL", -9)


def workflow(tmp_path: Path, text: str, name: str = "wf") -> Path:
    wf = tmp_path / name
    wf.mkdir()
    (wf / "Makeflow").write_text(text)
    return wf


def sleepy(tmp_path: Path, n: int = 2, seconds: int = 8, name: str = "sleepy") -> Path:
    """``n`` independent tasks; each appends to ``runs.txt`` (by absolute path: tasks run in
    the workers' sandboxes) when it starts, so a task run twice shows."""
    runs = tmp_path / name / "runs.txt"
    rules = "".join(f"s{i}.txt:\n\techo s{i} >> {runs}; sleep {seconds}; echo {i} > s{i}.txt\n\n" for i in range(n))
    return workflow(tmp_path, "CATEGORY=sleep\nCORES=1\nMEMORY=50\nDISK=50\n\n" + rules, name)


def worker_tree(marker: Path) -> list[psutil.Process]:
    """``hta worker`` of this run and everything under it."""
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if " worker " in cmd and "--master" in cmd and str(marker) in cmd:
            try:
                return [p, *p.children(recursive=True)]
            except psutil.Error:
                return []
    return []


def running_tasks(log: Path) -> int:
    if not log.exists():
        return 0
    obs = [r for r in records(log) if r["kind"] == "observation"]
    return obs[-1]["running"] if obs else 0


# -- 1: a rule that fails for good ---------------------------------------------------------

def test_a_rule_that_fails_for_good_with_dependents_ends_the_run_and_names_it(tmp_path: Path):
    wf = workflow(tmp_path, "CATEGORY=x\nCORES=1\nMEMORY=50\nDISK=50\n\n"
                            "a.txt:\n\tsleep 1; exit 3\n\n"
                            "b.txt: a.txt\n\tcat a.txt > b.txt\n\n"
                            "c.txt:\n\techo c > c.txt\n")
    t0 = time.time()
    r = run_hta("makeflow", "--max-workers", "1", str(wf / "Makeflow"), "--", "--retry-count=1", timeout=120)
    took = time.time() - t0
    assert r.returncode == 1, r.stderr
    err = error_line(r.stderr)
    assert "rule a.txt" in err and "exit code 3" in err and "after 2 attempts" in err, err
    assert "1 rule(s) depending on it can never run" in err and "stopped makeflow" in err, err
    assert took < 60, f"took {took:.0f} s"
    assert (wf / "c.txt").read_text() == "c\n", "the independent rule's output is kept"
    end = records(wf / "Makeflow.scaling.jsonl")[-1]
    assert end["kind"] == "end" and end["exit_code"] == 1
    assert not left_behind(wf)


def test_a_task_over_its_categorys_memory_is_named_and_learned_from(tmp_path: Path):
    wf = workflow(tmp_path, "CATEGORY=big\nCORES=1\nMEMORY=60\nDISK=100\n\n"
                            "a.txt:\n\tpython3 -c \"import time; x=b'a'*(200*2**20); time.sleep(8)\"; echo a > a.txt\n\n"
                            "CATEGORY=small\nMEMORY=100\n\n"
                            "b.txt: a.txt\n\tcat a.txt > b.txt\n")
    r = run_hta("makeflow", "--max-workers", "1", str(wf / "Makeflow"), timeout=120)
    assert r.returncode == 1, r.stderr
    err = error_line(r.stderr)
    assert "rule a.txt (category big) was stopped by the resource monitor" in err and "memory 60 MB" in err, err
    assert "raise MEMORY of category big to at least" in err, err
    cats = [x for x in records(wf / "Makeflow.scaling.jsonl") if x["kind"] == "categories"][-1]["categories"]
    assert cats["big"]["peak"]["memory_mb"] > 150, "the over-limit task's memory was learned"
    assert not left_behind(wf)


# -- 2: workers that die at start --------------------------------------------------------

def test_workers_that_cannot_start_end_the_run_with_the_workers_own_words(tmp_path: Path):
    wf = sleepy(tmp_path, n=2, seconds=1)
    t0 = time.time()
    r = run_hta("makeflow", "--max-workers", "2", "--worker-disk", "100000000", str(wf / "Makeflow"), timeout=120)
    took = time.time() - t0
    assert r.returncode == 1, r.stderr
    err = error_line(r.stderr)
    assert "workers cannot start" in err and "has less than the promised disk space" in err, err
    assert "--worker-disk" in err and "logs/w" in err, err
    recs = records(wf / "Makeflow.scaling.jsonl")
    failed = [x for x in recs if x["kind"] == "worker" and x["event"] == "failed"]
    assert len(failed) >= 5 and all("promised disk space" in x["reason"] for x in failed)
    assert sum(1 for x in recs if x["kind"] == "worker" and x["event"] == "requested") <= 8, "relaunches are capped"
    assert took < 60, f"took {took:.0f} s"
    assert not left_behind(wf)


# -- 3: scaling log trouble ----------------------------------------------------------------

def test_a_scaling_log_that_cannot_be_written_does_not_change_the_result(tmp_path: Path):
    wf = sleepy(tmp_path, n=2, seconds=1)
    r = run_hta("makeflow", "--max-workers", "2", "--log", "/dev/full", str(wf / "Makeflow"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "hta: error" not in r.stderr
    assert "hta: warning: scaling log /dev/full is incomplete" in r.stderr and "No space left on device" in r.stderr
    assert "complete" in r.stdout and "2 done" in r.stdout, r.stdout
    assert [(wf / f"s{i}.txt").read_text() for i in range(2)] == ["0\n", "1\n"]
    assert not left_behind(wf)


def test_an_unwritable_scaling_log_is_one_line_before_anything_starts(tmp_path: Path):
    wf = sleepy(tmp_path, n=1, seconds=1)
    r = run_hta("makeflow", "--log", str(tmp_path), str(wf / "Makeflow"), timeout=60)
    assert r.returncode == 2
    err = error_line(r.stderr)
    assert r.stderr.strip() == err and "is a directory: give a file name" in err and "--log" in err, r.stderr
    r = run_hta("makeflow", "--log", "/proc/hta-scaling.jsonl", str(wf / "Makeflow"), timeout=60)
    assert r.returncode == 2
    err = error_line(r.stderr)
    assert r.stderr.strip() == err and "cannot write the scaling log" in err and "--log" in err, r.stderr
    assert not (wf / "Makeflow.makeflowlog").exists(), "makeflow was started"


def test_a_runtime_prior_that_gives_no_runtimes_is_one_line_before_anything_starts(tmp_path: Path):
    wf = sleepy(tmp_path, n=1, seconds=1)
    from hta.scaling_log import RunRecord

    (tmp_path / "nothing.jsonl").write_text(RunRecord(started_at=0.0, policy="hta", backend="local", max_workers=1,
                                                      worker_shape={"cores": 1}).model_dump_json() + "\n")
    for given, says in ((tmp_path / "missing.jsonl", "no such file"),
                        (tmp_path / "nothing.jsonl", "no task category was measured"),
                        (wf / "Makeflow", "nor a workflow HTA has run")):
        r = run_hta("makeflow", "--deadline", "1h", "--runtime-prior", str(given), str(wf / "Makeflow"), timeout=60)
        assert r.returncode == 2, r.stderr
        err = error_line(r.stderr)
        assert r.stderr.strip() == err and err.count("--runtime-prior") == 1 and says in err, r.stderr
    assert not (wf / "Makeflow.makeflowlog").exists(), "makeflow was started"


# -- 4: lost work ------------------------------------------------------------------------

def test_a_worker_killed_mid_task_is_reported_as_lost_and_rerun_work(tmp_path: Path):
    wf = sleepy(tmp_path, n=2, seconds=8)
    log = wf / "Makeflow.scaling.jsonl"
    p = subprocess.Popen([*HTA, "makeflow", "--max-workers", "1", str(wf / "Makeflow")], cwd=wf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait(lambda: running_tasks(log) >= 1, 60, every=0.3), "no task ran"
        time.sleep(2)  # let the task do some work, to be lost
        wq = [x for x in worker_tree(wf) if x.name() == "work_queue_worker"]
        assert wq
        wq[0].kill()
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert [(wf / f"s{i}.txt").read_text() for i in range(2)] == ["0\n", "1\n"]
    lost = [x for x in records(log) if x["kind"] == "worker" and x["event"] == "lost"]
    assert len(lost) == 1 and lost[0]["tasks_lost"] == 1 and lost[0]["lost_work_core_s"] >= 2, lost
    assert "killed by SIGKILL" in lost[0]["reason"]
    end = records(log)[-1]
    assert end["kind"] == "end" and end["tasks_retried"] == 1 and end["lost_work_core_s"] >= 2
    assert "1 retried" in out and "1 task(s) run again" in out, out
    assert len((wf / "runs.txt").read_text().split()) == 3, "the master ran the lost task again"
    assert not left_behind(wf)


# -- 5: two runs in one folder -----------------------------------------------------------

def test_a_second_run_in_the_same_folder_is_refused_and_the_first_is_untouched(tmp_path: Path):
    wf = sleepy(tmp_path, n=2, seconds=4)
    log = wf / "Makeflow.scaling.jsonl"
    first = subprocess.Popen([*HTA, "makeflow", "--max-workers", "2", str(wf / "Makeflow")], cwd=wf,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait(lambda: running_tasks(log) >= 1, 60, every=0.3), "the first run did not start"
        second = run_hta("makeflow", "--max-workers", "2", str(wf / "Makeflow"), timeout=60)
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert second.returncode == 2
    err2 = error_line(second.stderr)
    assert second.stderr.strip() == err2 and "already running" in err2 and str(first.pid) in err2, second.stderr
    assert first.returncode == 0, err
    assert sorted((wf / "runs.txt").read_text().split()) == ["s0", "s1"], "a task ran twice"
    from hta.scaling_log import read_records

    recs, problems = read_records(log)
    assert not problems and recs[0].kind == "run" and recs[-1].kind == "end" and recs[-1].exit_code == 0
    assert sum(1 for x in recs if x.kind == "run") == 1
    assert not left_behind(wf)


# -- 6: a stalled (SIGSTOPped) worker ----------------------------------------------------

def test_a_stopped_worker_is_replaced_after_the_stall_timeout(tmp_path: Path):
    wf = sleepy(tmp_path, n=2, seconds=8)
    log = wf / "Makeflow.scaling.jsonl"
    p = subprocess.Popen([*HTA, "makeflow", "--max-workers", "1", "--worker-stall-timeout", "6",
                          str(wf / "Makeflow")], cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: list[psutil.Process] = []
    try:
        assert wait(lambda: running_tasks(log) >= 1, 60, every=0.3), "no task ran"
        stopped = worker_tree(wf)  # a hung node: the worker and its task, all stopped
        assert len(stopped) >= 3
        for x in stopped:
            x.send_signal(signal.SIGSTOP)
        t_stop = time.time()
        out, err = p.communicate(timeout=150)
    finally:
        p.kill()
        for x in stopped:
            try:
                x.kill()
            except psutil.Error:
                pass
    assert p.returncode == 0, err
    assert [(wf / f"s{i}.txt").read_text() for i in range(2)] == ["0\n", "1\n"]
    lost = [x for x in records(log) if x["kind"] == "worker" and x["event"] == "lost"]
    assert len(lost) == 1 and "stopped answering the master" in lost[0]["reason"] and lost[0]["tasks_lost"] == 1
    assert "stopped answering the master" in err
    assert time.time() - t_stop < 60, "the stall was not noticed within the stall timeout"
    assert all(not x.is_running() or x.status() == psutil.STATUS_ZOMBIE for x in stopped), "a stopped process survived"
    assert not left_behind(wf)


# -- 7: bad input and signals ------------------------------------------------------------

def test_a_binary_workflow_is_refused_at_once(tmp_path: Path):
    wf = tmp_path / "bin"
    wf.mkdir()
    (wf / "Makeflow").write_bytes(Path("/usr/bin/makeflow").read_bytes()[:200_000])
    t0 = time.time()
    r = run_hta("makeflow", str(wf / "Makeflow"), timeout=60)
    assert r.returncode == 2 and time.time() - t0 < 10
    err = error_line(r.stderr)
    assert r.stderr.strip() == err and "is not a text file" in err, r.stderr
    assert not left_behind(wf)


def catches_sigterm(pid: int) -> bool:
    """Has the process set a handler for SIGTERM yet (its SigCgt mask in /proc)?"""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


# from the moment HTA's code has set its handler: before that the Python interpreter itself is
# still starting (about 60 ms here, past 0.3 s on a loaded machine), and a signal then ends
# it before any of HTA's code runs; then 0.3 to 2 s in
@pytest.mark.parametrize("delay", [0.3, 0.6, 1.0, 2.0])
def test_sigterm_in_the_first_seconds_exits_143_with_a_line(tmp_path: Path, delay: float):
    wf = sleepy(tmp_path, n=1, seconds=30)
    t0 = time.monotonic()
    p = subprocess.Popen([*HTA, "makeflow", str(wf / "Makeflow")], cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert wait(lambda: p.poll() is not None or catches_sigterm(p.pid), 30, every=0.01) and p.poll() is None
    time.sleep(max(0.0, delay - (time.monotonic() - t0)))
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, (p.returncode, err)
    line = error_line(err)
    assert "interrupted by SIGTERM" in line and not says_code(err + out, -15), err
    assert not left_behind(wf)


def run_patched(wf: Path, patch: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``hta makeflow WORKFLOW`` in a Python that first runs ``patch`` (a fault put in place)."""
    script = f"import signal, sys\n{patch}\nfrom hta.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", script, "makeflow", *argv, str(wf / "Makeflow")], cwd=wf,
                          capture_output=True, text=True, timeout=timeout)


# what the line above's failure was (CI, once in about 5,000 runs: exit 0 after the workflow ran):
# the CLI's handler raised where Python swallows exceptions (a __del__, an event loop callback)
SWALLOWED_SIGTERM = """
import hta.submit.run

class RaisesSigtermWhenCollected:
    def __del__(self):
        signal.raise_signal(signal.SIGTERM)  # the handler's exception is "ignored" here

checked = hta.submit.run.check_not_empty

def check_then_swallow(args):
    checked(args)
    RaisesSigtermWhenCollected()

hta.submit.run.check_not_empty = check_then_swallow
"""


def test_a_sigterm_swallowed_where_python_ignores_exceptions_still_stops_the_run(tmp_path: Path):
    wf = sleepy(tmp_path, n=1, seconds=30)
    r = run_patched(wf, SWALLOWED_SIGTERM, timeout=60)
    assert r.returncode == 143, (r.returncode, r.stderr)
    line = error_line(r.stderr)
    assert "interrupted by SIGTERM while starting" in line, r.stderr
    assert not (wf / "runs.txt").exists(), "a task ran"
    assert not left_behind(wf)


# a SIGTERM while HTA stops the workers, after makeflow has ended
SIGTERM_WHILE_STOPPING = """
import asyncio, os
from hta.backends.pool import WorkerPool

stop_all = WorkerPool.stop_all

async def signalled_then_stop_all(self, now):
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.sleep(0.3)  # the loop's handler takes it
    return await stop_all(self, now)

WorkerPool.stop_all = signalled_then_stop_all
"""


def test_a_sigterm_while_the_workers_stop_does_not_hide_failed_rules(tmp_path: Path):
    # it did: exit 0 and no error (the check for rules failed for good was skipped on any signal)
    wf = workflow(tmp_path, "CATEGORY=x\nCORES=1\n\nout.txt:\n\tsleep 1; exit 3\n")
    r = run_patched(wf, SIGTERM_WHILE_STOPPING, "--max-workers", "1")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "makeflow finished but 1 rule(s) failed" in error_line(r.stderr)
    assert not left_behind(wf)


# a SIGTERM once the run has ended, while its outcome is printed
SIGTERM_WHILE_PRINTING = """
import hta.summary_view

print_summary = hta.summary_view.print_summary

def signalled_then_print(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)
    return print_summary(*args, **kwargs)

hta.summary_view.print_summary = signalled_then_print
"""


def test_a_sigterm_after_the_run_ended_leaves_its_outcome(tmp_path: Path):
    # it ended HTA with 'interrupted' and 143, the summary of a complete run unprinted
    wf = sleepy(tmp_path, n=1, seconds=1)
    r = run_patched(wf, SIGTERM_WHILE_PRINTING)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "HTA run summary" in r.stdout and "complete" in r.stdout
    assert "hta: error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (wf / "s0.txt").read_text() == "0\n"
    assert not left_behind(wf)


def test_makeflow_killed_is_named_by_its_signal(tmp_path: Path):
    wf = sleepy(tmp_path, n=1, seconds=30)
    log = wf / "Makeflow.scaling.jsonl"
    p = subprocess.Popen([*HTA, "makeflow", str(wf / "Makeflow")], cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert wait(lambda: running_tasks(log) >= 1, 60, every=0.3), "no task ran"
        mf = [x for x in cctools_processes(str(wf)) if x.name() == "makeflow"]
        assert mf
        os.kill(mf[0].pid, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 137
    line = error_line(err)
    assert "makeflow failed (killed by SIGKILL)" in line and not says_code(line, -9), line
    assert not left_behind(wf)


def test_a_busy_port_is_said_at_once_and_ctrl_c_ends_the_wait(tmp_path: Path):
    # it waited 60 s in silence, deaf to Ctrl-C, then printed a summary of nothing and exited 1
    import socket

    wf = sleepy(tmp_path, n=1, seconds=1)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = subprocess.Popen([*HTA, "makeflow", "--port", str(port), str(wf / "Makeflow")], cwd=wf,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = p.stderr.readline()
            assert f"port {port} is in use: waiting up to" in first, first
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=10)
        finally:
            p.kill()
    assert p.returncode == 130, (p.returncode, err)
    assert "interrupted by SIGINT" in error_line(err) and not out.strip(), out
    assert not list((wf / "Makeflow.hta").glob("runs/*.jsonl")) and not left_behind(wf)


def test_a_finished_workflow_run_again_says_nothing_is_left_in_one_line(tmp_path: Path):
    # makeflow opens its port, finds nothing to do and leaves: HTA printed its five lines of
    # chatter as warnings, and "step failed ... Cannot connect" twice when it was quick to go
    wf = sleepy(tmp_path, n=2, seconds=0)
    first = run_hta("makeflow", "-q", str(wf / "Makeflow"))
    assert first.returncode == 0, first.stderr
    again = run_hta("makeflow", str(wf / "Makeflow"))
    assert again.returncode == 0
    assert again.stderr.strip() == "hta: makeflow: nothing left to do.", again.stderr
    assert not left_behind(wf)


def test_a_reader_that_leaves_does_not_turn_a_finished_run_into_a_failure(tmp_path: Path):
    # `hta makeflow … | head -1`: rich ended the process with SystemExit(1) on the broken pipe
    wf = sleepy(tmp_path, n=1, seconds=0)
    p = subprocess.Popen([*HTA, "makeflow", "-q", str(wf / "Makeflow")], cwd=wf, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader is gone before the summary is printed
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and (wf / "s0.txt").exists()


def test_a_run_makeflow_refuses_before_its_master_is_one_line_and_leaves_no_log(tmp_path: Path):
    # a missing input: makeflow's one line came after an all-zero summary table, and a
    # scaling log was kept for a run that never ran
    wf = workflow(tmp_path, "out.txt: in.txt\n\tcat in.txt > out.txt\n")
    r = run_hta("makeflow", str(wf / "Makeflow"))
    assert r.returncode == 1 and not r.stdout.strip(), r.stdout
    line = error_line(r.stderr)
    assert "before its master started" in line and "in.txt does not exist" in line, line
    assert not (wf / "Makeflow.hta").exists() and not (wf / "Makeflow.scaling.jsonl").exists()  # (made for it)
    assert not left_behind(wf)
    # an earlier run's folder stays, its logs with it
    earlier = wf / "Makeflow.hta" / "runs" / "run-001.scaling.jsonl"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"kind": "run"}\n')
    assert run_hta("makeflow", str(wf / "Makeflow")).returncode == 1
    assert [p.name for p in earlier.parent.iterdir()] == [earlier.name] and earlier.read_text() == '{"kind": "run"}\n'
    # a --log file an earlier run wrote is where it was, untouched; so is a log from before
    # runs were numbered, though its folder is new (it is moved into it, and kept there)
    shutil.rmtree(wf / "Makeflow.hta")
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"kind": "run"}\n')
    assert run_hta("makeflow", "--log", str(mine), str(wf / "Makeflow")).returncode == 1
    assert mine.read_text() == '{"kind": "run"}\n' and not list(tmp_path.glob("mine.jsonl.*"))
    (wf / "Makeflow.scaling.jsonl").write_text('{"kind": "run"}\n')
    assert run_hta("makeflow", str(wf / "Makeflow")).returncode == 1
    assert (wf / "Makeflow.hta" / "runs" / "run-000.scaling.jsonl").read_text() == '{"kind": "run"}\n'


def test_a_plain_makeflow_started_on_the_workflow_during_a_run_ends_it(tmp_path: Path):
    # makeflow 8.0 takes no lock: a second one on the same workflow wrote the same log and
    # outputs, two were corrupted, and HTA reported "complete", exit 0
    wf = sleepy(tmp_path, n=4, seconds=6)
    p = subprocess.Popen([*HTA, "makeflow", "-q", str(wf / "Makeflow")], cwd=wf, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert wait(lambda: running_tasks(wf / "Makeflow.scaling.jsonl") >= 1, 60, every=0.3)
        plain = subprocess.run(["/usr/bin/makeflow", "-T", "local", "Makeflow"], cwd=wf, capture_output=True,
                               text=True, timeout=120)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert plain.returncode == 0, plain.stderr
    assert p.returncode == 1, err
    assert "another makeflow" in error_line(err) and "takes no lock" in err
    assert not left_behind(wf)


def test_a_run_on_a_workflow_a_plain_makeflow_is_running_is_refused(tmp_path: Path):
    wf = sleepy(tmp_path, n=1, seconds=20)
    plain = subprocess.Popen(["/usr/bin/makeflow", "-T", "local", "Makeflow"], cwd=wf, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait(lambda: (wf / "runs.txt").exists(), 30, every=0.2)  # it runs the rule
        r = run_hta("makeflow", str(wf / "Makeflow"))
    finally:
        os.killpg(plain.pid, signal.SIGKILL)  # (makeflow and the rule it runs)
        plain.wait()
    assert r.returncode == 2 and f"makeflow (pid {plain.pid}) is already running Makeflow" in error_line(r.stderr)
