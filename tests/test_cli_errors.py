"""Bad input to the small commands ends in one line `hta: error: …` naming the fix, a
non-zero exit code and no traceback."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import HTA, ROOT, run_hta, wait

from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel, unrunnable
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload, load_workload


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """A real scaling log of a small simulated run."""
    path = tmp_path / "run.jsonl"
    tasks = [SimTask(f"t{i}", "a", 10 + i) for i in range(30)]
    Simulation(Workload("w", tasks), make_policy("hta"), ClusterModel(max_nodes=3, latency_mean_s=5, teardown_s=0),
               log=ScalingLogWriter(path)).run()
    return path


def one_error_line(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("hta: error: ") and all(n in line for n in needles), line


def test_version():
    r = run_hta("--version")
    assert r.returncode == 0 and r.stdout.startswith("hta ") and r.stdout.split()[1][0].isdigit()


def test_report_on_a_directory(tmp_path: Path):
    r = run_hta("report", str(tmp_path))
    assert r.returncode == 1
    one_error_line(r, "is a directory", "scaling log file")


def test_report_with_a_plot_folder_that_cannot_be_made(log: Path):
    r = run_hta("report", str(log), "--plot", "/proc/no-such-folder/figs")
    assert r.returncode == 2
    one_error_line(r, "cannot write figures", "--plot")


def test_report_into_a_closed_pipe_ends_quietly(log: Path):
    logs = [str(log)] * 400  # more than a pipe holds, so the reader leaves before the end
    p = subprocess.run(f"{' '.join(HTA)} report --format json {' '.join(logs)} | head -c 5", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert p.stdout == '{\n "r' and "Traceback" not in p.stderr and "Error" not in p.stderr, p.stderr


@pytest.mark.parametrize("args, needles", [
    (["--node-cores", "abc"], ["--node-cores must be a number of cores, not 'abc'"]),
    (["--node-cores", "0.5"], ["--node-cores must be at least 1, not 0.5"]),  # not "1s": cores are no seconds
    (["--node-memory", "0"], ["--node-memory must be at least 1 MB, not 0"]),
    (["--latency-mean", "-1"], ["--latency-mean must be at least 0s, not -1"]),
    (["--node-memory", "inf"], ["--node-memory must be a finite number of MB, not 'inf'"]),
    (["--latency-mean", "nan"], ["--latency-mean must be a finite number of seconds, not 'nan'"]),
])
def test_simulate_names_the_unit_of_a_bad_number(args, needles):
    r = run_hta("simulate", "--workload", "io-bound", *args)
    assert r.returncode == 2
    one_error_line(r, *needles)


def test_simulate_refuses_nodes_too_small_for_the_workloads_largest_task():
    # it used to simulate up to its 48 h horizon (1 min 43 s here) and print "5 unfinished"
    r = run_hta("simulate", "--workload", "blast-3stage", "--node-memory", "100", "--policies", "hta")
    assert r.returncode == 2
    one_error_line(r, "task align_1_0 (align) uses 1,024 MB", "(100 MB)", "give --node-memory 1024 or more")
    wl = load_workload("blast-3stage", 0)
    assert unrunnable(wl, ClusterModel(node_memory_mb=1024)) is None  # the fix it names is enough
    assert unrunnable(wl, ClusterModel(node_memory_mb=1023)) is not None
    big = Workload("d", [SimTask("a", "a", 10, cores=1), SimTask("b", "b", 10, cores=4)], declared=True)
    assert "task b (b) declares 4 cores" in unrunnable(big, ClusterModel(node_cores=3.5))  # advertises 3
    assert unrunnable(big, ClusterModel(node_cores=4)) is None
    assert unrunnable(dataclasses.replace(big, declared=False), ClusterModel(node_cores=3)) is None  # throttled, runs


@pytest.mark.parametrize("spec, needle", [
    ("hpa-0", "policy 'hpa-0' needs a number above 0, e.g. hpa-20"),  # (it divided by zero)
    ("hpa-nan", "policy 'hpa-nan' needs a number above 0"),
    ("keda-0", "policy 'keda-0' needs a number above 0"),
    ("hpa-20:min_replicas=-1", "min_replicas must be at least 1, not -1"),  # (it ran)
    ("hpa-20:target_percent=0", "target_percent must be a number above 0, not 0"),
    ("keda-3:tasks_per_pod=-1", "tasks_per_pod must be a number above 0, not -1"),
    ("keda-3:cooldown_s=-5", "cooldown_s must be a number of seconds, 0 or more, not -5"),
    ("keda-3:polling_interval_s=inf", "polling_interval_s must be a number of seconds, 0 or more, not inf"),
])
def test_simulate_refuses_an_hpa_or_keda_setting_kubernetes_would(spec, needle):
    r = run_hta("simulate", "--workload", "io-bound", "--seeds", "1", "--policies", spec)
    assert r.returncode == 2
    one_error_line(r, needle)


@pytest.mark.parametrize("spec", ["hta@nan", "hta@inf", "factory@inf"])
def test_a_time_scale_that_is_not_a_finite_positive_number_is_refused(spec):
    # (nan and inf were taken, `scale <= 0` being false for nan: the controller then waited nan
    # seconds between decisions, and never decided again)
    from hta.policies.time_scale import TimeScaled

    r = run_hta("config", "--policy", spec)
    assert r.returncode == 2
    one_error_line(r, f"policy {spec!r}: the time scale after @ must be a finite positive number, e.g. hta@10")
    with pytest.raises(ValueError, match="time scale must be a finite positive number"):
        TimeScaled(make_policy("hta"), float(spec.partition("@")[2]))


@pytest.mark.parametrize("spec, needle", [
    # float() reads nan and inf, which were set as they came: a nan idle timeout kept every worker
    # (a policy's validate() names the range; without one, any nan or inf is refused)
    ("factory:idle_timeout_s=nan", "idle_timeout_s must be a number of seconds, 0 or more, not nan"),
    ("observe:every_s=nan", "every_s='nan' is not a finite number: give a number, e.g. every_s=5"),
    ("max-then-drain:check_s=inf", "check_s='inf' is not a finite number"),
    # counts below their floor were taken (drain_after 0 or less drained as 1 does)
    ("hta:drain_after=-3", "drain_after must be a whole number ≥ 1"),
    ("hta:drain_after=0", "drain_after must be a whole number ≥ 1"),
    ("factory:tasks_per_worker=-1", "tasks_per_worker must be a number ≥ 1, not -1 (leave it out for the worker's cores)"),
    ("factory:workers_per_cycle=-2", "workers_per_cycle must be a whole number ≥ 0 (0: no limit), not -2"),
    ("factory:idle_timeout_s=-60", "idle_timeout_s must be a number of seconds, 0 or more, not -60"),
])
def test_a_policy_setting_that_means_nothing_is_refused(spec, needle):
    r = run_hta("config", "--policy", spec)
    assert r.returncode == 2
    one_error_line(r, f"policy {spec!r}: {needle}")


def test_policy_settings_at_their_floor_are_taken():
    assert make_policy("hta:drain_after=1").drain_after == 1
    f = make_policy("factory:tasks_per_worker=1,workers_per_cycle=0,idle_timeout_s=0,worker_wakeup_s=0")
    assert (f.tasks_per_worker, f.workers_per_cycle, f.idle_timeout_s) == (1.0, 0, 0.0)


def test_css_on_a_process_that_does_not_exist():
    r = run_hta("css", "--pid", "999999999", "--duration", "1")
    assert r.returncode == 2
    one_error_line(r, "no process 999999999")


def test_makeflow_with_an_unwritable_record_file_is_refused_before_it_starts(tmp_path: Path):
    wf = tmp_path / "Makeflow"
    wf.write_text("a.txt:\n\techo hi > a.txt\n")
    r = run_hta("makeflow", "--record", "/proc/no-such-folder/tape.jsonl", str(wf))
    assert r.returncode == 2
    one_error_line(r, "cannot write the record file", "--record")
    assert not (tmp_path / "Makeflow.makeflowlog").exists()  # makeflow never started


@pytest.mark.slow  # a real work_queue_worker that tries its master for seconds
def test_worker_with_a_master_host_that_does_not_resolve():
    r = run_hta("worker", "--master", "no-such-host.invalid:1", "--no-css", timeout=60)
    assert r.returncode == 2
    one_error_line(r, "cannot resolve the master's host", "--master")


@pytest.mark.slow  # a real work_queue_worker that tries its master for seconds
def test_worker_that_never_reaches_its_master_fails():
    r = run_hta("worker", "--master", "127.0.0.1:1", "--connect-timeout", "2", "--no-css", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("hta: error: the worker could not reach its master (127.0.0.1:1)"), last


def test_help_imports_nothing_heavy():
    """`hta --help` must start fast: Kubernetes, matplotlib, simpy, aiohttp and pydantic are
    imported only by the commands that use them."""
    import sys as _sys

    code = ("import sys, hta.cli; hta.cli.build_parser().format_help(); "
            "print(sorted(m for m in ('kubernetes', 'matplotlib', 'simpy', 'aiohttp', 'pydantic', 'rich') "
            "if m in sys.modules))")
    r = subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_policy_specs_with_several_settings_survive_the_comma_split():
    from hta.cli import split_policies

    assert split_policies("hta,factory:tasks_per_worker=2,idle_timeout_s=60,hpa-20") == [
        "hta", "factory:tasks_per_worker=2,idle_timeout_s=60", "hpa-20"]
    assert split_policies("keda-job:tasks_per_job=3,max_replicas=20,m.mod:make:a=1,b=2") == [
        "keda-job:tasks_per_job=3,max_replicas=20", "m.mod:make:a=1,b=2"]


def test_simulate_into_a_folder_that_cannot_be_made(tmp_path: Path):
    (tmp_path / "file").write_text("")
    r = run_hta("simulate", "--workload", "io-bound", "--seeds", "1", "--policies", "hta",
                "--out", str(tmp_path / "file" / "logs"))
    assert r.returncode == 2
    one_error_line(r, "cannot write the scaling logs", "choose another --out")


@pytest.mark.parametrize("text, said", [
    ('[1]', "not a WfFormat instance: no 'workflow' object"),  # (a list: AttributeError, a traceback)
    ('{"workflow": {"tasks": 7}}', "not a WfFormat instance (TypeError: 'int' object is not iterable)"),
    ('{"workflow": {"specification": {"tasks": [{"x": 1}]}}}', "not a WfFormat instance (KeyError: 'id')"),
    ('{"workflow": {"tasks": [{"id": "a", "runtime": 1, "coreCount": 1e999}]}}',
     "task 'a': coreCount must be a number of cores ≥ 1, not Infinity"),  # (an OverflowError's words)
])
def test_simulate_on_json_that_is_not_wfformat_names_the_file_in_one_line(tmp_path: Path, capsys, text, said):
    from hta.cli import main

    wf = tmp_path / "other.json"
    wf.write_text(text)
    assert main(["simulate", "--workflow", str(wf), "--seeds", "1", "--policies", "hta"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"hta: error: {wf}: {said}"), line


def test_simulate_on_a_workflow_file_it_cannot_read_names_the_file(tmp_path: Path, monkeypatch, capsys):
    # (unreadable, it said "cannot write the scaling logs in None (Permission denied): choose another
    # --out"; not UTF-8, the codec's words without the file)
    from hta.cli import main

    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "café"}'.encode("latin-1"))
    assert main(["simulate", "--workflow", str(latin1), "--seeds", "1", "--policies", "hta"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"hta: error: {latin1}: not JSON (byte 0xe9 at offset 13 is not UTF-8 text): "
                    f"give a WfCommons JSON instance"), line

    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    read_text = Path.read_text

    def denied(self: Path, *args, **kwargs) -> str:  # (the tests run as root, whom chmod 000 does not stop)
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    assert main(["simulate", "--workflow", str(locked), "--seeds", "1", "--policies", "hta"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"hta: error: cannot read workflow file {str(locked)!r} (Permission denied): make it "
                    f"readable or give another WfCommons JSON instance"), line


def test_simulate_refuses_a_policy_named_twice():
    # its runs were merged into one row, as if they were more seeds
    r = run_hta("simulate", "--workload", "io-bound", "--seeds", "1", "--policies", "hta,factory,hta")
    assert r.returncode == 2
    one_error_line(r, "policy 'hta' is named 2 times (hta, hta): name each policy once")
    r = run_hta("simulate", "--workload", "io-bound", "--seeds", "1", "--policies", "keda-3,keda-3.0")
    assert r.returncode == 2  # two spellings of one policy
    one_error_line(r, "policy 'keda-3' is named 2 times (keda-3, keda-3.0)")


@pytest.mark.slow  # three simulated BLAST runs
def test_ctrl_c_in_simulate_says_so_and_leaves_no_half_written_log(tmp_path: Path):
    import json
    import signal

    out = tmp_path / "logs"
    # (SIGINT back to its default: a test run started in the background inherits it ignored,
    # and Python then keeps ignoring it, as a shell's background job should)
    p = subprocess.Popen([*HTA, "simulate", "--workload", "blast-3stage", "--policies", "hta,factory", "--seeds", "5",
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert wait(lambda: len(list(out.glob("*.jsonl"))) >= 2, 120, every=0.05)  # one run done, the next begun
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130
    assert err.strip() == "hta: error: interrupted by SIGINT", err
    logs = list(out.glob("*.jsonl"))
    assert logs, "the finished run's log went too"
    for log in logs:  # each log left is a whole run's
        assert json.loads(log.read_text().splitlines()[-1])["kind"] == "end", log


def test_report_refuses_a_bad_plot_folder_before_printing_anything(log: Path, tmp_path: Path):
    # it printed the whole report, then the error
    a_file = tmp_path / "hta.yaml"
    a_file.write_text("x: 1\n")
    r = run_hta("report", str(log), "--plot", str(a_file))
    assert r.returncode == 2 and not r.stdout
    one_error_line(r, "is a file: give a folder for the figures")  # (it said: File exists)
    r = run_hta("report", str(log), "--plot", "/proc/nope")
    assert r.returncode == 2 and not r.stdout
    one_error_line(r, "cannot write figures to '/proc/nope'")


def test_report_on_a_workflow_never_run_says_so(tmp_path: Path):
    wf = tmp_path / "Makeflow"
    wf.write_text("a:\n\ttouch a\n")
    r = run_hta("report", str(wf))
    assert r.returncode == 1
    # (it said: not JSON; is this an HTA scaling log?) — and a run logged with --log FILE left no
    # Makeflow.scaling.jsonl, so "run hta makeflow first" alone misled its user
    one_error_line(r, "no HTA run of it as a workflow (Makeflow.scaling.jsonl is not there; "
                      "a run with --log FILE writes FILE only)", f"run hta makeflow {wf} first")


def test_the_demo_in_a_fresh_clone_runs_hta_and_passes_on_its_exit_code(tmp_path: Path):
    # a fresh clone has no workflows/blast/Makeflow.hta/ (it is ignored by git): the demo
    # counted its runs with an `ls` that failed there and, under pipefail, ended silently
    # with exit 2 before hta ran. A bad option shows hta ran: its own one-line error.
    # scripts/setup.sh is replaced by a fake that does nothing (the real one would point the
    # shared venv's work_queue link at this copy); the venv is the project's own
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "demo.sh", root / "scripts" / "demo.sh")
    (root / "scripts" / "setup.sh").write_text("#!/bin/sh\n# fake setup: the test's venv is the project's\n")
    (root / "scripts" / "setup.sh").chmod(0o755)
    (root / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(ROOT / "workflows" / "blast", root / "workflows" / "blast",
                    ignore=shutil.ignore_patterns("Makeflow.hta", "*.makeflowlog", "__pycache__"))
    r = subprocess.run(["bash", str(root / "scripts" / "demo.sh"), "--nope"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert "hta makeflow has no option --nope" in r.stderr
    assert "scaling report" not in r.stdout.lower() and not (root / "report").exists()


def test_ctrl_c_while_a_simulation_is_being_built_leaves_no_empty_log(tmp_path: Path, monkeypatch):
    """The log's file exists once its writer opens it, before the simulated world is built
    (a 400-task one takes a while): a Ctrl-C then left an empty log behind, which `hta
    report` would read as a run (a fresh-clone CI run caught it once)."""
    import hta.sim.compare as compare_mod
    from hta.sim.cluster import ClusterModel

    class Interrupted:
        def __init__(self, *args, **kwargs):
            raise KeyboardInterrupt

    out = tmp_path / "logs"
    monkeypatch.setattr(compare_mod, "Simulation", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        compare_mod.compare("io-bound", ["hta"], 1, ClusterModel(max_nodes=2), out=out)
    assert not list(out.glob("*.jsonl"))


def test_makeflow_help_lists_every_built_in_policy_one_line_each():
    import os
    import subprocess

    from conftest import HTA

    from hta.cli import POLICY_LINES

    out = subprocess.run([*HTA, "makeflow", "--help"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "80"}).stdout
    listed = out.split("policies (--policy):", 1)[1].splitlines()
    for name, what in POLICY_LINES:
        assert any(line.split() and line.split()[0] == name and what in line for line in listed), name
    assert all(len(line) <= 80 for line in listed)
    from hta.policies import make_policy

    for name, _ in POLICY_LINES:  # each one listed is one HTA makes
        make_policy(name.replace("[-N]", "").replace("-N", "-2"))


def test_a_workflow_makeflow_cannot_read_ahead_says_what_is_lost_and_what_to_do():
    from hta.submit.run import lookahead_lost

    line = lookahead_lost("makeflow_viz could not read Makeflow: Variable hostname has not yet been defined at line  2.")
    assert "makeflow_viz" not in line and "not for the stages to come" in line
    assert "write it `hostname` (backquotes)" in line and "at line 2" in line
    assert "backquotes" not in lookahead_lost("cannot run the workflow reader: no such file")


def test_a_file_makeflow_misses_when_run_from_another_folder_gets_a_hint(tmp_path):
    from hta.submit.run import run_from_elsewhere

    (tmp_path / "wf").mkdir()
    (tmp_path / "wf" / "in.txt").write_text("x")
    said = "error: in.txt does not exist, and is not created by any rule."
    hint = run_from_elsewhere(said, tmp_path / "wf" / "Makeflow", tmp_path)
    assert "where in.txt is" in hint and "cd wf && hta makeflow Makeflow" in hint
    assert run_from_elsewhere(said, tmp_path / "wf" / "Makeflow", tmp_path / "wf") == ""  # run where it is
    assert "(wf)" in run_from_elsewhere("error: db.fa does not exist", tmp_path / "wf" / "Makeflow", tmp_path)
