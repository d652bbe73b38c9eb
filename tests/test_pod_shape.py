"""A rival given pods smaller than a node (``POLICY[pods=K]``, :mod:`hta.policies.pod_shape`):
its counts are in pods of that shape, under the same cap of nodes."""

from __future__ import annotations

import pytest

from hta.policies.pod_shape import PodShaped
from hta.policies.registry import make_policy
from hta.scaling_log import ScalingLogWriter
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload


def run(spec: str, tasks: list[SimTask], **cluster) -> tuple:
    c = ClusterModel(**{"max_nodes": 1, "start_nodes": 1, "start_workers": 0, "latency_mean_s": 10.0,
                        "latency_sd_s": 0.0, "teardown_s": 0.0, **cluster})
    log = ScalingLogWriter()
    s = Simulation(Workload("w", tasks), make_policy(spec), c, seed=0, log=log).run()
    return s, [r for r in log.records if r.kind == "worker" and r.event == "requested"]


def test_max_then_drain_on_1_core_pods_runs_three_tasks_at_once_on_its_one_node():
    tasks = [SimTask(f"t{i}", "a", 100.0) for i in range(3)]
    whole, asked = run("max-then-drain", tasks)
    # (the empty starting node goes at once: the first worker waits the 10 s latency)
    assert whole.runtime_s == pytest.approx(10 + 300.0) and len(asked) == 1  # one task at a time: whole workers
    pods, asked = run("max-then-drain[pods=3]", tasks)
    assert pods.runtime_s == pytest.approx(10 + 100.0) and len(asked) == 3 and {r.cores for r in asked} == {1.0}
    assert pods.exit_code == 0


def test_a_pod_too_small_for_a_retried_task_is_drained_for_a_node():
    # 9 GB does not fit a third of a 15 GB node: killed there, retried on a whole worker, which
    # only a node-sized pod is; the idle pods give their room back
    tasks = [SimTask("big", "a", 50.0, memory_mb=9000.0)]
    s, asked = run("max-then-drain[pods=learned]", tasks, horizon_s=5000.0)
    assert s.exit_code == 0 and s.runtime_s < 1000.0
    assert 3.0 in {r.cores for r in asked}


def test_a_pod_count_is_a_whole_number_or_learned():
    assert make_policy("keda-job-3[pods=learned]").name == "keda-job-3[pods=learned]"
    with pytest.raises(ValueError, match=r"\[pods=K\] needs a whole number"):
        make_policy("hta[pods=0]")
    with pytest.raises(ValueError):
        PodShaped(make_policy("static"), "half")
