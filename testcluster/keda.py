"""Real KEDA in the test cluster: its operator, built from ``github.com/kedacore/keda/v2``
(``testcluster/build.sh``), and the ScaledJob a user would deploy beside a Work Queue
master.

The operator runs unchanged, outside the cluster as the control plane does: it polls each
ScaledJob's trigger and creates Jobs (``cluster up --keda``). The ScaledJob is the rival
"as a user would deploy it" (KEDA's docs, "Scaling Jobs" and the ``metrics-api`` scaler):

- its trigger is the ``metrics-api`` scaler reading the master's own ``/queue_status``
  (a Work Queue master answers HTTP GET on its port with a JSON array of one object:
  ``valueLocation: 0.tasks_waiting``), so no exporter sits between them;
- each Job runs one pod of the same worker as HTA's (the worker image, ``hta worker``),
  which leaves after ``tasks_per_job`` tasks (``hta worker --tasks N``); KEDA's default
  scaling strategy starts ``ceil(waiting / targetValue)`` Jobs less those running, up to
  ``maxReplicaCount``, every ``pollingInterval``;
- its pods carry ``hta.io/rival``, which the test cluster's pod runner runs as it runs
  HTA's (``hta.io/run``).

The metrics gRPC service the operator starts (for KEDA's metrics adapter, which a
ScaledJob does not need) is given the cluster's own CA and serving certificate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

CACHE = Path(os.environ.get("HTA_K8S_CACHE", "/var/cache/hta-k8s"))
VERSION = "2.16.1"  # (the same as testcluster/build.sh builds)
MODULE = CACHE / "gomodcache" / "github.com" / "kedacore" / "keda" / f"v2@v{VERSION}"
BINARY = CACHE / "bin" / "keda-operator"
CRDS = tuple(MODULE / "config" / "crd" / "bases" / name for name in (
    "keda.sh_scaledjobs.yaml", "keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml",
    "keda.sh_clustertriggerauthentications.yaml", "eventing.keda.sh_cloudeventsources.yaml",
    "eventing.keda.sh_clustercloudeventsources.yaml"))
#: the label the pod runner runs a rival's pods by (its value names the rival)
RIVAL_LABEL = "hta.io/rival"


def install(kubeconfig: Path, state: Path, start: Callable[[str, list[str], dict], None],
            ports: tuple[int, int, int]) -> None:
    """KEDA's CRDs and its operator (``start(name, argv, env)``)."""
    from kubernetes import client, config

    from testcluster.karpenter import wait_established

    api = config.new_client_from_config(str(kubeconfig))
    ext = client.ApiextensionsV1Api(api)
    for path in CRDS:
        ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
    for path in CRDS:
        wait_established(ext, yaml.safe_load(path.read_text())["metadata"]["name"])
    certs = state / "keda-certs"
    certs.mkdir()
    pki = state / "pki"
    for src, dst in (("ca.crt", "ca.crt"), ("apiserver.crt", "tls.crt"), ("apiserver.key", "tls.key")):
        shutil.copy(pki / src, certs / dst)
    metrics, health, grpc = ports
    start("keda-operator", [str(BINARY), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                            f"--metrics-bind-address=127.0.0.1:{metrics}",
                            f"--health-probe-bind-address=127.0.0.1:{health}",
                            f"--metrics-service-bind-address=127.0.0.1:{grpc}", f"--cert-dir={certs}",
                            "--enable-cert-rotation=false", "--zap-log-level=info",
                            "--zap-time-encoding=rfc3339nano"],
          {"WATCH_NAMESPACE": "", "POD_NAMESPACE": "kube-system", "KEDA_CLUSTER_OBJECT_NAMESPACE": "kube-system",
           "KEDA_HTTP_DEFAULT_TIMEOUT": "3000"})


def scaled_job(name: str, master: str, *, tasks_per_job: int, cores: float, memory_mb: int, image: str,
               command: list[str], polling_s: int = 5, max_replicas: int = 20, target_waiting: int = 1,
               strategy: str = "accurate", namespace: str = "default") -> dict:
    """The ScaledJob: one Job per ``target_waiting`` waiting tasks, each a pod of ``hta
    worker`` (``command``: :func:`hta.node.worker.worker_command`'s, ``--tasks`` appended) of ``cores`` and
    ``memory_mb``, requests = limits as HTA's. Finished Jobs are kept as KEDA keeps them by
    default (``successfulJobsHistoryLimit`` 100): each one beyond is deleted inside KEDA's
    scale loop, one API call each, which holds the loop (a smaller limit costs KEDA more
    polls; their finished pods hold no node). ``accurate``: the
    trigger counts waiting tasks only, not those running, for which KEDA's docs ("Scaling
    Jobs", scalingStrategy) recommend it over ``default``."""
    qty = {"cpu": f"{round(cores * 1000)}m", "memory": f"{memory_mb}Mi"}
    pod = {"metadata": {"labels": {RIVAL_LABEL: name, "app.kubernetes.io/name": "hta-worker"}},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "hostNetwork": True,
                    "enableServiceLinks": False, "automountServiceAccountToken": False,
                    "containers": [{"name": "worker", "image": image, "imagePullPolicy": "IfNotPresent",
                                    "command": command[:1],
                                    "args": [*command[1:], f"--tasks={tasks_per_job}"],
                                    "resources": {"requests": qty, "limits": qty},
                                    "env": [{"name": "HTA_POD_NAME", "valueFrom": {
                                        "fieldRef": {"fieldPath": "metadata.name"}}}]}]}}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"jobTargetRef": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": pod},
                     "pollingInterval": polling_s, "maxReplicaCount": max_replicas,
                     "scalingStrategy": {"strategy": strategy},
                     "triggers": [{"type": "metrics-api", "metadata": {
                         "url": f"http://{master}/queue_status", "valueLocation": "0.tasks_waiting",
                         "format": "json", "targetValue": str(target_waiting),
                         "activationTargetValue": "0"}}]}}
