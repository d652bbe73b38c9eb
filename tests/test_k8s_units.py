"""The worker pod template and the API retry rules (no cluster needed)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from hta.backends.pool import Worker, WorkerState
from hta.backends.provider import run_id_for
from hta.model import Resources
from hta.node.worker import CONNECT_TIMEOUT_S, worker_command
from k8s.api import K8sError, call, load_client
from k8s.pods import worker_pod


def test_worker_pod_template(monkeypatch):
    monkeypatch.setenv("HTA_POD_NAME", "hta-0")
    monkeypatch.setenv("HTA_POD_UID", "1234")
    shape = Resources(cores=3, memory_mb=12000, disk_mb=50000)
    cmd = worker_command("10.0.0.5:9123", disk_mb=50000, idle_timeout_s=300)
    pod = worker_pod("hta-abc-1", "abc", shape, "img:1", cmd, host_network=True)
    c = pod.spec.containers[0]
    assert pod.metadata.labels["hta.io/run"] == "abc"
    assert pod.spec.restart_policy == "Never" and pod.spec.termination_grace_period_seconds == 5
    assert pod.spec.host_network is True
    assert c.resources.requests == c.resources.limits == {"cpu": "3000m", "memory": "12000Mi"}
    assert [c.command[0], *c.args] == cmd and cmd[:2] == ["hta", "worker"] and "--master=10.0.0.5:9123" in cmd
    # cores and memory come from the pod's cgroup (its limits), not from flags
    assert not [a for a in cmd if a.startswith(("--cores", "--memory"))] and "--disk=50000" in cmd
    assert f"--connect-timeout={CONNECT_TIMEOUT_S}" in cmd
    (owner,) = pod.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("Pod", "hta-0", "1234")
    # it prefers (never requires) a node where the run has a worker already: workers pack
    (term,) = pod.spec.affinity.pod_affinity.preferred_during_scheduling_ignored_during_execution
    assert term.pod_affinity_term.label_selector.match_labels == {"hta.io/run": "abc"}
    assert term.pod_affinity_term.topology_key == "kubernetes.io/hostname"
    assert pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution is None


def test_run_id_is_stable_per_workflow(tmp_path):
    a = run_id_for(tmp_path / "x" / "Makeflow")
    assert a == run_id_for(tmp_path / "x" / "Makeflow") and a != run_id_for(tmp_path / "y" / "Makeflow")


class Flaky:
    """A stand-in for a client method (a test double, named so): fails with the given statuses first."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.statuses:
            raise ApiException(status=self.statuses.pop(0), reason="boom")
        return "ok"


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried(monkeypatch, status):
    monkeypatch.setattr("k8s.api.time.sleep", lambda s: None)
    f = Flaky(status, status)
    assert call(f, what="create pod") == "ok" and f.calls == 3


@pytest.mark.parametrize("status,text", [(403, "kubectl apply -k k8s/manifests"), (409, "409"), (422, "422")])
def test_permanent_errors_are_reported_with_their_cause(monkeypatch, status, text):
    monkeypatch.setattr("k8s.api.time.sleep", lambda s: None)
    f = Flaky(status)
    with pytest.raises(K8sError, match="create pod") as e:
        call(f, what="create pod")
    assert text in str(e.value) and f.calls == 1


def test_missing_kubeconfig_is_one_line(tmp_path):
    with pytest.raises(K8sError) as e:
        load_client(str(tmp_path / "nope"))
    assert "not found" in str(e.value) and "\n" not in str(e.value)


# -- one API error must not freeze or end the control loop --------------------


def _api_at(port: int) -> k8s_client.CoreV1Api:
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    return k8s_client.CoreV1Api(k8s_client.ApiClient(cfg))


class Silent:
    """A TCP server that accepts connections and never answers (a hung API server; a real socket)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connection refused
    return port


@pytest.mark.parametrize("server", ["hung", "refused"])
def test_a_failing_api_call_gives_up_within_a_step_and_never_blocks_the_loop(server):
    """A create and a delete against an API server that does not answer (or refuses) give up
    within the step's budget with one line, while the event loop keeps running (the controller
    keeps observing; its next step retries)."""
    silent = Silent() if server == "hung" else None
    port = silent.port if silent else _refused_port()
    budget = 2.0  # (the default, STEP_BUDGET_S, is 5 s: the same path, sooner)
    b = _pool(api_budget_s=budget)
    b.provider.api = _api_at(port)

    async def scenario():
        ticks = []

        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.1)

        tick = asyncio.create_task(ticker())
        t0 = time.monotonic()
        with pytest.raises(K8sError) as e:
            await asyncio.wait_for(b.request(3, Resources(cores=1, memory_mb=512, disk_mb=512), 0.0), 30)
        took = time.monotonic() - t0
        t1 = time.monotonic()
        b.workers["hta-unit-9"] = Worker("hta-unit-9", Resources(cores=1), 0.0, state=WorkerState.CONNECTED,
                                         address="1.2.3.4:5")
        with pytest.raises(RuntimeError, match="delete pod hta-unit-9"):
            await asyncio.wait_for(b.remove(["hta-unit-9"], _empty_snapshot(), 0.0), 30)
        took_delete = time.monotonic() - t1
        tick.cancel()
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        return e.value, took, took_delete, max(gaps)

    try:
        err, took, took_delete, gap = asyncio.run(scenario())
    finally:
        if silent:
            silent.close()
    assert took < budget + 2.0 and took_delete < budget + 2.0, (took, took_delete)
    assert gap < 1.0, f"the event loop was blocked for {gap:.1f}s"
    assert "create pod" in str(err) and "\n" not in str(err)
    assert b.workers["hta-unit-9"].state is WorkerState.CONNECTED, "a pod whose delete failed is tried again later"


def _pool(**options):
    from hta.backends.pool import WorkerPool
    from k8s.backend import KubernetesProvider

    provider = KubernetesProvider(run_id="unit", **options)
    provider.master = "127.0.0.1:9123"
    return WorkerPool(provider, epoch=time.time())


def _empty_snapshot():
    from workqueue_bridge.snapshot import MasterSnapshot
    from workqueue_bridge.status_json import QueueStatus

    return MasterSnapshot(taken_at=time.time(), queue=QueueStatus(), tasks=[], workers=[])


def test_stop_all_with_the_api_server_gone_is_one_line_not_an_exception(caplog):
    b = _pool(delete_timeout_s=3.0)
    b.provider.api = _api_at(_refused_port())
    t0 = time.monotonic()
    assert asyncio.run(b.stop_all(0.0)) == []
    assert time.monotonic() - t0 < 30
    assert any("kubectl delete pods" in r.getMessage() and "hta.io/run=unit" in r.getMessage()
               for r in caplog.records)


def test_phases_add_up_to_the_latency_whatever_the_clocks_say():
    """Times the watch saw late come from the pod's status in whole seconds (so a little
    early), and a watch that saw Running late reads it after the worker connected: the
    phases are kept in order (requested ≤ scheduled ≤ running ≤ connected) and add up."""
    from k8s.backend import pod_phases
    from k8s.informer import PodState

    truncated = PodState(name="hta-u-1", uid="x", scheduled_at=1010.0, running_at=1011.0)  # 10.95 and 11.75
    phases = pod_phases(truncated, 1010.9, 1011.86)
    assert phases["node"] == 0 and phases["start"] + phases["connect"] == pytest.approx(11.86 - 10.9)
    seen_late = PodState(name="hta-u-1", uid="x", scheduled_at=1011.0, running_at=1013.0)  # Running seen at 13 s
    phases = pod_phases(seen_late, 1010.9, 1012.0)
    assert phases["connect"] == 0 and phases["node"] + phases["start"] == pytest.approx(12.0 - 10.9)


def test_creates_failing_with_no_worker_connected_end_the_run_after_the_start_timeout():
    """The API server gone (or the namespace deleted, the Role revoked) while no worker is
    connected: every create fails, and the run waited for ever, quiet. After the start
    timeout, ``fatal`` names it (the run ends with that line); a create that works, or a
    connected worker, keeps it going."""
    b = _pool(api_budget_s=1.0, start_timeout_s=2.0)
    b.provider.api = _api_at(_refused_port())
    shape = Resources(cores=1, memory_mb=512, disk_mb=512)
    with pytest.raises(K8sError, match="cannot reach the API server at 127.0.0.1"):
        asyncio.run(b.request(2, shape, 0.0))
    asyncio.run(b.refresh(_empty_snapshot(), 0.0))
    assert b.fatal is None  # not yet: a blip of the API server is no reason to end a run
    b._launch_failing_since -= 3.0  # (as if the creates had failed since 3 s ago)
    b.workers["hta-unit-7"] = Worker("hta-unit-7", shape, 0.0, state=WorkerState.CONNECTED, address="1.2.3.4:5")
    b._check_blocked(time.time())
    assert b.fatal is None  # a connected worker runs tasks meanwhile
    b.workers["hta-unit-7"].state = WorkerState.GONE
    b._check_blocked(time.time())
    assert b.fatal and b.fatal.startswith("no worker pod could be created for 3s and no worker is connected; "
                                          "the last error: create pod hta-unit-"), b.fatal
    assert "cannot reach the API server at 127.0.0.1" in b.fatal and "\n" not in b.fatal


def test_an_unreachable_api_server_is_named_in_a_few_words():
    # it printed urllib3's HTTPSConnectionPool(...): Max retries exceeded with url: ... (Caused by ...)
    with pytest.raises(K8sError) as e:
        call(_api_at(_refused_port()).list_namespaced_pod, "default", attempts=1, what="list pods")
    assert str(e.value).startswith("list pods: cannot reach the API server at 127.0.0.1:") \
        and str(e.value).endswith("(Connection refused): is the cluster up? check the server in the kubeconfig")


def test_a_kubeconfig_that_is_a_folder_or_missing_is_named_wherever_it_came_from(tmp_path, monkeypatch):
    with pytest.raises(K8sError, match=r"kubeconfig '.*' \(--kubeconfig\) is a folder: pass --kubeconfig FILE"):
        load_client(str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone"))  # (it said: invalid kubeconfig … No configuration)
    with pytest.raises(K8sError, match=r"\(\$KUBECONFIG\) not found: pass --kubeconfig FILE"):
        load_client()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path))
    with pytest.raises(K8sError, match=r"\(\$KUBECONFIG\) is a folder"):
        load_client()
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(K8sError, match=r"\.kube/config' \(the default; KUBECONFIG is not set\) not found"):
        load_client()
    (tmp_path / "bad").write_text("junk: [\n")
    with pytest.raises(K8sError, match=r"invalid kubeconfig .*bad: ParserError.*\(pass --kubeconfig FILE, or set"):
        load_client(str(tmp_path / "bad"))


@pytest.mark.parametrize("namespace", ["", "Bad_NS", "-x", "a" * 64])
def test_a_namespace_kubernetes_would_refuse_is_refused_before_anything_starts(namespace):
    from pydantic import ValidationError

    from hta.backends import BackendOptions

    with pytest.raises(ValidationError, match="not a Kubernetes namespace name: lowercase letters, digits and '-'"):
        BackendOptions(namespace=namespace)
    assert BackendOptions(namespace="batch-2").namespace == "batch-2"


def test_the_node_hold_is_from_the_run_s_last_pod_on_a_node_to_the_node_s_deletion():
    from k8s.informer import PodState
    from k8s.nodes import node_holds, typical_hold

    def pod(name, node, at, gone_at=None, phase="Running"):
        return PodState(name, name, phase=phase, node=node, scheduled_at=at, gone=gone_at is not None,
                        gone_at=gone_at)

    pods = {p.name: p for p in [
        pod("a", "n1", 10.0, 100.0), pod("b", "n1", 20.0, 130.0),   # n1's last pod went at 130
        pod("c", "n2", 10.0, 200.0),
        pod("d", "n3", 10.0),                                        # still on n3
        pod("e", None, 10.0, 50.0),                                  # never bound
        pod("f", "n4", 10.0, phase="Succeeded"),                     # ended, never deleted: no end time
        pod("g", "n1", 900.0, 950.0)]}                               # on a new node named n1
    went = [("n1", 0.0, 135.0), ("n2", 0.0, 800.0), ("n3", 0.0, 900.0), ("other", 0.0, 10.0), ("n4", 0.0, 60.0),
            ("n1", 850.0, 1000.0)]
    # n3 was not empty; "other" and n4 tell no end; n1 came back under its name and went again
    assert node_holds(pods, went) == [5.0, 600.0, 50.0]
    assert typical_hold([5.0, 600.0, 7.0]) == 7.0 and typical_hold([]) is None
