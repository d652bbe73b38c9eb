"""A FAKE metrics.k8s.io server (a test stand-in for metrics-server).

kwok pods use no CPU, so this serves the usage a test scripts: every Running pod
the kube-apiserver lists (in the namespace and with the label selector asked for)
is reported as using ``cpu[namespace]`` (a quantity such as ``"3000m"``; pods of a
namespace not set use ``"0m"``), 10 MiB of memory, measured now over a 1 s
window. Nodes are reported as an empty list.

It speaks HTTPS with a throwaway self-signed certificate (the APIService that
routes ``metrics.k8s.io`` here is registered with ``insecureSkipTLSVerify``) and
ignores who asks: the kube-apiserver's aggregation layer proxies to it.

In a test, run it in-process::

    fake = FakeMetricsServer(core_v1_api, host, port=0)
    fake.start(); fake.cpu["ns"] = "3000m"; ...; fake.stop()

``register(api, apireg, ...)`` adds the Service, Endpoints and APIService that make
the kube-apiserver send ``/apis/metrics.k8s.io/v1beta1`` here.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from kubernetes import client

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
GV = f"{GROUP}/{VERSION}"


def host_ip() -> str:
    """This host's first non-loopback IPv4 address (Endpoints refuse loopback IPs)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    for a in out:
        if "." in a and not a.startswith("127."):
            return a
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the address of the default route
        s.connect(("192.0.2.1", 9))
        return s.getsockname()[0]


def self_signed(d: Path, ip: str) -> tuple[Path, Path]:
    crt, key = d / "fake-metrics.crt", d / "fake-metrics.key"
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-newkey", "rsa:2048", "-keyout", str(key), "-out",
                    str(crt), "-days", "2", "-subj", "/CN=fake-metrics", "-addext", f"subjectAltName=IP:{ip}"],
                   check=True, capture_output=True)
    return crt, key


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeMetricsServer:
    """The fake, on ``host:port`` (port 0: a free one, in ``.port`` after ``start``)."""

    def __init__(self, core: client.CoreV1Api, host: str, port: int = 0):
        self.core = core
        self.host = host
        self.port = port
        self.cpu: dict[str, str] = {}  # namespace -> usage of each of its pods, e.g. "3000m"
        self.requests = 0  # pod metrics lists served
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-metrics-")

    # -- handlers ---------------------------------------------------------------------------
    async def resources(self, _: web.Request) -> web.Response:
        res = [{"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": ["get", "list"]}
               for n, ns, k in (("nodes", False, "NodeMetrics"), ("pods", True, "PodMetrics"))]
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GV,
                                  "resources": res})

    def _pod_items(self, namespace: str | None, selector: str | None, name: str | None = None) -> list[dict]:
        if namespace is None:
            pods = self.core.list_pod_for_all_namespaces(label_selector=selector or "").items
        else:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector or "").items
        ts = now_rfc3339()
        out = []
        for p in pods:
            if p.status.phase != "Running" or (name and p.metadata.name != name):
                continue
            cpu = self.cpu.get(p.metadata.namespace, "0m")
            out.append({"metadata": {"name": p.metadata.name, "namespace": p.metadata.namespace,
                                     "labels": p.metadata.labels or {}, "creationTimestamp": ts},
                        "timestamp": ts, "window": "1s",
                        # the pod's usage on its first container, nothing on the others
                        "containers": [{"name": c.name, "usage": {"cpu": cpu if i == 0 else "0m", "memory": "10Mi"}}
                                       for i, c in enumerate(p.spec.containers)]})
        return out

    async def pods(self, req: web.Request) -> web.Response:
        ns = req.match_info.get("ns")
        items = await asyncio.to_thread(self._pod_items, ns, req.query.get("labelSelector"))
        self.requests += 1
        return web.json_response({"kind": "PodMetricsList", "apiVersion": GV, "metadata": {}, "items": items})

    async def pod(self, req: web.Request) -> web.Response:
        items = await asyncio.to_thread(self._pod_items, req.match_info["ns"], None, req.match_info["name"])
        if not items:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                      "code": 404, "message": "podmetrics not found"}, status=404)
        return web.json_response({"kind": "PodMetrics", "apiVersion": GV, **items[0]})

    async def nodes(self, _: web.Request) -> web.Response:
        return web.json_response({"kind": "NodeMetricsList", "apiVersion": GV, "metadata": {}, "items": []})

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        crt, key = self_signed(Path(self._tmp.name), self.host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        app = web.Application()
        base = f"/apis/{GV}"
        app.router.add_get(base, self.resources)
        app.router.add_get(f"{base}/pods", self.pods)
        app.router.add_get(f"{base}/namespaces/{{ns}}/pods", self.pods)
        app.router.add_get(f"{base}/namespaces/{{ns}}/pods/{{name}}", self.pod)
        app.router.add_get(f"{base}/nodes", self.nodes)
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=ctx)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None
        self._tmp.cleanup()


def register(core: client.CoreV1Api, apireg: client.ApiregistrationV1Api, host: str, port: int,
             namespace: str = "kube-system", name: str = "fake-metrics") -> None:
    """Route metrics.k8s.io/v1beta1 to the fake at ``host:port``: a Service without a selector,
    its Endpoints (the host's IP: the kube-apiserver runs with --enable-aggregator-routing)
    and the APIService."""
    core.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(name="https", port=443, target_port=port)])))
    core.create_namespaced_endpoints(namespace, client.V1Endpoints(
        metadata=client.V1ObjectMeta(name=name),
        subsets=[client.V1EndpointSubset(addresses=[client.V1EndpointAddress(ip=host)],
                                         ports=[client.CoreV1EndpointPort(name="https", port=port)])]))
    apireg.create_api_service(client.V1APIService(
        metadata=client.V1ObjectMeta(name=f"{VERSION}.{GROUP}"),
        spec=client.V1APIServiceSpec(group=GROUP, version=VERSION, insecure_skip_tls_verify=True,
                                     group_priority_minimum=100, version_priority=100,
                                     service=client.ApiregistrationV1ServiceReference(
                                         namespace=namespace, name=name, port=443))))


def available(apireg: client.ApiregistrationV1Api) -> bool:
    s = apireg.read_api_service(f"{VERSION}.{GROUP}").status
    return any(c.type == "Available" and c.status == "True" for c in (s.conditions or []) if s)
