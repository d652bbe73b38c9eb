"""The test cluster's optional real node: kubelet v1.33.13 + containerd + runc.

``cluster up --real-node`` adds one node that really runs pods: Debian's
containerd (CRI, runc, cgroupfs) and a kubelet built like the control plane,
with the worker image and a pause image imported from the OCI archives
``k8s/image/build.sh`` makes (no registry is reachable here). Pods use the
CNI bridge ``hta0`` (10.244.0.0/24, gateway 10.244.0.1) or the host network.

What this machine kind needs (see ../shared/reference/real-kubelet): runc, not
crun (hybrid cgroups); ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE); a
non-loopback node IP; no iptables chains; ``failCgroupV1: false``.

Everything it changes on the host is recorded in ``real-node.json`` before it
is changed and put back by :func:`teardown` (called by ``cluster down``):
the sysctls the kubelet and the bridge plugin set, the ``kubepods`` cgroups,
mounts and network namespaces of pods, the bridge, and ``/var/lib/kubelet``
(the kubelet creates its device-plugins directory there whatever its root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "hta-real-node"
BRIDGE = "hta0"
SUBNET, GATEWAY = "10.244.0.0/24", "10.244.0.1"
#: set by the kubelet (setupKernelTunables) and the bridge plugin (isGateway)
SYSCTLS = ["vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward"]
PACKAGES = {"containerd": "containerd", "runc": "runc", "/usr/lib/cni/bridge": "containernetworking-plugins"}


def node_ip() -> str:
    """The address the default route leaves by (the kubelet refuses loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))  # no packet is sent
        return s.getsockname()[0]


def ensure_packages() -> None:
    missing = sorted({pkg for what, pkg in PACKAGES.items()
                      if not (Path(what).exists() if what.startswith("/") else shutil.which(what))})
    if missing:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                       check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                       stdout=subprocess.DEVNULL)


def images() -> list[Path]:
    """Build (or find cached) the worker and pause image archives."""
    build = ROOT / "k8s" / "image" / "build.sh"
    out = []
    for target in ([], ["pause"]):
        r = subprocess.run(["bash", str(build), *target], check=True, stdout=subprocess.PIPE, text=True)
        out.append(Path(r.stdout.strip().splitlines()[-1]))
    return out


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    return [d for d in base.iterdir() if d.is_dir() and not d.is_symlink()] if base.is_dir() else []


def record_host(state: Path) -> dict:
    """What :func:`teardown` must put back, written before anything changes."""
    rec = {
        "sysctls": {k: sysctl_path(k).read_text().strip() for k in SYSCTLS if sysctl_path(k).exists()},
        "var_lib_kubelet": Path("/var/lib/kubelet").exists(),
        "kubepods": [str(d / "kubepods") for d in cgroup_roots() if (d / "kubepods").exists()],
        "netns": sorted(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else None,
        "bridge": Path(f"/sys/class/net/{BRIDGE}").exists(),
    }
    (state / "real-node.json").write_text(json.dumps(rec, indent=1))
    return rec


def write_configs(state: Path, kubeconfig: Path, ip: str) -> dict[str, Path]:
    d = state / "real-node"
    for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "podlogs", "opt"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    sock = d / "containerd" / "containerd.sock"
    runc = shutil.which("runc") or "/usr/sbin/runc"
    (d / "containerd.toml").write_text(f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni/net.d"
""")
    (d / "cni/net.d/10-hta.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "hta",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                              "routes": [{"dst": "0.0.0.0/0"}],  # pods reach the host's addresses
                              "dataDir": str(d / "cni/ipam")}}]}, indent=1))
    (d / "kubelet.yaml").write_text(f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
address: {ip}
port: 11250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 11248
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
podLogsDir: {d}/podlogs
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
""")
    return {"dir": d, "sock": sock, "containerd": d / "containerd.toml", "kubelet": d / "kubelet.yaml",
            "kubeconfig": kubeconfig}


def ctr(sock: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ctr", "--address", str(sock), "--namespace", "k8s.io", *args], check=check,
                          capture_output=True, text=True)


def bring_up(state: Path, kubeconfig: Path, kubelet: Path, start: Callable[[str, list[str]], None],
             wait_for: Callable[..., None]) -> dict[str, float]:
    """Start containerd and the kubelet, import the images; return timings (s)."""
    t = {}
    t0 = time.time()
    ensure_packages()
    archives = images()
    t["images"] = time.time() - t0
    ip = node_ip()
    record_host(state)
    cfg = write_configs(state, kubeconfig, ip)
    start("containerd", ["containerd", "--config", str(cfg["containerd"])])
    wait_for("containerd", lambda: ctr(cfg["sock"], "version", check=False).returncode == 0, 30)
    t1 = time.time()
    for a in archives:
        ctr(cfg["sock"], "images", "import", str(a))
    t["import"] = time.time() - t1
    t2 = time.time()
    start("kubelet", [str(kubelet),
                      f"--config={cfg['kubelet']}", f"--kubeconfig={kubeconfig}",
                      f"--root-dir={cfg['dir'] / 'kubelet'}", f"--node-ip={ip}",
                      f"--hostname-override={NAME}", "--node-labels=hta.io/real-node=true", "--v=1"])
    from kubernetes import client, config

    config.load_kube_config(str(kubeconfig))
    core = client.CoreV1Api()

    def ready() -> bool:
        conditions = core.read_node(NAME).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    wait_for(f"the real node {NAME}", ready, 90)
    t["node_ready"] = time.time() - t2
    return t


def _pids_where(pred: Callable[[int], bool]) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != os.getpid():
            try:
                if pred(int(e)):
                    out.append(int(e))
            except OSError:
                pass
    return out


def _in_pod_cgroup(pid: int) -> bool:
    return "/kubepods" in Path(f"/proc/{pid}/cgroup").read_text()


def _is_our_shim(state: Path) -> Callable[[int], bool]:
    def pred(pid: int) -> bool:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return "containerd-shim" in cmd and str(state) in cmd
    return pred


def _kill(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _rmdir_tree(d: Path) -> None:
    if not d.is_dir():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass


def teardown(state: Path, stop_daemon: Callable[[str], None]) -> list[str]:
    """Stop the kubelet, every pod process and containerd; put the host back. Returns what
    could not be undone (empty when all is clean)."""
    rec_f = state / "real-node.json"
    if not rec_f.exists():
        return []
    rec = json.loads(rec_f.read_text())
    stop_daemon("kubelet")
    # the pods' processes and their shims outlive the kubelet and containerd: kill them first
    _kill(_pids_where(_in_pod_cgroup))
    _kill(_pids_where(_is_our_shim(state)))
    time.sleep(0.5)
    stop_daemon("containerd")
    problems = []
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(str(state)) or m.startswith("/var/lib/kubelet")),
                    key=len, reverse=True):
        if subprocess.run(["umount", "-l", m], capture_output=True).returncode:
            problems.append(f"mount {m}")
    netns = Path("/run/netns")
    if netns.is_dir():  # the pods' network namespaces (containerd pins them there)
        for ns in set(os.listdir(netns)) - set(rec.get("netns") or []):
            subprocess.run(["umount", "-l", str(netns / ns)], capture_output=True)
            (netns / ns).unlink(missing_ok=True)
        if rec.get("netns") is None:
            _rmdir_tree(netns)
    if not rec.get("bridge") and Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    for k, v in rec.get("sysctls", {}).items():
        try:
            if sysctl_path(k).read_text().strip() != v:
                sysctl_path(k).write_text(v)
        except OSError:
            problems.append(f"sysctl {k}")
    existing = set(rec.get("kubepods", []))
    for root in cgroup_roots():
        d = root / "kubepods"
        if str(d) not in existing and d.exists():
            _rmdir_tree(d)
            if d.exists():
                problems.append(f"cgroup {d}")
    if not rec.get("var_lib_kubelet"):
        shutil.rmtree("/var/lib/kubelet", ignore_errors=True)
    return problems
