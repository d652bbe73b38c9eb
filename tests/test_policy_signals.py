"""Production gives each policy what the simulator gives it, or refuses to run it.

HPA reads the workers' measured CPU utilisation: on the local backend it is measured
from each worker's process tree (here with real stress-ng tasks), and HPA scales up from
it; where a backend cannot measure it, ``--policy hpa-*`` is refused with one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_hta

from hta.policies.base import check_signals
from hta.policies.registry import make_policy
from hta.sim.cluster import ClusterModel
from hta.sim.workload import SimTask, Workload
from hta.sim.world import World


def test_a_policy_is_refused_where_its_signal_cannot_be_measured():
    hpa = make_policy("hpa-50")
    with pytest.raises(ValueError, match=r"^policy hpa-50 needs the workers' measured CPU utilisation, which "
                                         r"the k8s backend cannot measure: no metrics API; choose another"):
        check_signals(hpa, "k8s", frozenset(), "no metrics API")
    check_signals(hpa, "local", frozenset({"cpu_utilization"}))  # measured: allowed
    check_signals(make_policy("hta"), "k8s", frozenset())  # needs nothing optional


@pytest.mark.slow
def test_hpa_scales_up_from_measured_cpu_on_local_workers(tmp_path: Path):
    wf = tmp_path / "Makeflow"
    rules = "".join(f"out{i}.txt:\n\tstress-ng --cpu 1 --timeout 12 --quiet && echo done > out{i}.txt\n\n"
                    for i in range(6))
    wf.write_text('CATEGORY="burn"\nCORES=1\n' + rules)
    r = run_hta("makeflow", "--policy", "hpa-50", "--max-workers", "3", "--worker-cores", "1",
                "--provision-delay", "1", str(wf), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    decisions = [json.loads(line) for line in (tmp_path / "Makeflow.scaling.jsonl").read_text().splitlines()
                 if '"decision"' in line]
    measured = [(d, int(m.group(1))) for d in decisions if (m := re.match(r"cpu (\d+)% vs target 50%", d["reason"]))]
    assert measured, [d["reason"] for d in decisions]
    # a busy worker reads well above the 50 % target, and HPA adds workers because of it
    assert any(cpu > 55 and d["add"] > 0 for d, cpu in measured), [(d["reason"], d["add"]) for d, _ in measured]


@pytest.mark.slow
def test_a_single_threaded_task_on_a_whole_worker_reads_a_share_as_the_simulator_reads_it(tmp_path: Path):
    # a task that declares nothing is given the whole 3-core worker and keeps one core busy:
    # the local backend measures about a third of the worker, and the simulator's metric
    # (World.cpu_busy, what HPA reads there) says the same, not the whole worker
    wf = tmp_path / "Makeflow"
    wf.write_text("out.txt:\n\tstress-ng --cpu 1 --timeout 45 --quiet && echo done > out.txt\n")
    r = run_hta("makeflow", "--policy", "hpa-50", "--max-workers", "2", "--worker-cores", "3",
                "--provision-delay", "1", str(wf), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    decisions = [json.loads(line) for line in (tmp_path / "Makeflow.scaling.jsonl").read_text().splitlines()
                 if '"decision"' in line]
    busy = [int(m.group(1)) for d in decisions if (m := re.match(r"cpu (\d+)% vs target 50%", d["reason"]))
            and int(m.group(1)) > 5]
    assert busy, [d["reason"] for d in decisions]
    w = World(Workload("t", [SimTask("burn", "burn", 100, cores=1, cpu_util=1.0)]),
              ClusterModel(max_nodes=1, start_nodes=0, node_cores=3, latency_mean_s=5.0, latency_sd_s=0.0))
    w.start()
    node = w.cluster.request_node(0.0)
    w.env.run(until=50)
    simulated = 100 * w.queue.cpu_busy(node)
    assert simulated == pytest.approx(100 / 3)
    assert 15 <= max(busy) <= 45, (busy, simulated)  # (a loaded host may give stress-ng less than its core)
    # a third is under the 50 % target: HPA adds none beside its one (minReplicas) worker
    assert not any(d["add"] for d in decisions if d["reason"].startswith("cpu")), [d["reason"] for d in decisions]
