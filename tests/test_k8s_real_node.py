"""Real pods: the worker image run by a real kubelet (v1.33.13) with containerd and runc
on the test cluster's real node (``cluster up --real-node``), on the pod network.

Slow (the first run builds the image: about two minutes), and CI runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_hta, wait
from kubernetes import client, config

from testcluster import real_node

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.xdist_group("test_k8s_real_node")]
CLUSTER = str(ROOT / "testcluster/cluster")


def host_state() -> dict:
    """What the real node may change on this host and ``cluster down`` must put back."""
    return {
        "sysctls": {k: real_node.sysctl_path(k).read_text().strip() for k in real_node.SYSCTLS
                    if real_node.sysctl_path(k).exists()},
        "var_lib_kubelet": Path("/var/lib/kubelet").exists(),
        "kubepods": sorted(str(d) for d in real_node.cgroup_roots() if (d / "kubepods").exists()),
        "bridge": Path(f"/sys/class/net/{real_node.BRIDGE}").exists(),
        "netns": sorted(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else None,
    }


def pod_processes() -> list[int]:
    return real_node._pids_where(real_node._in_pod_cgroup)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (containerd, kubelet, cgroups)")  # CI runs as root
    state = tmp_path_factory.mktemp("realnode")
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    before = host_state()
    up = subprocess.run([CLUSTER, "up", "--real-node", "--max-nodes", "0"], env=env, capture_output=True,
                        text=True, timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    kubeconfig = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    info = {"kubeconfig": kubeconfig, "env": env, "state": state, "before": before,
            "core": client.CoreV1Api(client.ApiClient(cfg)), "up_stderr": up.stderr}
    try:
        yield info
    finally:
        subprocess.run([CLUSTER, "down"], env=env, capture_output=True, text=True, timeout=300)


def test_real_node_is_ready_and_runs_no_fake(node):
    (n,) = node["core"].list_node(label_selector="hta.io/real-node=true").items
    assert n.metadata.name == real_node.NAME
    assert n.status.node_info.kubelet_version == "v1.33.13"
    assert n.status.node_info.container_runtime_version.startswith("containerd://")
    assert "pod-runner" not in json.loads((node["state"] / "pids.json").read_text())


def test_pod_with_limits_advertises_them_to_the_master(node):
    from workqueue_bridge.wq import load

    wq = load()
    q = wq.WorkQueue(port=0)  # listens on every address: the pod reaches it through the bridge
    master = f"{real_node.node_ip()}:{q.port}"
    qty = {"cpu": "1", "memory": "512Mi"}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="limits-probe"),
        spec=client.V1PodSpec(restart_policy="Never", termination_grace_period_seconds=2, containers=[
            client.V1Container(name="worker", image="localhost/hta-worker:latest", image_pull_policy="Never",
                               command=["hta", "worker", f"--master={master}", "--idle-timeout=60"],
                               resources=client.V1ResourceRequirements(requests=qty, limits=qty))]))
    core = node["core"]
    core.create_namespaced_pod("default", pod)
    try:
        def connected():
            q.wait(0)  # let the master accept the worker
            return q.stats.total_cores > 0  # the worker has connected and sent its resources

        assert wait(connected, 90, 0.2), core.read_namespaced_pod_log("limits-probe", "default")
        assert q.stats.total_cores == 1
        assert 500 <= q.stats.total_memory <= 512  # MB: the pod's 512 Mi limit, not the host's memory
        log = core.read_namespaced_pod_log("limits-probe", "default")
        cap = json.loads(next(x for x in log.splitlines() if '"hta_worker"' in x))
        assert "cpu.cfs_quota_us" in cap["sources"]["cores"] or "cpu.max" in cap["sources"]["cores"]
        assert "memory" in cap["sources"]["memory"] and cap["memory_mb"] == 512
        ps = subprocess.run(["ps", "-o", "user=", "-C", "work_queue_worker"], capture_output=True, text=True)
        assert "10001" in ps.stdout or "hta" in ps.stdout.split()  # the image's non-root user
    finally:
        core.delete_namespaced_pod("limits-probe", "default", grace_period_seconds=0)
        assert wait(lambda: not core.list_namespaced_pod("default").items, 60)


def test_blast_runs_in_real_pods_with_correct_outputs(node, blast_copy: Path, tmp_path: Path):
    ref = tmp_path / "ref"
    shutil.copytree(blast_copy, ref)
    subprocess.run(["makeflow", "-T", "local", "-j", "2", "Makeflow"], cwd=ref, check=True, capture_output=True)

    r = run_hta("makeflow", "--backend", "k8s", "--kubeconfig", node["kubeconfig"], "--max-workers", "2",
                "--worker-cores", "1", "--worker-memory", "512", "--port", "0", "--latency-prior", "5",
                str(blast_copy / "Makeflow"), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    for s in (1, 2, 3):
        assert (blast_copy / f"result{s}.txt").read_text() == (ref / f"result{s}.txt").read_text()

    recs = [json.loads(x) for x in (blast_copy / "Makeflow.scaling.jsonl").read_text().splitlines()]
    assert recs[-1]["kind"] == "end" and recs[-1]["exit_code"] == 0
    connected = [x for x in recs if x["kind"] == "worker" and x["event"] == "connected"]
    assert connected and all(x["worker"].startswith("hta-") and x["cores"] == 1 for x in connected)
    # the phases of a real pod's preparation: scheduled, container started, worker connected
    assert any({"node", "start", "connect"} <= set(x["phases"]) for x in connected), connected
    # nothing left behind: no pod, no container, no process in a pod cgroup
    core = node["core"]
    assert wait(lambda: not core.list_namespaced_pod("default", label_selector="hta.io/run").items, 60)
    assert wait(lambda: not pod_processes(), 30), pod_processes()


def test_an_image_no_node_can_pull_ends_the_run_in_one_line(node, tmp_path: Path):
    """Issue 15: a worker image that cannot be pulled is reported (the container's waiting
    reason), bounded by --worker-start-timeout, and ends the run with no pod left."""
    wf = tmp_path / "wf"
    wf.mkdir()
    (wf / "Makeflow").write_text("a.txt:\n\techo a > a.txt\n")
    r = run_hta("makeflow", "--backend", "k8s", "--kubeconfig", node["kubeconfig"], "--max-workers", "2",
                "--worker-cores", "1", "--worker-memory", "512", "--port", "0", "--worker-start-timeout", "30",
                "--image", "localhost/hta-no-such-image:1", str(wf / "Makeflow"), timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("hta: error: worker pods cannot start") and "cannot be pulled" in last, last
    assert "localhost/hta-no-such-image:1" in last and "--image" in last
    core = node["core"]
    assert wait(lambda: not core.list_namespaced_pod("default", label_selector="hta.io/run").items, 60)
    assert not (wf / "a.txt").exists()


def test_down_puts_the_host_back(node):
    down = subprocess.run([CLUSTER, "down"], env=node["env"], capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stderr
    assert host_state() == node["before"]
    assert not pod_processes()
    assert not node["state"].exists() or not any(node["state"].iterdir())
    left = subprocess.run(["pgrep", "-f", str(node["state"])], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the cluster still running: {left}"
