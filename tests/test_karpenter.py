"""Real Karpenter (its kwok cloud provider, built from sigs.k8s.io/karpenter) as the test
cluster's node autoscaler, and real KEDA's operator scaling a ScaledJob of Work Queue
workers: ``testcluster/cluster up --node-autoscaler karpenter --keda``."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, cctools_processes, run_hta, wait
from kubernetes import client, config

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.xdist_group("test_karpenter")]
CLUSTER = str(ROOT / "testcluster/cluster")
REGISTRATION_S = 4  # the KWOKNodeClass's nodeRegistrationDelay (the preparation latency)
CONSOLIDATE_S = 5  # the NodePool's consolidateAfter


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("karpenter-cluster")
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    up = subprocess.run([CLUSTER, "up", "--node-autoscaler", "karpenter", "--keda", "--node-cores", "3", "--node-memory",
                         "8192", "--max-nodes", "3", "--provision-delay", str(REGISTRATION_S), "--pod-start-delay",
                         "1", "--empty-node-ttl", str(CONSOLIDATE_S)], env=env, capture_output=True, text=True,
                        timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    assert "Karpenter v" in up.stderr and "KEDA's operator" in up.stderr
    kubeconfig = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield kubeconfig
    finally:
        down = subprocess.run([CLUSTER, "down"], env=env, capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not state.exists() or not any(state.iterdir())


@pytest.fixture
def apis(cluster):
    cfg = client.Configuration()
    config.load_kube_config(config_file=cluster, client_configuration=cfg)
    api = client.ApiClient(cfg)
    return client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api)


def karpenter_nodes(core) -> list:
    return core.list_node(label_selector="karpenter.sh/nodepool=default").items


def node_claims(custom) -> list:
    return custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]


def test_karpenter_adds_a_node_for_a_pod_that_fits_nowhere_and_removes_it_once_empty(apis):
    core, custom, _ = apis
    assert karpenter_nodes(core) == []
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="needs-a-node"), spec=client.V1PodSpec(
        restart_policy="Never", termination_grace_period_seconds=0, containers=[client.V1Container(
            name="c", image="localhost/none:1",
            resources=client.V1ResourceRequirements(requests={"cpu": "2", "memory": "100Mi"}))]))
    t0 = time.time()
    core.create_namespaced_pod("default", pod)
    bound = wait(lambda: core.read_namespaced_pod("needs-a-node", "default").spec.node_name, 90, every=0.2)
    assert bound, "Karpenter made no node the pod could run on"
    took = time.time() - t0
    (node,) = karpenter_nodes(core)
    assert node.metadata.name == bound and len(node_claims(custom)) == 1
    assert took >= REGISTRATION_S, f"bound after {took:.1f}s, before the node could register"
    assert node.status.allocatable["cpu"] == "3", "sized like the thesis's nodes: 3 allocatable cores"
    core.delete_namespaced_pod("needs-a-node", "default", grace_period_seconds=0)
    gone = wait(lambda: not karpenter_nodes(core) and not node_claims(custom), CONSOLIDATE_S + 60, every=0.5)
    assert gone, "Karpenter kept the empty node"


def test_hta_runs_on_nodes_karpenter_makes_and_leaves_nothing(cluster, apis, tmp_path: Path):
    core, custom, _ = apis
    wf = tmp_path / "io"
    shutil.copytree(ROOT / "workflows" / "io", wf)
    r = run_hta("makeflow", "--backend", "k8s", "--kubeconfig", cluster, "--host-network", "--worker-cores", "1",
                "--worker-memory", "1024", "--worker-disk", "2048", "--port", "0", "--latency-prior", "10",
                "--max-workers", "3", str(wf / "Makeflow"), timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(list(wf.glob("block*.md5"))) == 16 and (wf / "blocks.txt").exists()
    connected = [line for line in (wf / "Makeflow.scaling.jsonl").read_text().splitlines()
                 if '"event":"connected"' in line.replace(" ", "")]
    assert connected and all('"node":null' not in c.replace(" ", "") for c in connected)
    assert core.list_namespaced_pod("default", label_selector="hta.io/run").items == []
    gone = wait(lambda: not karpenter_nodes(core) and not node_claims(custom), CONSOLIDATE_S + 60, every=0.5)
    assert gone, "the workflow's nodes outlived it"
    assert not cctools_processes(str(wf))


def test_a_keda_scaledjob_runs_a_job_per_waiting_task_and_scales_to_zero_after(apis, tmp_path: Path):
    """The rival as a user deploys it: KEDA's metrics-api scaler reads the master's own
    /queue_status; each Job's pod runs ``hta worker --tasks 1``; Karpenter makes the nodes."""
    from test_node import Master

    from hta.node.worker import worker_command
    from testcluster.keda import scaled_job

    core, custom, batch = apis
    m = Master()
    try:
        for _ in range(4):
            m.submit("sleep 2")
        master = f"127.0.0.1:{m.q.port}"
        job = scaled_job("keda-rival", master, tasks_per_job=1, cores=1, memory_mb=512, image="localhost/none:1",
                         command=worker_command(master, disk_mb=1024, idle_timeout_s=5, css=False), polling_s=2)
        custom.create_namespaced_custom_object("keda.sh", "v1alpha1", "default", "scaledjobs", job)
        # (a new node, its pod and its worker: slower while the suite's other half runs beside it)
        assert wait(lambda: len(m.done) == 4, 240, every=0.5), f"{len(m.done)} of 4 tasks done"
        assert all(d[1] == 0 for d in m.done)
        jobs = batch.list_namespaced_job("default", label_selector="scaledjob.keda.sh/name=keda-rival").items
        assert len(jobs) >= 4 or sum(j.status.succeeded or 0 for j in jobs) >= 2, "a Job per waiting task"

        def idle() -> bool:
            active = [j for j in batch.list_namespaced_job("default").items if j.status.active]
            pods = core.list_namespaced_pod("default", label_selector="hta.io/rival").items
            return not active and all(p.status.phase in ("Succeeded", "Failed") for p in pods)
        # (a Job KEDA started for a task another took ends when its worker's 5 s idle timeout does)
        assert wait(idle, 90, every=0.5), "KEDA kept Jobs running with nothing waiting"
        assert wait(lambda: not karpenter_nodes(core), CONSOLIDATE_S + 60, every=0.5), "their nodes outlived them"
    finally:
        m.stop.set()
        # (its Jobs go with it: they are owned by the ScaledJob)
        custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", "default", "scaledjobs", "keda-rival")
        assert wait(lambda: not batch.list_namespaced_job("default").items, 60, every=0.5), "its Jobs stayed"
