"""Real Karpenter in the test cluster: its kwok cloud provider, built from
``sigs.k8s.io/karpenter`` (``testcluster/build.sh``), as the node autoscaler.

Karpenter's own controllers run unchanged: they see unschedulable pods, create a
NodeClaim of the cheapest instance type that fits, and the kwok provider turns it
into a Node object after the KWOKNodeClass's ``nodeRegistrationDelay`` (the node
preparation latency). The cluster's kwok, which manages every node annotated
``kwok.x-k8s.io/node=fake``, makes it Ready, as it does the stand-in's nodes; a pod
bound to it is run by the pod runner like any other. With ``consolidationPolicy:
WhenEmpty`` Karpenter deletes a node ``consolidateAfter`` after its last pod left.

One instance type is offered, sized like the thesis's nodes: 4 vCPU of which 3 are
allocatable (capacity 3.1 cores; the kwok provider reserves 100m for the kubelet),
16 GiB, one on-demand offering. The NodePool caps the nodes by their cores
(``limits.cpu``), as a user caps a NodePool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import yaml

CACHE = Path(os.environ.get("HTA_K8S_CACHE", "/var/cache/hta-k8s"))
VERSION = "1.6.4"  # (the same as testcluster/build.sh builds)
MODULE = CACHE / "gomodcache" / "sigs.k8s.io" / f"karpenter@v{VERSION}"
BINARY = CACHE / "bin" / "karpenter-kwok"
#: the CRDs Karpenter needs: its NodePool and NodeClaim, and the kwok provider's node class
CRDS = (MODULE / "pkg" / "apis" / "crds" / "karpenter.sh_nodepools.yaml",
        MODULE / "pkg" / "apis" / "crds" / "karpenter.sh_nodeclaims.yaml",
        MODULE / "kwok" / "apis" / "crds" / "karpenter.kwok.sh_kwoknodeclasses.yaml")
INSTANCE_TYPE = "hta-4vcpu"
#: the kwok provider's fixed kube-reserved CPU (kwok/cloudprovider/helpers.go)
RESERVED_CPU = 0.1


def instance_types(node_cores: float, node_memory_mib: int) -> list[dict]:
    """The one instance type, in the kwok provider's file format, whose allocatable CPU is
    ``node_cores``."""
    req = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]
    return [{"name": INSTANCE_TYPE, "offerings": [{"Price": 0.2, "Available": True, "Requirements": req}],
             "architecture": "amd64", "operatingSystems": ["linux"],
             "resources": {"cpu": f"{round((node_cores + RESERVED_CPU) * 1000)}m",
                           "memory": f"{node_memory_mib}Mi", "ephemeral-storage": "100Gi", "pods": "110"}}]


def node_class(registration_delay_s: float) -> dict:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"},
            "spec": {"nodeRegistrationDelay": f"{max(0, round(registration_delay_s))}s"}}


def node_pool(max_nodes: int, node_cores: float, consolidate_after_s: float) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                  "values": [INSTANCE_TYPE]}],
                "expireAfter": "Never"}},
                # (every empty node may go at once: the default budget, 10 % of the nodes, would
                # hold back all but one of the empty nodes a workflow's end leaves)
                "disruption": {"consolidationPolicy": "WhenEmpty",
                               "consolidateAfter": f"{max(0, round(consolidate_after_s))}s",
                               "budgets": [{"nodes": "100%"}]},
                "limits": {"cpu": f"{round(max_nodes * (node_cores + RESERVED_CPU) * 1000)}m"}}}


def install(kubeconfig: Path, state: Path, start: Callable[[str, list[str], dict], None], *, max_nodes: int,
            node_cores: float, node_memory_mib: int, registration_delay_s: float, consolidate_after_s: float,
            ports: tuple[int, int]) -> None:
    """The CRDs, the node class and pool, and the Karpenter process (``start(name, argv, env)``)."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig))
    ext = client.ApiextensionsV1Api(api)
    for path in CRDS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                ext.create_custom_resource_definition(doc)
    for path in CRDS:  # established before objects of them are made
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        wait_established(ext, name)
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses",
                                        node_class(registration_delay_s))
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools",
                                        node_pool(max_nodes, node_cores, consolidate_after_s))
    types = state / "karpenter-instance-types.json"
    types.write_text(json.dumps(instance_types(node_cores, node_memory_mib)))
    metrics, health = ports
    start("karpenter", [str(BINARY)], {
        "KUBECONFIG": str(kubeconfig), "SYSTEM_NAMESPACE": "kube-system", "DISABLE_LEADER_ELECTION": "true",
        "INSTANCE_TYPES_FILE_PATH": str(types), "METRICS_PORT": str(metrics), "HEALTH_PROBE_PORT": str(health),
        "LOG_LEVEL": "info", "KUBERNETES_MIN_VERSION": "1.19.0-0", "FEATURE_GATES": "NodeRepair=false",
        # a batch closes 1 s after the last pending pod (Karpenter's default), at most 10 s after the first
        "BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "10s"})


def wait_established(ext, name: str, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        crd = ext.read_custom_resource_definition(name)
        if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
            return
        time.sleep(0.2)
    raise RuntimeError(f"CRD {name} not established within {timeout_s:g}s")
