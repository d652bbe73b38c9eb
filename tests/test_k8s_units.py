"""The worker pod template and the API retry rules (no cluster needed)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from hta.model import Resources
from k8s.api import K8sError, call, load_client
from hta.node.worker import CONNECT_TIMEOUT_S, worker_command
from k8s.pods import run_id_for, worker_pod


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
