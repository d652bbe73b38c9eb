"""`hta makeflow --backend slurm` on the local Slurm test cluster (testcluster/slurm): Debian's
slurmctld, slurmd and munge on this machine, one static node and two ``State=CLOUD`` nodes that
Slurm's power saving boots (its ResumeProgram starts their slurmd after a delay) and powers off;
real sbatch, squeue and scancel, real makeflow and workers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import HTA, ROOT, cctools_processes, run_hta, wait

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.xdist_group("slurm")]

RESUME_S = 3.0
SUSPEND_S = 5.0
#: munged must reach its socket's folder: not under pytest's 0700 temporary folders
STATE = Path(f"/tmp/hta-slurm-test-{os.getpid()}")


@pytest.fixture(scope="module")
def slurm():
    if shutil.which("slurmctld") is None:
        pytest.fail("Slurm is not installed: run scripts/setup.sh")
    env = {**os.environ, "HTA_SLURM_DIR": str(STATE)}
    up = subprocess.run([str(ROOT / "testcluster/slurm"), "up", "--static-nodes", "1", "--cloud-nodes", "2",
                         "--node-cores", "2", "--node-memory", "4000", "--resume-delay", str(RESUME_S),
                         "--resume-jitter", "0", "--suspend-time", str(SUSPEND_S), "--max-time", "60"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr[-3000:]
    last = up.stdout.strip().splitlines()[-1]
    assert last.startswith("export SLURM_CONF=")
    conf = last.split("=", 1)[1]
    try:
        yield {"SLURM_CONF": conf}
    finally:
        down = subprocess.run([str(ROOT / "testcluster/slurm"), "down"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert down.returncode == 0, down.stderr
        assert not STATE.exists()


def squeue(env: dict, *args: str) -> list[dict]:
    out = subprocess.run(["squeue", "--me", "--array", "-h", "--states=all", "-o", "%i|%j|%T|%N", *args],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
    return [dict(zip(("id", "name", "state", "node"), ln.split("|"))) for ln in out.splitlines() if ln.strip()]


def worker_of(job: dict) -> str:
    """The worker a job of the run is (an element of a job array too)."""
    from hta.backends.slurm.commands import worker_of as of

    return of(job["id"], job["name"])


def live_jobs(env: dict, prefix: str = "hta-") -> list[dict]:
    return [j for j in squeue(env) if j["name"].startswith(prefix)
            and j["state"] in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")]


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def sleepy(tmp_path: Path, n: int, seconds: int, name: str = "sleepy") -> Path:
    wf = tmp_path / name
    wf.mkdir()
    rules = "".join(f"s{i}.txt:\n\tsleep {seconds}; echo {i} > s{i}.txt\n\n" for i in range(n))
    (wf / "Makeflow").write_text("CATEGORY=sleep\nCORES=1\nMEMORY=50\nDISK=50\n\n" + rules)
    return wf


def slurm_args(*extra: str) -> list[str]:
    return ["makeflow", "--backend", "slurm", "--worker-memory", "1000", "--worker-disk", "2000",
            "--latency-prior", "5", "--min-interval", "1", *extra]


def test_io_workflow_on_slurm_has_exact_outputs_and_leaves_no_job(slurm, tmp_path):
    wf = tmp_path / "io"
    shutil.copytree(ROOT / "workflows" / "io", wf)
    r = run_hta(*slurm_args("--max-workers", "2"), str(wf / "Makeflow"), env=slurm, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    zeros = hashlib.md5(bytes(64 * 2**20)).hexdigest()
    outs = sorted(wf.glob("block*.md5"))
    assert len(outs) == 16 and all(p.read_text() == f"{64 * 2**20} {zeros}\n" for p in outs)
    recs = records(wf / "Makeflow.scaling.jsonl")
    assert recs[0]["backend"] == "slurm" and recs[-1]["exit_code"] == 0
    connected = [x for x in recs if x["kind"] == "worker" and x["event"] == "connected"]
    assert connected and all(x["node"] in ("s1", "c1", "c2") for x in connected), "each job's node is named"
    for x in connected:  # the split adds up to the latency
        ph = x["phases"]
        assert ph["pending"] + ph["resume"] + ph["start"] == pytest.approx(x["latency_s"], abs=0.01), x
    assert live_jobs(slurm) == []
    assert not cctools_processes(str(wf))


def test_cloud_nodes_boot_for_workers_with_the_latency_split_and_power_off(slurm, tmp_path):
    wf = sleepy(tmp_path, 6, 12)
    state = Path(slurm["SLURM_CONF"]).parent
    r = run_hta(*slurm_args("--max-workers", "3", "--worker-cores", "2", "--policy", "hta:worker_shape=node"),
                str(wf / "Makeflow"), env=slurm, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert all((wf / f"s{i}.txt").read_text() == f"{i}\n" for i in range(6))
    connected = [x for x in records(wf / "Makeflow.scaling.jsonl") if x["kind"] == "worker"
                 and x["event"] == "connected"]
    booted = [x for x in connected if x["node"].startswith("c")]
    assert booted, f"no worker on a cloud node: {connected}"
    for x in booted:
        ph = x["phases"]
        # the node's boot, then Slurm's periodic check that the job's nodes are ready (every 30 s)
        assert RESUME_S * 0.8 <= ph["resume"] <= RESUME_S + 40, x
        assert ph["node"] == pytest.approx(ph["pending"] + ph["resume"], abs=0.01), x
        assert ph["pending"] + ph["resume"] + ph["start"] == pytest.approx(x["latency_s"], abs=0.01), x
    assert live_jobs(slurm) == []
    power = (state / "power.log").read_text()
    nodes = {x["node"] for x in booted}
    assert all(f"resume {n}" in power for n in nodes), power
    # idle SUSPEND_S after their workers were cancelled, Slurm powers them off again
    assert wait(lambda: all(f"off {n}" in (state / "power.log").read_text() for n in nodes), SUSPEND_S + 60), \
        (state / "power.log").read_text()


@pytest.mark.parametrize("case", ["partition", "time-limit", "no-sbatch", "controller-down"])
def test_bad_slurm_input_is_one_line_exit_2_and_submits_nothing(slurm, tmp_path, case):
    wf = sleepy(tmp_path, 1, 1)
    env, extra, said = dict(slurm), [], ""
    if case == "partition":
        extra, said = ["--partition", "nosuch"], "invalid partition specified: nosuch"
    elif case == "time-limit":  # the partition allows 60 minutes
        extra, said = ["--time-limit", "2:00:00"], "time limit"
    elif case == "no-sbatch":
        bindir = tmp_path / "bin"
        bindir.mkdir()
        for tool in ("makeflow", "makeflow_viz", "work_queue_worker", "python3"):
            if shutil.which(tool):
                (bindir / tool).symlink_to(shutil.which(tool))
        env["PATH"] = f"{bindir}:{ROOT / '.venv' / 'bin'}"
        said = "sbatch not found"
    else:
        conf = tmp_path / "dead.conf"
        text = Path(slurm["SLURM_CONF"]).read_text()
        conf.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=1", text).replace("MessageTimeout=10",
                                                                                          "MessageTimeout=2"))
        env["SLURM_CONF"], said = str(conf), "Unable to contact slurm controller"
    before = {j["id"] for j in squeue(slurm)}
    r = run_hta(*slurm_args(*extra), str(wf / "Makeflow"), env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hta: error: ") and said in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert {j["id"] for j in squeue(slurm)} == before, "nothing submitted"
    assert not (wf / "Makeflow.makeflowlog").exists(), "makeflow never started"


@pytest.mark.parametrize("policy, shape, said", [
    ("hta:worker_shape=node", "64 cores, 1000 MB (--worker-cores 64 --worker-memory 1000)",
     "More processors requested than permitted"),
    # HTA's learned shape cuts it for the tasks (1 core, 50 MB each) into workers still larger than a
    # node: the line says so, in the options' words
    ("hta", "3 cores, 50 MB (1/20 of --worker-cores 64 --worker-memory 1000, rounded down to whole cores: the policy "
            "cut that shape in 20 for the tasks that wait)", "CPU count per node can not be satisfied"),
])
def test_a_worker_no_node_can_hold_ends_the_run_in_one_line_naming_sbatchs_error(slurm, tmp_path, policy, shape,
                                                                                 said):
    wf = sleepy(tmp_path, 1, 1)
    r = run_hta(*slurm_args("--worker-cores", "64", "--policy", policy), str(wf / "Makeflow"), env=slurm, timeout=120)
    assert r.returncode == 1, r.stderr
    error = [ln for ln in r.stderr.splitlines() if ln.startswith("hta: error:")]
    # (Slurm 22.05's words for more cores than any node of the partition has)
    assert error and f"sbatch refused a worker job of {shape}: {said}; lower --worker-cores" in error[0], r.stderr
    assert live_jobs(slurm) == []


def test_killed_hta_runs_again_adopting_its_jobs_and_duplicating_none(slurm, tmp_path):
    wf = sleepy(tmp_path, 4, 10)
    args = [*HTA, *slurm_args("--max-workers", "2", "--worker-cores", "1", "--policy", "hta:worker_shape=node"),
            str(wf / "Makeflow")]
    env = {**os.environ, **slurm}
    p = subprocess.Popen(args, cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log = wf / "Makeflow.scaling.jsonl"
    assert wait(lambda: log.exists() and log.read_text().count('"connected"') >= 2, 120), "no workers connected"
    jobs = live_jobs(slurm)
    before = sorted(j["id"] for j in jobs)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert len(before) == 2 and sorted(j["id"] for j in live_jobs(slurm)) == before  # jobs outlive HTA
    r = subprocess.run(args, cwd=wf, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = records(log)
    asked = {x["worker"] for x in recs if x["kind"] == "worker" and x["event"] == "requested"}
    assert {worker_of(j) for j in jobs} <= asked, "the killed run's jobs are adopted"
    live = peak = 0  # jobs asked for or adopted and not ended yet, at once
    for x in recs:
        if x["kind"] == "worker":
            live += {"requested": 1, "drained": -1, "lost": -1, "failed": -1, "removed": -1, "stopped": -1}.get(
                x["event"], 0)
            peak = max(peak, live)
    assert peak <= 2, "no duplicates: never more than --max-workers jobs"
    assert all((wf / f"s{i}.txt").read_text() == f"{i}\n" for i in range(4))
    assert live_jobs(slurm) == []


def test_sigterm_ends_the_run_and_cancels_every_job(slurm, tmp_path):
    sig = signal.SIGTERM  # (SIGINT takes the same path: tests/test_makeflow_e2e.py covers both)
    wf = sleepy(tmp_path, 4, 30)
    p = subprocess.Popen([*HTA, *slurm_args("--max-workers", "2"), str(wf / "Makeflow")], cwd=wf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **slurm})
    log = wf / "Makeflow.scaling.jsonl"
    assert wait(lambda: log.exists() and '"requested"' in log.read_text(), 60), "no job submitted"
    assert wait(lambda: live_jobs(slurm), 10)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err and "Traceback" not in err
    assert live_jobs(slurm) == [], "every job of the run cancelled before HTA exits"
    assert not cctools_processes(str(wf))


def test_a_preempted_worker_is_lost_and_its_tasks_run_again(slurm, tmp_path):
    # (tasks long enough that the preemption lands while one runs, on a loaded machine too)
    wf = sleepy(tmp_path, 2, 20)
    env = {**os.environ, **slurm}
    p = subprocess.Popen([*HTA, *slurm_args("--max-workers", "1", "--worker-cores", "2", "--policy",
                                            "hta:worker_shape=node"), str(wf / "Makeflow")],
                         cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log = wf / "Makeflow.scaling.jsonl"

    def busy() -> bool:
        obs = [x for x in records(log) if x["kind"] == "observation"] if log.exists() else []
        return bool(obs) and obs[-1]["running"] >= 1

    assert wait(busy, 120), "no task ran"
    node = next(j["node"] for j in live_jobs(slurm) if j["state"] == "RUNNING")
    # a job of the higher priority tier that needs the whole node: Slurm cancels the worker's job
    urgent = subprocess.run(["sbatch", "--parsable", "-p", "urgent", "--exclusive", "-w", node, "-J", "urgent",
                             "-o", "/dev/null", "--wrap", "sleep 1"], env=env, capture_output=True, text=True)
    assert urgent.returncode == 0, urgent.stderr
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    lost = [x for x in records(log) if x["kind"] == "worker" and x["event"] == "lost"]
    assert lost and "preempted" in lost[0]["reason"] and lost[0]["tasks_lost"] >= 1, lost
    end = records(log)[-1]
    assert end["tasks_retried"] >= 1
    assert all((wf / f"s{i}.txt").read_text() == f"{i}\n" for i in range(2))
    assert live_jobs(slurm) == []


def submissions() -> int:
    """sbatch calls slurmctld took, from its own log (each is one ``_slurm_rpc_submit_batch_job``)."""
    log = STATE / "logs" / "slurmctld.log"
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if line.startswith("[") and "_slurm_rpc_submit_batch_job" in line)


async def test_a_hundred_workers_asked_at_once_are_one_job_array_whose_elements_are_workers(slurm, tmp_path,
                                                                                              monkeypatch):
    from hta.backends.provider import JobState
    from hta.backends.slurm.backend import SlurmProvider
    from hta.model import Resources

    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    make = lambda: SlurmProvider(run_id="array0test", run_dir=tmp_path, master_host="127.0.0.1", idle_timeout_s=30)
    provider = make()
    provider.check()
    await provider.start("127.0.0.1", 9)  # (no master: the workers only wait to connect)
    before = submissions()
    try:
        handles = await provider.launch(Resources(cores=1, memory_mb=100, disk_mb=100), 100)
        assert len(handles) == 100 and submissions() - before <= 2
        seen = await provider.poll(None)
        assert set(handles) <= set(seen) and all(seen[h].state is not JobState.ENDED for h in handles)
        assert provider.limits.ceiling is not None and provider.limits.ceiling.seconds == 3600  # MaxTime=60
        # one element scaled down alone; a restarted HTA adopts the other 99, duplicating none
        assert await provider.cancel([handles[7]]) == {}
        again = make()
        await again.start("127.0.0.1", 9)
        adopted = set(await again.poll(None))
        assert handles[7] not in adopted and set(handles) - {handles[7]} <= adopted
        await again.launch(Resources(cores=1, memory_mb=100, disk_mb=100), 1)
        assert again._seq == 101  # numbered after the adopted ones
    finally:
        await make().stop_all()
    assert not live_jobs(slurm, "hta-array0test-")
