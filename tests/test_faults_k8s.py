"""Issue 15 on Kubernetes: the faults HTA must survive, each on the local test cluster (real
kube-apiserver, etcd, kube-scheduler, kube-controller-manager; kwok nodes; the
node-provisioner stand-in and the pod process runner, a fake kubelet). Each test failed on the
code before its fix. ``bench/faults.py --k8s`` runs the longer versions and prints the table."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import HTA, ROOT, cctools_processes, run_hta, wait
from kubernetes import client, config

from testcluster.pod_runner import pod_processes

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("test_faults_k8s")]
CLUSTER = str(ROOT / "testcluster/cluster")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
    up = subprocess.run([CLUSTER, "up", "--node-cores", "2", "--node-memory", "4096", "--max-nodes", "4",
                         "--provision-delay", "5", "--provision-jitter", "0.5", "--pod-start-delay", "1",
                         "--empty-node-ttl", "5"], env=env, capture_output=True, text=True, timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    kubeconfig = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield {"kubeconfig": kubeconfig, "env": env}
    finally:
        down = subprocess.run([CLUSTER, "down"], env=env, capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr


@pytest.fixture
def core(cluster):
    cfg = client.Configuration()
    config.load_kube_config(config_file=cluster["kubeconfig"], client_configuration=cfg)
    api = client.CoreV1Api(client.ApiClient(cfg))
    yield api
    for p in api.list_namespaced_pod("default").items:  # nothing of one test disturbs the next
        try:
            api.delete_namespaced_pod(p.metadata.name, "default", grace_period_seconds=0)
        except client.exceptions.ApiException:
            pass


def probe_pod(name: str, run: str, cpu: str = "1", command: list[str] | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"hta.io/run": run}),
        spec=client.V1PodSpec(termination_grace_period_seconds=5, restart_policy="Never", containers=[
            client.V1Container(name="c", image="localhost/none:1", command=command,
                               resources=client.V1ResourceRequirements(requests={"cpu": cpu, "memory": "100Mi"}))]))


def hta_pods(core) -> list:
    return core.list_namespaced_pod("default", label_selector="hta.io/run").items


def records(path: Path) -> list[dict]:
    out = []
    for x in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(x))
        except json.JSONDecodeError:
            pass
    return out


def sleepy(tmp_path: Path, n: int, seconds: int) -> Path:
    wf = tmp_path / "sleepy"
    wf.mkdir()
    rules = "".join(f"s{i}.txt:\n\tsleep {seconds}; echo {i} > s{i}.txt\n\n" for i in range(n))
    (wf / "Makeflow").write_text("CATEGORY=sleep\nCORES=1\nMEMORY=50\nDISK=50\n\n" + rules)
    return wf


def k8s_args(kubeconfig: str, *extra: str) -> list[str]:
    return ["makeflow", "--backend", "k8s", "--kubeconfig", kubeconfig, "--host-network", "--worker-cores", "2",
            "--worker-memory", "2048", "--worker-disk", "4096", "--port", "0", "--latency-prior", "8", *extra]


# -- the informer after an API server outage ------------------------------------------

def test_phases_seen_late_come_from_the_pods_status(cluster, core):
    """A pod that was scheduled and started while the informer was not watching (an outage, a
    restarted HTA) gets its phase times from its status, not from when the informer relisted."""
    from k8s.informer import PodInformer

    core.create_namespaced_pod("default", probe_pod("late-1", "late"))

    def started():
        p = core.read_namespaced_pod("late-1", "default")
        cs = p.status.container_statuses or []
        return cs and cs[0].state.running and cs[0].state.running.started_at and p

    pod = wait(started, 180, 0.2)  # a node is provisioned first (5 s here)
    assert pod, "the probe pod never ran"
    started_at = pod.status.container_statuses[0].state.running.started_at.timestamp()
    scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled").last_transition_time.timestamp()
    assert wait(lambda: time.time() > started_at + 4, 10, 0.2)  # the informer comes 4 s late
    inf = PodInformer(core, "default", "hta.io/run=late")
    inf.start()
    try:
        assert inf.synced.wait(10)
        st = inf.snapshot()["late-1"]
        assert abs(st.scheduled_at - scheduled) < 1.5, (st.scheduled_at, scheduled)
        assert abs(st.running_at - started_at) < 1.5, (st.running_at, started_at)
    finally:
        inf.stop()


def test_a_worker_connected_before_the_watch_saw_its_pod_run_still_gets_its_phases(cluster, core):
    """A worker can connect before the watch reports its pod Running (a kubelet reports it
    about a second after the container starts, and the watch adds its lag): a real-node CI
    run once logged such a worker with no phases. Its "connected" record now waits for the
    watch (at most ``phases_wait_s``); the worker counts as connected meanwhile."""
    import asyncio

    from hta.backends.pool import WorkerPool
    from hta.model import Resources
    from k8s.backend import KubernetesProvider
    from k8s.informer import PodInformer
    from workqueue_bridge.snapshot import MasterSnapshot
    from workqueue_bridge.status_json import QueueStatus, WorkerStatus

    async def scenario() -> tuple[list, list, dict, list]:
        def pool(run_id: str, **options) -> WorkerPool:
            provider = KubernetesProvider(run_id=run_id, kubeconfig=cluster["kubeconfig"], master_host="127.0.0.1")
            provider.connect()
            provider.master = "127.0.0.1:9123"
            provider.informer = PodInformer(provider.api, "default", provider.selector)  # not started yet
            return WorkerPool(provider, epoch=time.time(), **options)

        def now(p: WorkerPool) -> float:
            return time.time() - p.epoch

        b = pool("race")
        lagging = b.provider.informer  # type: ignore[attr-defined] # not started: as far behind as it gets
        try:
            [name] = await b.request(1, Resources(cores=1, memory_mb=100, disk_mb=100), now(b))
            assert await asyncio.to_thread(wait, lambda: core.read_namespaced_pod(name, "default").status.phase
                                           in ("Running", "Failed", "Succeeded"), 120, 0.2)
            worker = WorkerStatus(address="127.0.0.1:4000", hostname=name, cores=1, memory_mb=100, disk_mb=100)
            snap = lambda: MasterSnapshot(taken_at=now(b), queue=QueueStatus(), tasks=[], workers=[worker])
            t_connect = now(b)
            first = await b.refresh(snap(), t_connect)
            counted = b.worker_ids()
            lagging.start()  # the watch catches up
            assert await asyncio.to_thread(lagging.synced.wait, 30)
            later = await b.refresh(snap(), now(b))
            # a worker whose record waits no more: announced at once, with what is known
            b2 = pool("race2", phases_wait_s=0)  # its informer never started
            [name2] = await b2.request(1, Resources(cores=1, memory_mb=100, disk_mb=100), now(b2))
            w2 = WorkerStatus(address="127.0.0.1:4001", hostname=name2, cores=1, memory_mb=100, disk_mb=100)
            at_once = await b2.refresh(MasterSnapshot(taken_at=now(b2), queue=QueueStatus(), tasks=[],
                                                      workers=[w2]), now(b2))
            await b2.stop_all(now(b2))
            return first, later, counted, at_once, t_connect
        finally:
            lagging.stop()
            await b.stop_all(now(b))

    first, later, counted, at_once, t_connect = asyncio.run(scenario())
    assert not [r for r in first if r.event == "connected"], first  # held: the watch has not said
    assert "127.0.0.1:4000" in counted  # but the worker counts as connected
    [rec] = [r for r in later if r.event == "connected"]
    assert {"node", "start", "connect"} <= set(rec.phases), rec
    assert rec.phases["node"] + rec.phases["start"] + rec.phases["connect"] == pytest.approx(rec.latency_s, abs=0.005)
    assert rec.t == round(t_connect, 3)  # stamped when the worker connected, not when announced
    [rec2] = [r for r in at_once if r.event == "connected"]
    assert rec2.phases == {}


# -- pods stuck Terminating at the end ------------------------------------------------

def test_end_of_run_force_deletes_pods_stuck_terminating(cluster, core, caplog):
    """A pod whose node is gone stays Terminating (no kubelet confirms): the end of the run
    says so and deletes it with grace 0 after a bound, instead of waiting silently."""
    import asyncio

    from hta.backends.pool import WorkerPool
    from k8s.backend import KubernetesProvider

    core.create_namespaced_pod("default", probe_pod("term-1", "term"))
    assert wait(lambda: core.read_namespaced_pod("term-1", "default").status.phase == "Running", 60)
    node = core.read_namespaced_pod("term-1", "default").spec.node_name
    core.delete_node(node)
    provider = KubernetesProvider(run_id="term", kubeconfig=cluster["kubeconfig"], force_delete_after_s=5,
                                  delete_timeout_s=60)
    provider.connect()
    b = WorkerPool(provider, epoch=time.time())
    caplog.set_level(logging.WARNING, logger="hta.k8s")
    t0 = time.time()
    asyncio.run(b.stop_all(0.0))
    took = time.time() - t0
    assert not core.list_namespaced_pod("default", label_selector="hta.io/run=term").items
    assert took < 20, f"the end waited {took:.0f}s"
    said = [r.getMessage() for r in caplog.records]
    assert any("waiting for 1 worker pod" in m for m in said) and any("grace period 0" in m for m in said), said


# -- RBAC grants what the code uses, nothing more ---------------------------------------

def test_role_grants_exactly_the_verbs_the_code_uses():
    import re

    import yaml

    role = yaml.safe_load((ROOT / "k8s/manifests/role.yaml").read_text())
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    code = "".join(p.read_text() for p in (ROOT / "k8s").glob("*.py"))
    verbs = {"create_namespaced_pod": "create", "delete_namespaced_pod": "delete", "list_namespaced_pod": "list",
             "read_namespaced_pod": "get", "patch_namespaced_pod": "patch", "replace_namespaced_pod": "update",
             "list_node": "list", "read_node": "get", "list_namespaced_event": "list"}
    used = {("", "pods", v) for m, v in verbs.items() if re.search(rf"\.{m}\b", code) and "pod" in m}
    used.add(("", "pods", "watch"))  # the informer watches through list_namespaced_pod
    if "list_namespaced_custom_object" in code:
        used.add(("metrics.k8s.io", "pods", "list"))
    assert granted == used
    # the one cluster-wide read is the node watch (k8s/nodes.py), granted apart by an opt-in
    # read-only ClusterRole; nothing else reads nodes, events or secrets
    others = "".join(p.read_text() for p in (ROOT / "k8s").glob("*.py") if p.name != "nodes.py")
    assert not re.search(r"\.(list|read)_node\b|_namespaced_event\b|_secret\b", others), "cluster-wide or other reads"
    nodes_code = (ROOT / "k8s/nodes.py").read_text()
    assert re.search(r"\.list_node\b", nodes_code) and not re.search(r"\.(read|patch|delete)_node\b", nodes_code)
    reader = list(yaml.safe_load_all((ROOT / "k8s/manifests/examples/node-reader.yaml").read_text()))
    (cluster_role,) = [d for d in reader if d["kind"] == "ClusterRole"]
    assert {(g, r, v) for rule in cluster_role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]} == {("", "nodes", "list"), ("", "nodes", "watch")}


# -- pods that can never start ------------------------------------------------------------

def _end(r) -> tuple[str, list[str]]:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    return (lines[-1] if lines else ""), lines


@pytest.mark.slow
def test_a_shape_larger_than_any_node_ends_the_run_in_one_line(cluster, core, tmp_path):
    wf = sleepy(tmp_path, 3, 1)
    t0 = time.time()
    # (whole nodes: HTA's learned pods are cut to the tasks' 1 core, which any node holds)
    r = run_hta(*k8s_args(cluster["kubeconfig"], "--max-workers", "3"), "--worker-cores", "8",
                "--policy", "hta:worker_shape=node", "Makeflow", cwd=wf, timeout=150,
                env={"HTA_K8S_START_TIMEOUT_S": "15"})
    took = time.time() - t0
    last, lines = _end(r)
    assert r.returncode == 1, r.stderr[-3000:]
    assert last.startswith("hta: error: worker pods cannot be scheduled") \
        and ("Insufficient cpu" in last or "no nodes available" in last) \
        and "--worker-cores" in last, last
    told = [x for x in lines if x.startswith("hta: warning:") and "cannot be scheduled" in x]
    assert len(told) == 1, lines
    assert "Traceback" not in r.stderr and took < 120
    recs = records(wf / "Makeflow.scaling.jsonl")
    asked = [x for x in recs if x.get("kind") == "worker" and x["event"] == "requested"]
    assert 1 <= len(asked) <= 3, "no more pods of a shape that cannot be scheduled"
    assert wait(lambda: not hta_pods(core), 10), "no pod left behind"
    assert not cctools_processes(str(wf))


@pytest.mark.slow
def test_workers_that_cannot_reach_the_master_end_the_run_in_one_line(cluster, core, tmp_path):
    wf = sleepy(tmp_path, 2, 1)
    r = run_hta(*k8s_args(cluster["kubeconfig"], "--max-workers", "2"), "--master-host", "192.0.2.1",
                "Makeflow", cwd=wf, timeout=150, env={"HTA_K8S_START_TIMEOUT_S": "15"})
    last, lines = _end(r)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "no worker reached the master at 192.0.2.1" in last and "--master-host" in last, last
    assert "Traceback" not in r.stderr
    assert wait(lambda: not hta_pods(core), 10), "no pod left behind"


# -- a node that disappears with its pods ------------------------------------------------

@pytest.mark.slow
def test_a_node_that_vanishes_loses_its_workers_at_once_and_they_are_replaced(cluster, core, tmp_path):
    wf = sleepy(tmp_path, 4, 20)
    p = subprocess.Popen([*HTA, *k8s_args(cluster["kubeconfig"], "--max-workers", "2"), str(wf / "Makeflow")], cwd=wf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = wf / "Makeflow.scaling.jsonl"
    try:
        def connected() -> list[dict]:
            return [x for x in records(log) if x.get("kind") == "worker" and x["event"] == "connected"]
        assert wait(lambda: any(x.get("kind") == "observation" and x["running"] > 0 for x in records(log)), 120)
        # (the master may report a task running a step before the backend names its worker)
        assert wait(connected, 60), records(log)[-5:]
        victim = connected()[0]["worker"]
        pod = core.read_namespaced_pod(victim, "default")
        node = pod.spec.node_name
        # each pod's /tmp is its own (as a container's): the worker's folder is in it, not the host's
        pod_tmp = Path(cluster["env"]["HTA_TESTCLUSTER_DIR"]) / "pod-tmp"
        assert list((pod_tmp / pod.metadata.uid).glob("hta-worker-*")), sorted(pod_tmp.glob("*/*"))
        # the machine goes away: its node object and every process of its pods
        core.delete_node(node)
        on_node = [x.metadata.name for x in hta_pods(core) if x.spec.node_name == node]
        for name in on_node:
            for proc in pod_processes(name):
                try:
                    proc.kill()
                except psutil.Error:
                    pass
        gone_at = time.time()
        lost = wait(lambda: [x for x in records(log) if x.get("kind") == "worker" and x["worker"] in on_node
                             and x["event"] in ("lost", "failed")], 60, 0.2)
        noticed = time.time() - gone_at
        assert lost and noticed < 15, f"the lost workers were noticed after {noticed:.0f}s"
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-3000:]
    assert all((wf / f"s{i}.txt").exists() for i in range(4)), (sorted(x.name for x in wf.iterdir()), err[-3000:])
    recs = records(log)
    assert sum(x.get("tasks_lost", 0) for x in recs if x.get("kind") == "worker") >= 1, \
        [(x["worker"], x["event"], x["t"], x.get("reason")) for x in recs if x.get("kind") == "worker"] + [on_node, victim]
    assert wait(lambda: not hta_pods(core), 10), "no pod left behind"
    # the killed workers could not remove their folders: each went with its pod's /tmp
    assert wait(lambda: not any(pod_tmp.iterdir()), 10), sorted(pod_tmp.glob("*/*"))


# -- last: the API server outage (the cluster's controllers take a while to recover) --------

# It stays last: the cluster's own controllers (scheduler, kwok, the provisioner) back off for a while
# after an outage (a test after it failed in CI, its pod not Running within 60 s); nothing after it may
# depend on the cluster.
def test_informer_sees_pods_within_seconds_of_the_api_server_coming_back(cluster, core):
    from k8s.informer import PodInformer

    inf = PodInformer(core, "default", "hta.io/run=outage")
    inf.start()
    try:
        assert inf.synced.wait(10)
        # the API server crashes and stays away 20 s: long enough for a growing backoff to reach 15 s
        subprocess.run([CLUSTER, "apiserver", "restart", "--down-for", "20"], env=cluster["env"], check=True,
                       capture_output=True, timeout=120)
        back = time.time()
        core.create_namespaced_pod("default", probe_pod("outage-1", "outage"))
        seen = wait(lambda: "outage-1" in inf.snapshot(), 20, 0.05)
        took = time.time() - back
        assert seen and took < 3.0, f"the informer saw a new pod {took:.1f}s after the API server came back"
        assert inf.relists >= 2, "it relisted after the outage"
    finally:
        inf.stop()
