"""`hta makeflow --backend k8s` on the local test cluster: a real kube-apiserver,
etcd, kube-scheduler and kube-controller-manager, kwok nodes, the
node-provisioner stand-in and the pod process runner (a fake kubelet)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import HTA, ROOT, cctools_processes, run_hta, wait
from kubernetes import client, config

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.xdist_group("test_k8s")]

PROVISION_S = 10.0
POD_START_S = 2.0
EMPTY_TTL_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    up = subprocess.run([str(ROOT / "testcluster/cluster"), "up", "--node-cores", "2", "--node-memory", "4096",
                         "--max-nodes", "4", "--provision-delay", str(PROVISION_S), "--provision-jitter", "0.5",
                         "--pod-start-delay", str(POD_START_S), "--empty-node-ttl", str(EMPTY_TTL_S)],
                        env=env, capture_output=True, text=True, timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    last = up.stdout.strip().splitlines()[-1]
    assert last.startswith("export KUBECONFIG=")
    kubeconfig = last.split("=", 1)[1]
    try:
        yield kubeconfig
    finally:
        down = subprocess.run([str(ROOT / "testcluster/cluster"), "down"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not state.exists() or not any(state.iterdir())


@pytest.fixture
def core(cluster):
    cfg = client.Configuration()
    config.load_kube_config(config_file=cluster, client_configuration=cfg)
    return client.CoreV1Api(client.ApiClient(cfg))


def hta_pods(core) -> list:
    return core.list_namespaced_pod("default", label_selector="hta.io/run").items


def stand_in_nodes(core) -> list:
    return core.list_node(label_selector="hta.io/provisioned-by=node-provisioner-stand-in").items


def k8s_args(kubeconfig: str, *extra: str) -> list[str]:
    return ["makeflow", "--backend", "k8s", "--kubeconfig", kubeconfig, "--host-network", "--worker-cores", "2",
            "--worker-memory", "2048", "--worker-disk", "4096", "--port", "0", "--latency-prior", "10", *extra]


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_blast_on_kubernetes_scales_pods_and_leaves_nothing(cluster, core, blast_copy):
    # the narrow stage (one long align task) outlasts a preparation latency, so its idle pods are drained
    subprocess.run(["python3", "make_makeflow.py", "6", "1", "4", "30,400,30"], cwd=blast_copy, check=True)
    # (no hold: HTA's default would keep them up to 30 latencies for the stage after it; a
    # worker per never-measured task at once, bought ahead of the split: the default waits
    # for a first finisher, and one pod then runs these short stages alone)
    # (whole nodes: each pod waits for a node of its own, so every latency below is one
    # node's; a pod that lands beside another on a node being prepared waits less)
    r = run_hta(*k8s_args(cluster, "--max-workers", "3", "--policy",
                          "hta:hold_latencies=0,worker_shape=node,first_finish_latencies=0,buy_for_gated=true"),
                str(blast_copy / "Makeflow"), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for s in (1, 2, 3):
        head = (blast_copy / f"result{s}.txt").read_text().splitlines()[0].split()
        assert head[2] == head[4] and int(head[2]) > 0
    recs = records(blast_copy / "Makeflow.scaling.jsonl")
    assert recs[0]["backend"] == "k8s" and recs[-1]["exit_code"] == 0
    workers = [x for x in recs if x["kind"] == "worker"]
    requested = [x for x in workers if x["event"] == "requested"]
    drained = [x for x in workers if x["event"] == "drained"]
    assert len(requested) >= 2 and drained, "pods created for the wide stage and deleted in the narrow one"
    assert min(x["t"] for x in requested) < min(x["t"] for x in drained)
    connected = [x for x in workers if x["event"] == "connected"]
    assert connected and all(x["node"] for x in connected), "each pod's node is named: node·s are paid per node"
    # latency: phases measured from pod events match the configured delays within 20 %
    # pods that waited for a node provisioned for them
    fresh = [x for x in workers if x["event"] == "connected" and x["phases"].get("node", 0) > 0.5 * PROVISION_S]
    assert fresh, "at least one pod waited for a new node"
    # L up to Running = waiting for a node + pull/start (connecting is not configured). The first
    # pod to get a new node shows the configured delays; when several wait, the scheduler may
    # give that node to a later pod, so the oldest can wait one provisioning more, never longer.
    measured = sorted(x["phases"]["node"] + x["phases"]["start"] for x in fresh)
    assert abs(measured[0] - (PROVISION_S + POD_START_S)) <= 0.2 * (PROVISION_S + POD_START_S), fresh
    assert measured[-1] <= 2 * PROVISION_S + POD_START_S + 0.2 * (PROVISION_S + POD_START_S), fresh
    for x in fresh:
        assert abs(x["phases"]["start"] - POD_START_S) <= 0.2 * POD_START_S + 0.5, x
        assert x["phases"]["unschedulable"] > 0, x  # seen unschedulable: a sample of L (hta.model.LatencyStats)
    assert hta_pods(core) == []
    assert wait(lambda: not stand_in_nodes(core), EMPTY_TTL_S + 20), "stand-in nodes outlived the run"
    assert not cctools_processes(str(blast_copy))


def test_hta_reads_from_the_node_objects_how_long_an_empty_node_stays(cluster, core, tmp_path):
    # a short task and a long one on whole-node workers: the short one's worker is drained
    # at once (no hold), its node goes EMPTY_TTL_S later, while the long one still runs
    wf = tmp_path / "hold"
    wf.mkdir()
    (wf / "Makeflow").write_text("CATEGORY=short\nCORES=1\nMEMORY=50\nDISK=50\n\nshort.txt:\n\techo s > short.txt\n\n"
                                 "CATEGORY=long\nlong.txt:\n\tsleep 45; echo l > long.txt\n")
    r = run_hta(*k8s_args(cluster, "--max-workers", "2", "--policy", "hta:hold_latencies=0,worker_shape=node"),
                "-v", str(wf / "Makeflow"), timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    held = re.findall(r"the cluster keeps an empty node (\d+) s after its last worker left", r.stderr)
    assert held and abs(int(held[0]) - EMPTY_TTL_S) <= 3, r.stderr[-3000:]
    assert "a drained worker bought back waits for a new node" in r.stderr  # (5 s is under a latency)
    assert hta_pods(core) == []


def _sleepy(tmp_path: Path, n: int, seconds: int) -> Path:
    wf = tmp_path / "sleepy"
    wf.mkdir()
    rules = "".join(f"s{i}.txt:\n\tsleep {seconds}; echo {i} > s{i}.txt\n\n" for i in range(n))
    (wf / "Makeflow").write_text("CATEGORY=sleep\nCORES=1\nMEMORY=50\nDISK=50\n\n" + rules)
    return wf


def test_killed_hta_restarts_and_adopts_its_pods(cluster, core, tmp_path):
    wf = _sleepy(tmp_path, 6, 20)
    # (whole nodes: --max-workers 2 is then 2 pods; learned pods are 2 nodes' worth of them)
    args = [*HTA, *k8s_args(cluster, "--max-workers", "2"), "--policy", "hta:worker_shape=node", "--port", "9311",
            str(wf / "Makeflow")]
    p = subprocess.Popen(args, cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = wf / "Makeflow.scaling.jsonl"
    assert wait(lambda: log.exists() and '"connected"' in log.read_text(), 120), "no worker connected"
    before = sorted(x.metadata.name for x in hta_pods(core))
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert before and sorted(x.metadata.name for x in hta_pods(core)) == before  # pods survive HTA
    r = subprocess.run(args, cwd=wf, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = records(log)
    names = {x["worker"] for x in recs if x["kind"] == "worker" and x["event"] == "requested"}
    assert set(before) <= names, "adopted pods are tracked"
    created_after = names - set(before)
    assert len(before) + len(created_after) <= 2 + len(created_after - set(before))
    peak = max(x["workers"] + x["pending"] for x in recs if x["kind"] == "observation")
    assert peak <= 2, "no duplicates: never more than --max-workers pods"
    assert all((wf / f"s{i}.txt").exists() for i in range(6))
    assert hta_pods(core) == []


def test_deleted_worker_pod_tasks_are_rerun(cluster, core, tmp_path):
    wf = _sleepy(tmp_path, 4, 15)
    p = subprocess.Popen([*HTA, *k8s_args(cluster, "--max-workers", "2"), str(wf / "Makeflow")], cwd=wf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = wf / "Makeflow.scaling.jsonl"
    assert wait(lambda: log.exists() and '"connected"' in log.read_text(), 120)
    victim = next(x for x in records(log) if x["kind"] == "worker" and x["event"] == "connected")["worker"]
    assert wait(lambda: any(x["kind"] == "observation" and x["running"] > 0 for x in records(log)), 60)
    core.delete_namespaced_pod(victim, "default", grace_period_seconds=0)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    recs = records(log)
    assert any(x["kind"] == "worker" and x["worker"] == victim and x["event"] in ("lost", "failed") for x in recs)
    assert all((wf / f"s{i}.txt").exists() for i in range(4))
    assert hta_pods(core) == []


def test_bad_kubeconfig_is_one_line(tmp_path):
    wf = _sleepy(tmp_path, 1, 1)
    r = run_hta("makeflow", "--backend", "k8s", "--kubeconfig", str(tmp_path / "none"), str(wf / "Makeflow"))
    assert r.returncode == 2 and "kubeconfig" in r.stderr and r.stderr.strip().count("\n") == 0
    (tmp_path / "bad").write_text("this: [is not a kubeconfig")
    r = run_hta("makeflow", "--backend", "k8s", "--kubeconfig", str(tmp_path / "bad"), str(wf / "Makeflow"))
    assert r.returncode == 2 and "invalid kubeconfig" in r.stderr and r.stderr.strip().count("\n") == 0
    assert not cctools_processes(str(wf))


def test_a_namespace_that_does_not_exist_is_refused_before_anything_starts(cluster, core, tmp_path):
    # listing pods there answers an empty list; every create then failed with 404, retried for
    # ever: the run never ended (a server-side dry run of one worker pod now says so at once)
    wf = _sleepy(tmp_path, 1, 1)
    r = run_hta(*k8s_args(cluster, "--namespace", "nosuchns"), str(wf / "Makeflow"), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("hta: error: namespace 'nosuchns' not found: create it (kubectl create namespace "
                                "nosuchns) or pass --namespace"), r.stderr
    assert not hta_pods(core) and not (wf / "Makeflow.makeflowlog").exists()
    assert not cctools_processes(str(wf))


def test_hpa_is_refused_where_the_cluster_serves_no_cpu_metrics(cluster, core, blast_copy):
    """The test cluster runs no metrics-server: HPA would read 0 % CPU and never scale, so it
    is refused before anything starts, in one line that names the missing API."""
    r = run_hta(*k8s_args(cluster, "--policy", "hpa-50"), str(blast_copy / "Makeflow"), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("hta: error: policy hpa-50 needs the workers' measured CPU utilisation") \
        and "metrics.k8s.io" in line and "--policy hta" in line
    assert not hta_pods(core) and not (blast_copy / "Makeflow.makeflowlog").exists()


def test_the_manifests_status_policy_and_service_are_taken_by_the_api_server(cluster, core):
    """The NetworkPolicy that admits the workers to the master's port and the monitoring
    namespace to the status port, and the status Service with its scrape annotations, as
    the API server stores them (this cluster runs no network plugin that enforces them)."""
    from kubernetes import utils

    api = core.api_client
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="hta-manifests")))
    try:
        manifests = ROOT / "k8s" / "manifests"
        for name in ("networkpolicy.yaml", "status-service.yaml"):
            utils.create_from_yaml(api, str(manifests / name), namespace="hta-manifests")
        policy = client.NetworkingV1Api(api).read_namespaced_network_policy("hta", "hta-manifests")
        assert policy.spec.pod_selector.match_labels == {"app.kubernetes.io/name": "hta"}
        rules = {r.ports[0].port: r._from[0] for r in policy.spec.ingress}
        assert rules[9123].pod_selector.match_labels == {"app.kubernetes.io/name": "hta-worker"}
        assert rules[8080].namespace_selector.match_labels == {"kubernetes.io/metadata.name": "monitoring"}
        svc = core.read_namespaced_service("hta-status", "hta-manifests")
        assert svc.metadata.annotations["prometheus.io/scrape"] == "true" and svc.spec.ports[0].port == 8080
    finally:
        core.delete_namespace("hta-manifests")
