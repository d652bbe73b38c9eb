"""The pod process runner — a test fake of the kubelet. Test cluster only.

kwok marks pods Running without running anything. For HTA's worker pods
(label ``hta.io/run``), and a rival's deployed beside it (``hta.io/rival``: KEDA's
ScaledJob, :mod:`testcluster.keda`), this fake does what a kubelet would: once kwok reports
the pod Running it starts the container's command and args as a local
process with the pod's environment, in its own UTS and mount namespaces
whose hostname is the pod's name and whose /etc/hosts resolves it (as a
kubelet arranges, so the Work Queue master sees the pod name as the worker's
hostname); its TMPDIR is a folder of the pod's own, removed with the pod (as
a container's writable layer is: a worker killed at its grace period leaves
nothing on the host; not a mount over /tmp, which would hide a checkout or
venv under /tmp that the pod's command runs from); it stops the process (SIGTERM, SIGKILL after
the pod's grace period) when the pod is deleted, and reports the pod
Succeeded or Failed when the process exits by itself. When it is stopped it
stops every process it started.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from k8s.watch import list_and_watch
from workqueue_bridge.processes import die_with_parent

log = logging.getLogger("pod-runner-fake-kubelet")
#: the pods it runs: HTA's workers, and a rival's (each label its own watch)
SELECTORS = ("hta.io/run", "hta.io/rival")
STATE = Path(os.environ.get("HTA_TESTCLUSTER_DIR", "/tmp/hta-testcluster"))
LOGS = STATE / "logs" / "pods"
#: each running pod's TMPDIR (``<uid>``), gone when the pod is
POD_TMP = STATE / "pod-tmp"


@dataclass
class Running:
    name: str
    namespace: str
    proc: subprocess.Popen
    grace: float
    #: the pod's own TMPDIR
    tmp: Path | None = None
    stopping: bool = False

    def end(self) -> None:
        """What a kubelet does once the container's main process is gone: kill what is left
        of it (a task ``work_queue_worker`` started in a process group of its own outlives a
        SIGKILL to the pod's group; a kubelet kills the container's whole cgroup) and remove
        the pod's TMPDIR."""
        import psutil

        for p in pod_processes(self.name):
            try:
                p.kill()
            except psutil.Error:
                pass
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def pod_env(pod: client.V1Pod, container: client.V1Container) -> dict[str, str]:
    # the image's PATH has `hta`; here it is the venv's, next to this Python
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {"PATH": path, "HOSTNAME": pod.metadata.name}
    fields = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
              "metadata.uid": pod.metadata.uid, "spec.nodeName": pod.spec.node_name or "",
              "status.podIP": pod.status.pod_ip or "127.0.0.1", "status.hostIP": pod.status.host_ip or ""}
    for e in container.env or []:
        if e.value is not None:
            env[e.name] = e.value
        elif e.value_from and e.value_from.field_ref:
            env[e.name] = fields.get(e.value_from.field_ref.field_path, "")
        elif e.value_from and e.value_from.resource_field_ref:
            lim = (container.resources.limits or {}) if container.resources else {}
            env[e.name] = str(lim.get(e.value_from.resource_field_ref.resource.split(".")[-1], ""))
    return env


def pod_processes(pod: str) -> list:
    """The processes this runner runs for ``pod``, its container's children included: their
    environment names the pod (the HOSTNAME this runner gives each pod, or the worker pod's
    HTA_POD_NAME, from the downward API)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if pod in (env.get("HTA_POD_NAME"), env.get("HOSTNAME")) and p.pid != os.getpid():
            out.append(p)
    return out


def limit_flags(argv: list[str], c: client.V1Container) -> list[str]:
    """This fake applies no cgroup, so ``hta worker`` would see the host's CPUs and memory
    where a real pod's worker reads its limits from its cgroup: pass the limits as flags."""
    if argv[:2] != ["hta", "worker"] or not (c.resources and c.resources.limits):
        return []
    lim, out = c.resources.limits, []
    if "cpu" in lim and not any(a.startswith("--cores") for a in argv):
        cpu = str(lim["cpu"])
        out.append(f"--cores={max(1, int(cpu[:-1]) // 1000 if cpu.endswith('m') else int(float(cpu)))}")
    if "memory" in lim and not any(a.startswith("--memory") for a in argv):
        mem = str(lim["memory"])
        mb = int(mem[:-2]) if mem.endswith("Mi") else int(mem[:-2]) * 1024 if mem.endswith("Gi") else int(mem) // 2**20
        out.append(f"--memory={mb}")
    return out


class PodRunner:
    def __init__(self, api: client.CoreV1Api):
        self.api = api
        self.running: dict[str, Running] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.can_unshare = os.geteuid() == 0 and shutil.which("unshare") is not None
        if not self.can_unshare:
            log.warning("not root (or no unshare): pods run with the host's hostname")
        shutil.rmtree(POD_TMP, ignore_errors=True)  # (pods of a runner killed before it could remove them)

    def start(self, pod: client.V1Pod) -> None:
        c = pod.spec.containers[0]
        argv = list(c.command or []) + list(c.args or [])
        if not argv:
            log.warning("pod %s has no command: nothing to run", pod.metadata.name)
            return
        argv += limit_flags(argv, c)
        LOGS.mkdir(parents=True, exist_ok=True)
        tmp = POD_TMP / pod.metadata.uid  # (its temporary files: a container's own layer)
        tmp.mkdir(parents=True, exist_ok=True)
        if self.can_unshare:
            # as a kubelet does: the pod's hostname, resolvable through the pod's own /etc/hosts
            hosts = LOGS / f"{pod.metadata.namespace}_{pod.metadata.name}.hosts"
            hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1\t{pod.metadata.name}\n")
            argv = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"',
                    pod.metadata.name, str(hosts), *argv]
        out = open(LOGS / f"{pod.metadata.namespace}_{pod.metadata.name}.log", "ab")
        proc = subprocess.Popen(argv, env={"TMPDIR": str(tmp), **pod_env(pod, c)}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=die_with_parent(), cwd=tmp)
        out.close()
        grace = float(pod.spec.termination_grace_period_seconds or 30)
        self.running[pod.metadata.uid] = Running(pod.metadata.name, pod.metadata.namespace, proc, grace, tmp)
        log.info("started pod %s/%s as pid %d", pod.metadata.namespace, pod.metadata.name, proc.pid)

    def terminate(self, uid: str) -> None:
        r = self.running.get(uid)
        if r is None or r.stopping:
            return
        r.stopping = True

        def run() -> None:
            try:
                os.killpg(r.proc.pid, signal.SIGTERM)
                r.proc.wait(r.grace)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                r.proc.wait()
            r.end()
            with self.lock:
                self.running.pop(uid, None)
            log.info("stopped pod %s/%s", r.namespace, r.name)

        threading.Thread(target=run, daemon=True).start()

    def on_pod(self, kind: str, pod: client.V1Pod) -> None:
        uid = pod.metadata.uid
        with self.lock:
            if kind == "DELETED" or pod.metadata.deletion_timestamp:
                self.terminate(uid)
                return
            if (uid not in self.running and pod.status.phase == "Running" and pod.spec.node_name
                    and not any(cs.state and cs.state.terminated for cs in pod.status.container_statuses or [])):
                self.start(pod)

    def reap(self) -> None:
        with self.lock:
            done = [(u, r) for u, r in self.running.items() if not r.stopping and r.proc.poll() is not None]
            for u, _ in done:
                self.running.pop(u)
        for _, r in done:
            r.end()
            phase = "Succeeded" if r.proc.returncode == 0 else "Failed"
            try:
                self.api.patch_namespaced_pod_status(r.name, r.namespace, {"status": {"phase": phase}})
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    log.warning("could not mark %s %s: %s", r.name, phase, exc.reason)
            log.info("pod %s/%s exited %d", r.namespace, r.name, r.proc.returncode)

    def watch_loop(self, selector: str) -> None:
        list_and_watch(self.api.list_pod_for_all_namespaces, selector=selector,
                       on_sync=lambda pods: [self.on_pod("ADDED", p) for p in pods], on_event=self.on_pod,
                       stop=self.stop)

    def run(self) -> None:
        for selector in SELECTORS:
            threading.Thread(target=self.watch_loop, args=(selector,), daemon=True).start()
        while not self.stop.is_set():
            self.reap()
            self.stop.wait(0.5)
        with self.lock:
            uids = list(self.running)
        for u in uids:
            self.terminate(u)
        deadline = time.time() + 35
        while self.running and time.time() < deadline:
            time.sleep(0.1)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config.load_kube_config()
    r = PodRunner(client.CoreV1Api())
    signal.signal(signal.SIGTERM, lambda *_: r.stop.set())
    signal.signal(signal.SIGINT, lambda *_: r.stop.set())
    r.run()


if __name__ == "__main__":
    main()

