"""The Slurm backend's parsing and command lines, without a cluster: squeue and sbatch output as
Slurm 22.05 prints it (captured from the test cluster), the job's latency phases, the options."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from hta.backends import BackendOptions
from hta.backends.provider import run_id_for
from hta.backends.slurm.backend import Job, SlurmProvider, permanent, port_for
from hta.backends.slurm.commands import (
    SlurmError,
    batch_script,
    error_line,
    hint,
    parse_sbatch,
    parse_squeue,
    sbatch_argv,
    slurm_time,
)

# squeue --me --noheader --states=all --format='%i|%j|%T|%r|%N|%V|%S|%l|%e|%k' on the test cluster
SQUEUE = "".join(line + "\n" for line in (
    "7|hta-06b4c-1|RUNNING|None|s1|2026-11-28T18:59:10|2026-11-28T18:59:11|3:00|2026-11-28T19:02:11|"
    "hta.run=06b4c worker=127.0.0.1:52206",
    "8|hta-06b4c-2|CONFIGURING|None|c1|2026-11-28T18:59:10|2026-11-28T18:59:12|UNLIMITED|Unknown|"
    "hta.run=06b4c",
    "9|hta-06b4c-3|PENDING|PartitionTimeLimit||2026-11-28T18:59:10|N/A|2-00:00:00|N/A|hta.run=06b4c",
    "10|hta-06b4c-4|TIMEOUT|TimeLimit|s2|2026-11-28T18:59:10|2026-11-28T18:59:11|1:00|2026-11-28T19:00:11|"
    "hta.run=06b4c worker=127.0.0.1:52210",
    "11|wrap|COMPLETED|None|s1|2026-11-28T18:52:29|2026-11-28T18:52:31|UNLIMITED|2026-11-28T18:52:33|(null)",
    "garbage line",
))


def test_squeue_lines_become_jobs_with_their_state_times_and_worker():
    jobs = {j.job_id: j for j in parse_squeue(SQUEUE)}
    assert set(jobs) == {"7", "8", "9", "10", "11"}
    run, boot, never, timeout, other = (jobs[i] for i in ("7", "8", "9", "10", "11"))
    assert run.running and not run.waiting and run.worker_address == "127.0.0.1:52206" and run.nodes == "s1"
    assert boot.waiting and boot.worker_address is None and boot.start_at == slurm_time("2026-11-28T18:59:12")
    assert never.waiting and never.start_at is None and never.nodes == "" and never.never_starts() == "PartitionTimeLimit"
    assert boot.never_starts() is None and run.never_starts() is None
    assert timeout.finished and timeout.time_limit == "1:00"
    assert other.comment == "" and other.finished
    assert run.submitted_at is not None and run.start_at is not None and run.start_at - run.submitted_at == 1.0
    assert run.end_at - run.start_at == 180.0 and boot.end_at is None and never.end_at is None


def test_sbatch_job_id_and_error_lines():
    assert parse_sbatch("42\n") == "42" and parse_sbatch("42;cluster\n") == "42"
    with pytest.raises(SlurmError):
        parse_sbatch("")
    # sbatch --test-only and a real submission say the same failure in two ways
    assert error_line("sbatch: error: invalid partition specified: nosuch\n"
                      "allocation failure: Invalid partition name specified\n") == "invalid partition specified: nosuch"
    assert error_line("allocation failure: Unable to contact slurm controller (connect failure)\n") == \
        "Unable to contact slurm controller (connect failure)"
    assert error_line("sbatch: error: Batch job submission failed: Requested node configuration is not available") \
        == "Requested node configuration is not available"
    assert "start slurmctld" in hint("Unable to contact slurm controller (connect failure)")
    assert "--partition" in hint("invalid partition specified: nosuch")
    assert "--worker-cores" in hint("Requested node configuration is not available")
    assert permanent("Requested node configuration is not available") and permanent("Invalid partition name specified")
    assert not permanent("Unable to contact slurm controller (connect failure)")  # may come back: asked again
    # a job a little larger than a node (3 cores on 2-core nodes): sbatch's first line says why, and no job
    # of that shape will ever be taken
    cpus = error_line("sbatch: error: CPU count per node can not be satisfied\n"
                      "sbatch: error: Batch job submission failed: Requested node configuration is not available\n")
    assert cpus == "CPU count per node can not be satisfied" and permanent(cpus) and "--worker-cores" in hint(cpus)


def test_sbatch_command_line_carries_every_option_and_never_requeues(tmp_path: Path):
    argv = sbatch_argv(name="hta-x-1", comment="hta.run=x", cores=3, memory_mb=2048, output=tmp_path / "o.log",
                       partition="p", account="a", qos="q", time_limit="30", extra=["--constraint=fast"])
    assert argv[:2] == ["sbatch", "--parsable"]
    for want in ("--job-name=hta-x-1", "--comment=hta.run=x", "--cpus-per-task=3", "--mem=2048M", "--no-requeue",
                 "--partition=p", "--account=a", "--qos=q", "--time=30", "--constraint=fast", "--nodes=1"):
        assert want in argv
    assert "--partition" not in " ".join(sbatch_argv(name="n", comment="c", cores=1, memory_mb=1, output=tmp_path))
    script = batch_script("/venv/bin/python", 9300, "hta.run=x", ["/venv/bin/hta", "worker", "--master=h:9300"])
    assert script.startswith("#!/bin/sh\n")
    exec_line = script.splitlines()[-1]
    assert shlex.split(exec_line) == ["exec", "/venv/bin/python", "-m", "hta.backends.slurm.job", "--port=9300",
                                      "--comment=hta.run=x", "--", "/venv/bin/hta", "worker", "--master=h:9300"]


def test_run_id_and_port_are_stable_per_workflow_and_differ_between_workflows(tmp_path: Path):
    a, b = tmp_path / "a" / "Makeflow", tmp_path / "b" / "Makeflow"
    assert run_id_for(a) == run_id_for(a) != run_id_for(b)
    assert 9200 <= port_for(run_id_for(a)) < 9900


def test_latency_phases_add_up_and_stay_in_order():
    b = SlurmProvider(run_id="r", run_dir=Path("/nonexistent"))
    # asked at 1001, given a cloud node at 1003, the node booted and the script began at 1020
    b._jobs["hta-r-1"] = Job("hta-r-1", "5", 1001.0, allocated_at=1003.0, began_at=1020.0)
    ph = b.phases("hta-r-1", 1001.0, 1024.5)
    assert ph == {"pending": 2.0, "resume": 17.0, "start": 4.5, "node": 19.0}
    assert ph["pending"] + ph["resume"] + ph["start"] == pytest.approx(24.5 - 1.0)
    # Slurm's whole seconds may read before the request: clamped, never negative
    b._jobs["hta-r-2"] = Job("hta-r-2", "6", 1001.4, allocated_at=1001.0, began_at=1001.0)
    assert b.phases("hta-r-2", 1001.4, 1003.0) == {"pending": 0.0, "resume": 0.0, "start": 1.6, "node": 0.0}


def test_slurm_options_are_validated_where_they_come_in():
    o = BackendOptions(partition="p", time_limit=" 1-12 ", sbatch_args="--constraint='a b' --exclusive")
    assert o.time_limit == "1-12" and o.sbatch_args == ["--constraint=a b", "--exclusive"]
    for ok in ("30", "2:00:00", "1-12", "1-12:30:00", "UNLIMITED"):
        assert BackendOptions(time_limit=ok).time_limit == ok
    for bad in ("3h", "soon", "1:2:3:4"):
        with pytest.raises(ValueError, match="not a Slurm time limit"):
            BackendOptions(time_limit=bad)
    with pytest.raises(ValueError, match="not shell words"):
        BackendOptions(sbatch_args="'unclosed")


@pytest.mark.parametrize("policy, asked, shape", [
    # HTA's default cuts the shape for never-measured tasks that declare nothing: a third of it,
    # 21.3 cores and 341.3 MB, asked as the whole cores and MB its worker advertises
    ("hta", "21 cores, 341 MB", "1/3 of --worker-cores 64 --worker-memory 1024, rounded down to whole cores and MB: "
                                "the policy cut that shape in 3 for the tasks that wait"),
    ("hta:worker_shape=node", "64 cores, 1024 MB", "--worker-cores 64 --worker-memory 1024"),
])
async def test_a_refused_worker_job_names_the_shape_the_user_gave_and_the_cut_hta_made(tmp_path, monkeypatch, policy,
                                                                                       asked, shape):
    from hta.backends.pool import WorkerPool
    from hta.controller import Controller, ControllerConfig
    from hta.model import Resources
    from hta.policies.registry import make_policy
    from hta.scaling_log import ScalingLogWriter
    from hta.sim.cluster import ClusterModel
    from hta.sim.master import SimMaster, SimMonitor
    from hta.sim.workload import SimTask, Workload
    from hta.sim.world import World
    from resource_monitor.categories import CategoryLearner

    refused = "More processors requested than permitted"  # (Slurm 22.05, a node of fewer cores)
    asks: list[list[str]] = []

    async def slurm(argv: list[str], **_) -> str:  # squeue lists nothing; sbatch refuses
        if argv[0] != "sbatch":
            return ""
        asks.append(argv)
        raise SlurmError(refused)

    monkeypatch.setattr("hta.backends.slurm.backend.arun", slurm)
    world = World(Workload("w", [SimTask(f"t{i}", "a", runtime_s=60) for i in range(6)]),
                  ClusterModel(start_nodes=0), seed=0)
    pool = WorkerPool(SlurmProvider(run_id="r", run_dir=tmp_path), epoch=0.0)
    c = Controller(master=SimMaster(world), backend=pool, policy=make_policy(policy), learner=CategoryLearner(),
                   summaries=SimMonitor(world), scaling_log=ScalingLogWriter(), epoch=0.0,
                   config=ControllerConfig(worker_shape=Resources(cores=64, memory_mb=1024, disk_mb=4096),
                                           max_workers=4),
                   clock=lambda: world.env.now)
    world.start()
    await c.step()
    cores, memory = asked.split(" cores, ")
    assert asks and f"--cpus-per-task={cores}" in asks[0] and f"--mem={memory.removesuffix(' MB')}M" in asks[0]
    assert pool.fatal == (f"sbatch refused a worker job of {asked} ({shape}): {refused}; "
                          f"lower --worker-cores/--worker-memory to what a node of the partition has "
                          f"(sinfo -o '%P %c %m')")
