"""Our model of the Kubernetes HPA (hta/policies/hpa.py) against the real one.

Real: etcd, kube-apiserver (its aggregation layer included), kube-scheduler and
kube-controller-manager v1.33.13 of the local test cluster, whose
horizontalpodautoscaling controller scales a real Deployment (real ReplicaSet
controller, real scheduler) of pods on kwok nodes. The nodes exist from the start
(the node-provisioner stand-in makes them up front), so no pod waits for one.

Fake: the CPU usage. kwok pods use no CPU, so the named fake
:mod:`testcluster.fake_metrics` serves the metrics.k8s.io API in metrics-server's
place, reporting the usage this test scripts (every pod at 100 % of its 3-core
request); the kube-apiserver routes metrics.k8s.io to it through an APIService.

The replica counts the real controller sets (each change of the Deployment's
spec.replicas) are then fed, as observations 15 s apart with every worker at
100 % CPU, to ``HPAPolicy``, whose replicas must follow the same sequence.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import ROOT, wait
from kubernetes import client, config

from hta.model import LatencyStats, Observation, Resources, WorkerInfo
from hta.policies.hpa import HPAPolicy
from hta.policies.registry import make_policy
from testcluster import fake_metrics

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.xdist_group("test_hpa_real")]

NS = "hpa-real"
CORES = 3  # each pod requests a whole 3-core kwok node
MAX = 10
TARGET = 10  # percent: pods at 100 % want 10× the replicas
NODE = Resources(cores=CORES, memory_mb=15000, disk_mb=100000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    # MAX nodes of one pod each up front, never removed while empty (no pod waits for a node),
    # and no pod processes: the pods only have to be Running and Ready
    up = subprocess.run([str(ROOT / "testcluster/cluster"), "up", "--node-cores", str(CORES), "--node-memory", "4096",
                         "--start-nodes", str(MAX), "--max-nodes", str(MAX), "--provision-delay", "1",
                         "--provision-jitter", "0", "--empty-node-ttl", "3600", "--pod-start-delay", "1",
                         "--no-pod-runner"], env=env, capture_output=True, text=True, timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    last = up.stdout.strip().splitlines()[-1]
    assert last.startswith("export KUBECONFIG=")
    try:
        yield last.split("=", 1)[1]
    finally:
        down = subprocess.run([str(ROOT / "testcluster/cluster"), "down"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not state.exists() or not any(state.iterdir())


@pytest.fixture(scope="module")
def api(cluster):
    cfg = client.Configuration()
    config.load_kube_config(config_file=cluster, client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def metrics(api):
    """The fake metrics.k8s.io server, registered and reported Available by the kube-apiserver."""
    core, apireg = client.CoreV1Api(api), client.ApiregistrationV1Api(api)
    ip = fake_metrics.host_ip()
    fake = fake_metrics.FakeMetricsServer(core, ip)
    fake.start()
    try:
        fake_metrics.register(core, apireg, ip, fake.port)

        def ok():
            try:
                return fake_metrics.available(apireg)
            except client.exceptions.ApiException:
                return False

        assert wait(ok, 90, 1), apireg.read_api_service("v1beta1.metrics.k8s.io").status
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        fake.cpu[NS] = f"{CORES * 1000}m"  # every pod at 100 % of its request
        yield fake
    finally:
        fake.stop()


def deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "work", "image": "hta-worker:fake",
                                                           "resources": {"requests": {"cpu": str(CORES),
                                                                                      "memory": "100Mi"}}}]}}}}


def hpa(name: str, behavior: dict | None) -> dict:
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1, "maxReplicas": MAX,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": TARGET}}}]}
    if behavior is not None:
        spec["behavior"] = behavior
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": spec}


def real_sequence(api, name: str, behavior: dict | None) -> tuple[list[int], list[float], dict]:
    """Deploy ``name`` (1 replica, Ready), add its HPA, and record each spec.replicas it sets
    until it reaches MAX; returns the replicas, when each was set (s after the HPA) and the HPA."""
    apps, core, asv2 = client.AppsV1Api(api), client.CoreV1Api(api), client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(NS, deployment(name))

    def ready_pods():
        return [p for p in core.list_namespaced_pod(NS, label_selector=f"app={name}").items
                if p.status.phase == "Running"
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

    try:
        assert wait(lambda: len(ready_pods()) == 1, 60), "the first pod never became Ready"
        return _record(apps, asv2, name, behavior, ready_pods)
    finally:  # free the nodes for the next Deployment
        try:
            asv2.delete_namespaced_horizontal_pod_autoscaler(name, NS)
        except client.exceptions.ApiException:
            pass
        apps.delete_namespaced_deployment(name, NS, propagation_policy="Foreground")
        assert wait(lambda: not core.list_namespaced_pod(NS, label_selector=f"app={name}").items, 120)


def _record(apps, asv2, name: str, behavior: dict | None, ready_pods) -> tuple[list[int], list[float], dict]:
    made = asv2.create_namespaced_horizontal_pod_autoscaler(NS, hpa(name, behavior))
    t0 = time.time()
    seen, when = [1], [0.0]

    def step():
        r = apps.read_namespaced_deployment_scale(name, NS).spec.replicas
        if r != seen[-1]:
            seen.append(r)
            when.append(round(time.time() - t0, 1))
        return r == MAX

    # at most 2 × 15 s syncs per change, from 1 to 10 (at least 2 changes, at most 9)
    assert wait(step, 9 * 30 + 30, 0.25), f"replicas {seen} at {when} s: did not reach {MAX}"
    # then the controller saw MAX pods (they are Ready, so their metrics count) and wants no more
    assert wait(lambda: len(ready_pods()) == MAX, 60)
    status = wait(lambda: (s := asv2.read_namespaced_horizontal_pod_autoscaler(name, NS).status)
                  and s.current_replicas == MAX and s.desired_replicas == MAX and s, 60)
    assert status, asv2.read_namespaced_horizontal_pod_autoscaler(name, NS).status
    assert seen == sorted(set(seen)), f"replicas went down: {seen}"
    # a new HPA is queued with the resync delay (enqueueHPA: AddRateLimited), so its first
    # sync, and scale, comes one 15 s period after it is created, never at once
    assert when[1] >= 14, when
    return seen, when, made.to_dict()["spec"].get("behavior")


def model_sequence(policy, first: int = 1) -> list[int]:
    """Replicas of our model fed the same observations: every worker at 100 % CPU, 15 s apart."""
    n, t, seen = first, 0.0, [first]
    for _ in range(20):
        workers = [WorkerInfo(id=f"w{i}", capacity=NODE, in_use=Resources(cores=1), running=1, connected_at=0.0,
                              cpu_utilization=1.0) for i in range(n)]
        d = policy.decide(Observation(time=t, worker_shape=NODE, max_workers=MAX, workers=workers, pending=[],
                                      waiting=[], running=[], latency=LatencyStats(samples=[100])))
        n = n + d.add - len(d.remove)
        if n == seen[-1]:
            break
        seen.append(n)
        t += 15.0
    return seen


def test_hpa_without_behavior_matches_the_real_controller(api, metrics):
    real, when, behavior = real_sequence(api, "nobehavior", None)
    print(f"real HPA without spec.behavior: replicas {real} at {when} s")
    assert behavior is None  # the API server fills in no behaviour where none is given
    # normalizeDesiredReplicas: at most max(2 × current, 4) per sync
    assert real == [1, 4, 8, 10]
    assert model_sequence(HPAPolicy(target_percent=TARGET)) == real
    assert metrics.requests > 0


def test_hpa_with_default_behavior_matches_the_real_controller(api, metrics):
    real, when, behavior = real_sequence(api, "defaultbehavior", {"scaleUp": {}})
    print(f"real HPA with spec.behavior defaults {behavior}: replicas {real} at {when} s")
    up = behavior["scale_up"]
    assert up["select_policy"] == "Max" and up["stabilization_window_seconds"] == 0
    assert sorted((p["type"], p["value"], p["period_seconds"]) for p in up["policies"]) == [
        ("Percent", 100, 15), ("Pods", 4, 15)]
    # normalizeDesiredReplicasWithBehaviors: up by max(4 pods, 100 %) per 15 s
    assert real == [1, 5, 10]
    assert model_sequence(make_policy(f"hpa-{TARGET}:spec_behavior=true")) == real
