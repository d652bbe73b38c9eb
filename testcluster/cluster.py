"""The local Kubernetes test cluster: ``cluster up|down|status``.

A real control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager v1.33.13) on 127.0.0.1 with free ports, kwok for fake
nodes, and two named stand-ins for what cannot run here:

- the **node-provisioner stand-in** for the cluster-autoscaler
  (:mod:`testcluster.provisioner`): adds a kwok node after a jittered
  delay when pods are unschedulable, removes nodes that stayed empty;
- the **pod process runner**, a test fake of the kubelet
  (:mod:`testcluster.pod_runner`): runs a Running pod's container command
  as a local process, so real work_queue_workers connect to a real master.

With ``--real-node`` it adds one real node instead of the fake kubelet
(:mod:`testcluster.real_node`: kubelet + containerd + runc running the
worker image), and ``down`` puts back everything that node changed on the host.

Every process is started in its own session, recorded in ``pids.json`` and
stopped by ``down``, which also removes the state directory. ``up`` prints
``export KUBECONFIG=...`` as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("HTA_K8S_CACHE", "/var/cache/hta-k8s"))
BIN = CACHE / "bin"
STATE = Path(os.environ.get("HTA_TESTCLUSTER_DIR", "/tmp/hta-testcluster"))
TOKEN = "hta-admin-token"
KWOK_STAGES = CACHE / "gomodcache" / "sigs.k8s.io" / "kwok@v0.8.0" / "kustomize" / "stage"
ORDER = ["etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "containerd", "kubelet", "kwok",
         "pod-runner", "node-provisioner", "karpenter", "keda-operator"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str, cmd: list[str], pids: dict, env: dict | None = None) -> None:
    log = open(STATE / "logs" / f"{name}.log", "ab")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env={**os.environ, **(env or {})})
    pids[name] = p.pid
    (STATE / "pids.json").write_text(json.dumps(pids))


def wait_for(what: str, check, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 — not up yet: ask again
            pass
        time.sleep(0.2)
    raise SystemExit(f"cluster: {what} did not become ready within {timeout:.0f}s (logs: {STATE}/logs)")


def pki(api_port: int) -> None:
    d = STATE / "pki"
    d.mkdir(parents=True, exist_ok=True)

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ossl("genrsa", "-out", str(d / "sa.key"), "2048")
    ossl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
    ossl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", str(d / "ca.key"), "-out",
         str(d / "ca.crt"), "-days", "3650", "-subj", "/CN=hta-test-ca")
    ossl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", str(d / "apiserver.key"), "-out",
         str(d / "apiserver.csr"), "-subj", "/CN=kube-apiserver")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    ossl("x509", "-req", "-in", str(d / "apiserver.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
         "-CAcreateserial", "-out", str(d / "apiserver.crt"), "-days", "3650", "-extfile", str(d / "ext.cnf"))
    (d / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    (STATE / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hta-test\n  cluster:\n"
        f"    server: https://127.0.0.1:{api_port}\n    certificate-authority: {d / 'ca.crt'}\n"
        f"users:\n- name: admin\n  user:\n    token: {TOKEN}\n"
        "contexts:\n- name: hta-test\n  context:\n    cluster: hta-test\n    user: admin\n"
        "current-context: hta-test\n")


def stages(pod_delay_ms: int, pod_jitter_ms: int) -> Path:
    """kwok's own stages (from the kwok module), with pods becoming Ready after
    ``pod_delay_ms`` (± jitter): the emulated image pull and container start."""
    parts = ["apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
             "  nodeLeaseDurationSeconds: 40\n  nodeLeaseParallelism: 4\n  nodePlayStageParallelism: 4\n"
             "  podPlayStageParallelism: 8\n  podsOnNodeSyncParallelism: 4\n"]
    for f in ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
              "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml"):
        text = (KWOK_STAGES / f).read_text()
        if f == "pod/fast/pod-ready.yaml" and pod_delay_ms > 0:
            text = re.sub(r"\nspec:\n", "\nspec:\n  delay:\n"
                          f"    durationMilliseconds: {pod_delay_ms}\n"
                          f"    jitterDurationMilliseconds: {pod_delay_ms + pod_jitter_ms}\n", text, count=1)
        parts.append(text)
    out = STATE / "stages.yaml"
    out.write_text("\n---\n".join(parts))
    return out


def https_ok(url: str) -> bool:
    ctx = ssl.create_default_context(cafile=str(STATE / "pki" / "ca.crt"))
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
        return r.status == 200


def already_up() -> bool:
    f = STATE / "pids.json"
    return f.exists() and any(alive(p) for p in json.loads(f.read_text()).values())


def up(args: argparse.Namespace) -> None:
    build = Path(__file__).with_name("build.sh")
    subprocess.run([str(build)], check=True)
    shutil.rmtree(STATE, ignore_errors=True)
    (STATE / "logs").mkdir(parents=True)
    api, etcd_c, etcd_p, kwok_p = free_port(), free_port(), free_port(), free_port()
    pki(api)
    pids: dict[str, int] = {}
    t0 = time.time()
    start("etcd", ["etcd", "--name", "hta", "--data-dir", str(STATE / "etcd"),
                   "--listen-client-urls", f"http://127.0.0.1:{etcd_c}",
                   "--advertise-client-urls", f"http://127.0.0.1:{etcd_c}",
                   "--listen-peer-urls", f"http://127.0.0.1:{etcd_p}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_p}",
                   "--initial-cluster", f"hta=http://127.0.0.1:{etcd_p}", "--unsafe-no-fsync"], pids)
    wait_for("etcd", lambda: urllib.request.urlopen(f"http://127.0.0.1:{etcd_c}/health", timeout=2).status == 200)
    p = STATE / "pki"
    apiserver_cmd = [str(BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_c}",
                             "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api}",
                             f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
                             f"--token-auth-file={p / 'tokens.csv'}", "--authorization-mode=RBAC",
                             "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                             f"--service-account-key-file={p / 'sa.pub'}",
                             f"--service-account-signing-key-file={p / 'sa.key'}",
                             "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
                             "--kubelet-preferred-address-types=InternalIP,Hostname",
                             # no kube-proxy: reach an aggregated API (tests' fake metrics.k8s.io
                             # server, testcluster/fake_metrics.py) at its endpoint IP, not a cluster IP
                             "--enable-aggregator-routing=true"]
    start("kube-apiserver", apiserver_cmd, pids)
    wait_for("kube-apiserver", lambda: https_ok(f"https://127.0.0.1:{api}/readyz"), 90)
    kc = str(STATE / "kubeconfig")
    # retry unschedulable pods at most 1 s after a node appears (default backoff: up to 10 s),
    # so the measured node phase is the provisioning delay, not the scheduler's backoff
    (STATE / "scheduler.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {kc}\nleaderElection:\n  leaderElect: false\n"
        "podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 1\n")
    start("kube-scheduler", [str(BIN / "kube-scheduler"), f"--config={STATE / 'scheduler.yaml'}",
                             "--secure-port=0"], pids)
    start("kube-controller-manager", [str(BIN / "kube-controller-manager"), f"--kubeconfig={kc}",
                                      "--leader-elect=false", "--secure-port=0",
                                      f"--service-account-private-key-file={p / 'sa.key'}",
                                      f"--root-ca-file={p / 'ca.crt'}", "--use-service-account-credentials=false",
                                      "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                                      "--terminated-pod-gc-threshold=100"], pids)
    start("kwok", [str(BIN / "kwok"), f"--kubeconfig={kc}",
                   f"--config={stages(int(args.pod_start_delay * 1000), int(args.pod_start_jitter * 1000))}",
                   "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                   "--cidr=10.0.0.1/24", "--node-ip=127.0.0.1", f"--server-address=127.0.0.1:{kwok_p}"], pids)
    py = sys.executable
    env = {"KUBECONFIG": kc, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if not (args.no_pod_runner or args.real_node):
        start("pod-runner", [py, "-m", "testcluster.pod_runner"], pids, env)
    if args.node_autoscaler == "provisioner":
        start("node-provisioner", [py, "-m", "testcluster.provisioner",
                                   f"--node-cores={args.node_cores}", f"--node-memory={args.node_memory}",
                                   f"--max-nodes={args.max_nodes}", f"--start-nodes={args.start_nodes}",
                                   f"--delay={args.provision_delay}", f"--jitter={args.provision_jitter}",
                                   f"--empty-ttl={args.empty_node_ttl}"], pids, env)
    wait_for("the default service account",
             lambda: https_ok(f"https://127.0.0.1:{api}/api/v1/namespaces/default/serviceaccounts/default"), 90)
    if args.node_autoscaler == "karpenter":
        from testcluster import karpenter

        karpenter.install(Path(kc), STATE, lambda name, cmd, e: start(name, cmd, pids, e),
                          max_nodes=args.max_nodes, node_cores=args.node_cores, node_memory_mib=args.node_memory,
                          registration_delay_s=args.provision_delay, consolidate_after_s=args.empty_node_ttl,
                          ports=(free_port(), free_port()))
    if args.keda:
        from testcluster import keda

        keda.install(Path(kc), STATE, lambda name, cmd, e: start(name, cmd, pids, e),
                     ports=(free_port(), free_port(), free_port()))
    real = {}
    if args.real_node:
        from testcluster import real_node

        real = real_node.bring_up(STATE, Path(kc), BIN / "kubelet", lambda name, cmd: start(name, cmd, pids),
                                   wait_for)
        print(f"real node {real_node.NAME} Ready: images {real['images']:.1f}s, import {real['import']:.1f}s, "
              f"kubelet start → Ready {real['node_ready']:.1f}s", file=sys.stderr)
    (STATE / "config.json").write_text(json.dumps(vars(args) | {"api_port": api, "real_node": real,
                                                                 "apiserver_cmd": apiserver_cmd}, default=str))
    nodes = (f"provisioning {args.provision_delay:g}±{args.provision_jitter:g}s (node-provisioner stand-in)"
             if args.node_autoscaler == "provisioner" else
             f"registering {round(args.provision_delay)}s after their NodeClaim (Karpenter v{karpenter_version()}, "
             f"consolidating nodes empty {round(args.empty_node_ttl)}s)")
    print(f"cluster up in {time.time() - t0:.1f}s: kube-apiserver https://127.0.0.1:{api}, "
          f"kwok nodes {args.node_cores} cores each, at most {args.max_nodes}, {nodes}"
          + (", KEDA's operator" if args.keda else "")
          + (", plus the real node" if args.real_node else ""), file=sys.stderr)
    print(f"export KUBECONFIG={kc}")


def karpenter_version() -> str:
    from testcluster import karpenter

    return karpenter.VERSION


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return (Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]) != "Z"
    except OSError:
        return False


def down(_: argparse.Namespace) -> None:
    f = STATE / "pids.json"
    pids = json.loads(f.read_text()) if f.exists() else {}

    def stop_one(name: str) -> None:
        pid = pids.get(name)
        if pid is None or not alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 15
        while alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)

    for name in ("keda-operator", "karpenter", "node-provisioner", "pod-runner", "kwok"):
        stop_one(name)
    from testcluster import real_node

    left = real_node.teardown(STATE, stop_one)  # no-op without a real node
    for name in reversed(ORDER):
        stop_one(name)
    shutil.rmtree(STATE, ignore_errors=True)
    if left:
        raise SystemExit(f"cluster down, but could not undo: {', '.join(left)}")
    print("cluster down", file=sys.stderr)


def apiserver(args: argparse.Namespace) -> None:
    """Fault injection: ``down`` kills the API server (SIGKILL, as a crash), ``up`` starts it again
    with the same flags and port and waits until it is ready, ``restart`` does both with
    ``--down-for`` seconds between."""
    pids = json.loads((STATE / "pids.json").read_text())
    cfg = json.loads((STATE / "config.json").read_text())
    if args.action in ("down", "restart"):
        pid = pids.get("kube-apiserver")
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
            wait_for("kube-apiserver to stop", lambda: not alive(pid), 15)
        if args.action == "restart":
            time.sleep(args.down_for)
    if args.action in ("up", "restart"):
        if not alive(pids.get("kube-apiserver") or 0):
            start("kube-apiserver", cfg["apiserver_cmd"], pids)
        wait_for("kube-apiserver", lambda: https_ok(f"https://127.0.0.1:{cfg['api_port']}/readyz"), 90)
    print(f"kube-apiserver {args.action}", file=sys.stderr)


def status(_: argparse.Namespace) -> None:
    f = STATE / "pids.json"
    if not f.exists():
        print("cluster: down")
        raise SystemExit(1)
    pids = json.loads(f.read_text())
    bad = 0
    for name in ORDER:
        if name not in pids:
            continue
        pid = pids[name]
        ok = alive(pid)
        bad += not ok
        print(f"{name:24s} {'running' if ok else 'NOT RUNNING'} {pid or ''}")
    print(f"export KUBECONFIG={STATE / 'kubeconfig'}")
    raise SystemExit(1 if bad else 0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="cluster", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--node-cores", type=int, default=4, help="cpu of each fake node (default 4)")
    u.add_argument("--node-memory", type=int, default=16384, help="memory of each fake node, MiB")
    u.add_argument("--max-nodes", type=int, default=20)
    u.add_argument("--start-nodes", type=int, default=0)
    u.add_argument("--provision-delay", type=float, default=157.0,
                   help="node-provisioner stand-in: mean seconds to add a node (default 157, the thesis's GKE)")
    u.add_argument("--provision-jitter", type=float, default=4.0, help="± seconds of uniform jitter")
    u.add_argument("--empty-node-ttl", type=float, default=60.0,
                   help="remove a node empty this long (Karpenter: its NodePool's consolidateAfter)")
    u.add_argument("--node-autoscaler", choices=["provisioner", "karpenter"], default="provisioner",
                   help="what adds and removes nodes: the light stand-in (default) or real Karpenter (its kwok "
                        "provider; nodes register --provision-delay after their NodeClaim)")
    u.add_argument("--pod-start-delay", type=float, default=2.0, help="scheduled → Ready (pull + start), s")
    u.add_argument("--pod-start-jitter", type=float, default=0.0)
    u.add_argument("--keda", action="store_true",
                   help="start KEDA's operator (its CRDs too), which scales a ScaledJob's Jobs (testcluster/keda.py)")
    u.add_argument("--no-pod-runner", action="store_true",
                   help="do not run pods' processes (benchmarks of the control path only)")
    u.add_argument("--real-node", action="store_true",
                   help="add a real node (kubelet + containerd + runc) running the worker image; "
                        "the pod process runner is then not started")
    u.set_defaults(func=up)
    sub.add_parser("down").set_defaults(func=down)
    sub.add_parser("status").set_defaults(func=status)
    a = sub.add_parser("apiserver", help="fault injection: stop / start / restart the kube-apiserver")
    a.add_argument("action", choices=["down", "up", "restart"])
    a.add_argument("--down-for", type=float, default=30.0, help="restart: seconds it stays down")
    a.set_defaults(func=apiserver)
    args = ap.parse_args(argv)
    if args.func is not up:
        args.func(args)
        return
    if already_up():
        raise SystemExit(f"cluster: already up (state in {STATE}); run `cluster down` first")
    try:
        up(args)
    except BaseException:
        # a cluster that did not come up leaves nothing running (processes, the real node's mounts)
        if (STATE / "pids.json").exists():
            down(args)
        raise


if __name__ == "__main__":
    main()
