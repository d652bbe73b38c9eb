"""The worker pod template.

One container running the worker with the shape HTA chose (requests =
limits, so the pod is Guaranteed and the worker's advertised capacity is what
the node reserves), labels naming the HTA run, ``restartPolicy: Never`` (a
finished worker is replaced only if the policy still wants one), a short
termination grace period, and an owner reference to HTA's own pod when HTA
runs in the cluster (so deleting HTA deletes its workers).

Workers pack: each prefers a node where the run already has a worker (a preferred
inter-pod affinity on ``kubernetes.io/hostname``), where the default scheduler's
``NodeResourcesFit`` scores the least allocated node highest and so spreads them. A node
holds the run's workers together, so a drain that empties it gives the node autoscaler a
node to take back (C-Balancer's objective, counted in node·s). Kubernetes' docs ("Assigning
Pods to Nodes", inter-pod affinity) warn that it costs the scheduler real work in clusters
of several hundred nodes; it is preferred, never required, so a pod that cannot pack still
starts.
"""

from __future__ import annotations

import os

from kubernetes import client

from hta.model import Resources

RUN_LABEL = "hta.io/run"
#: what k8s/image/build.sh builds; with a registry, pass --image REGISTRY/hta-worker:TAG
DEFAULT_IMAGE = "localhost/hta-worker:latest"


def owner_reference() -> list[client.V1OwnerReference] | None:
    """HTA's own pod, when HTA runs in one (downward API: HTA_POD_NAME, HTA_POD_UID)."""
    name, uid = os.environ.get("HTA_POD_NAME"), os.environ.get("HTA_POD_UID")
    if not (name and uid):
        return None
    return [client.V1OwnerReference(api_version="v1", kind="Pod", name=name, uid=uid, controller=False,
                                    block_owner_deletion=False)]


#: how much a node with the run's workers on it counts in the scheduler's score (1–100)
PACK_WEIGHT = 100


def packing(run_id: str) -> client.V1Affinity:
    """Prefer a node that runs one of this run's workers already."""
    return client.V1Affinity(pod_affinity=client.V1PodAffinity(
        preferred_during_scheduling_ignored_during_execution=[client.V1WeightedPodAffinityTerm(
            weight=PACK_WEIGHT, pod_affinity_term=client.V1PodAffinityTerm(
                label_selector=client.V1LabelSelector(match_labels={RUN_LABEL: run_id}),
                topology_key="kubernetes.io/hostname"))]))


def worker_pod(name: str, run_id: str, shape: Resources, image: str, command: list[str],
               host_network: bool = False, grace_s: int = 5) -> client.V1Pod:
    qty = {"cpu": f"{int(shape.cores * 1000)}m", "memory": f"{int(shape.memory_mb)}Mi"}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={RUN_LABEL: run_id, "app.kubernetes.io/name": "hta-worker",
                    "app.kubernetes.io/managed-by": "hta"},
            owner_references=owner_reference(),
        ),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=grace_s,
            host_network=host_network,
            enable_service_links=False,
            automount_service_account_token=False,
            affinity=packing(run_id),
            containers=[client.V1Container(
                name="worker",
                image=image,
                image_pull_policy="IfNotPresent",
                command=command[:1],
                args=command[1:],
                resources=client.V1ResourceRequirements(requests=qty, limits=qty),
                env=[client.V1EnvVar(name="HTA_POD_NAME", value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")))],
            )],
        ),
    )
