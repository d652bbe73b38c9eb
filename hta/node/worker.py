"""``hta worker``: the same entrypoint on every worker, local process or pod.

It computes the effective capacity (:mod:`hta.node.capacity`; flags
override, and every value is logged with where it came from), starts
``work_queue_worker`` with it, runs CSS beside it on the worker's tasks
unless disabled, and exits with the worker's exit code.

Draining: ``work_queue_worker`` has no graceful signal — every signal it
handles aborts its running tasks. So on the first SIGTERM/SIGINT ``hta
worker`` waits until the worker holds no task (no task process, and no task sandbox:
its result is with the master), then passes SIGTERM on (the
backends only drain idle workers, so this is normally at once); a second
signal passes it on at once, and so does SIGHUP (the local backend's parent-death
signal: when HTA is gone there is nothing to drain for). Tasks see the worker's cores through
``OMP_NUM_THREADS`` (set for the worker and inherited by its tasks; the
cores CSS pins a task to are applied through its CPU affinity, which
``os.sched_getaffinity`` and OpenMP runtimes honour).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from hta.node.capacity import Capacity, effective_capacity
from workqueue_bridge.processes import die_with_parent

if TYPE_CHECKING:
    from hta.node.css.monitor import FutexMonitor
    from hta.node.css.plan import PlanStyle

log = logging.getLogger("hta.worker")

#: how long a worker keeps trying to reach its master before it gives up: long enough for a
#: restarted HTA (Kubernetes adopts its run's pods) to open the master again
CONNECT_TIMEOUT_S = 900


def worker_command(master: str, *, disk_mb: int, idle_timeout_s: int, cores: int | None = None,
                   memory_mb: int | None = None, workdir: Path | None = None, parent_death: bool = False,
                   css: bool | str = True, css_log: Path | None = None, executable: list[str] | None = None,
                   last_call_s: float = 0.0) -> list[str]:
    """The one ``hta worker`` command line, for a local process and for a pod alike.

    ``cores`` / ``memory_mb`` are given only where no cgroup limits the worker (a local
    process); in a pod the worker reads them from its cgroup (the pod's limits). ``css``:
    on (True, "on"), off (False, "off"), or "dry-run" (it classifies and logs, never pins)."""
    cmd = [*(executable or ["hta"]), "worker", f"--master={master}"]
    if cores is not None:
        cmd.append(f"--cores={cores}")
    if memory_mb is not None:
        cmd.append(f"--memory={memory_mb}")
    cmd += [f"--disk={disk_mb}", f"--idle-timeout={idle_timeout_s}", f"--connect-timeout={CONNECT_TIMEOUT_S}"]
    if parent_death:
        cmd.append("--parent-death")
    if workdir is not None:
        cmd.append(f"--workdir={workdir}")
    if last_call_s:
        cmd.append(f"--last-call={last_call_s:.0f}")
    if css in (False, "off"):
        cmd.append("--no-css")
        return cmd
    if css == "dry-run":
        cmd.append("--css-dry-run")
    if css_log is not None:
        cmd.append(f"--css-log={css_log}")
    return cmd


@dataclass
class WorkerOptions:
    master: str | None = None  # host:port
    project: str | None = None
    catalog: str | None = None
    cores: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    idle_timeout_s: int = 900
    connect_timeout_s: int = 900
    workdir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))
    css: bool = True
    css_backend: str = "auto"
    css_log: Path | None = None
    css_interval_s: float = 5.0
    css_dry_run: bool = False
    #: keep CSS's plan only while it measurably helps (hta.node.css.guard)
    css_guard: bool = True
    #: how CSS's plan places the classes (``hta.node.css.plan``)
    css_plan: PlanStyle = "confine"
    parent_death: bool = False
    #: when the worker must be gone (Unix; a batch job's end), and the longest a task is
    #: expected to run (:mod:`hta.node.last_call`)
    ends_at: float | None = None
    last_call_s: float = 0.0
    #: leave after this many tasks (a KEDA ScaledJob's job; :mod:`hta.node.last_call`)
    max_tasks: int | None = None
    extra: tuple[str, ...] = ()


def chosen_capacity(o: WorkerOptions) -> Capacity:
    cap = effective_capacity(workdir=o.workdir)
    for key, flag in (("cores", o.cores), ("memory_mb", o.memory_mb), ("disk_mb", o.disk_mb)):
        if flag is not None:
            setattr(cap, key, int(flag))
            cap.sources[key.split("_")[0]] = "flag"
    return cap


def command(o: WorkerOptions, cap: Capacity) -> list[str]:
    cmd = ["work_queue_worker", f"--cores={cap.cores}", f"--memory={cap.memory_mb}", f"--disk={cap.disk_mb}",
           f"--idle-timeout={o.idle_timeout_s}", f"--connect-timeout={o.connect_timeout_s}",
           f"--workdir={o.workdir}"]
    if o.parent_death:
        cmd.append("--parent-death")
    cmd += list(o.extra)
    if o.master:
        host, _, port = o.master.rpartition(":")
        cmd += [host, port]
    else:
        cmd += ["-M", o.project or ""]
        if o.catalog:
            cmd += ["-C", o.catalog]
    return cmd


def has_tasks(pid: int, workdir: Path) -> bool:
    """Does the worker hold a task? A task's process may have exited while its result is not
    yet with the master; the worker keeps the task's sandbox (``t.<id>`` in its workspace
    ``worker-<uid>-<pid>``) until the master has fetched the outputs and released it."""
    try:
        if psutil.Process(pid).children():
            return True
    except psutil.NoSuchProcess:
        return False
    return any(Path(workdir).glob(f"worker-*-{pid}/t.*"))


def check_host_port(value: str, option: str) -> None:
    """``HOST:PORT`` with a host and a port a socket can reach: refused at once, not after
    ``--connect-timeout`` of the worker failing to connect (or resolving an empty host)."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{option} {value!r} must be HOST:PORT, with a port from 1 to 65535 "
                         f"(e.g. {option} localhost:9123)")


def run(o: WorkerOptions) -> int:
    if not o.master and not o.project:
        raise ValueError("give the master as --master HOST:PORT, or --project NAME (with --catalog HOST:PORT)")
    if o.master:
        check_host_port(o.master, "--master")
    if o.catalog:
        check_host_port(o.catalog, "--catalog")
    if o.project and not o.catalog:
        raise ValueError(f"--project {o.project!r} needs --catalog HOST:PORT: the catalog server the master "
                         f"reports to (or give the master itself as --master HOST:PORT)")
    if o.catalog and not o.project:
        raise ValueError("--catalog goes with --project NAME: give the master's project name, or leave --catalog out")
    check_workdir(o.workdir)
    if o.css_log is not None:
        from hta.node.css.daemon import check_log_path

        check_log_path(o.css_log, "--css-log")
    if o.master:
        check_resolves(o.master.rpartition(":")[0])
    cap = chosen_capacity(o)
    print(json.dumps({"hta_worker": "capacity", "cores": cap.cores, "memory_mb": cap.memory_mb,
                      "disk_mb": cap.disk_mb, "soft_memory_mb": cap.soft_memory_mb, "sources": cap.sources}),
          file=sys.stderr, flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(cap.cores)}
    become_subreaper()
    signals: list[int] = []

    def on_signal(signum, _frame):
        signals.append(signum)
        if signum == signal.SIGHUP:  # our parent (HTA) died: nothing to drain for, stop now
            signals.append(signum)

    # handlers first: a signal that arrives while we start must not kill us and orphan the worker
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    # its own folder under --workdir: a workspace is named by the worker's pid
    # (``worker-<uid>-<pid>``), and one a killed worker left (pods on one host share /tmp)
    # may carry the pid the kernel hands out again; its old sandboxes would look like tasks
    # this worker holds, and it would never leave nor drain
    try:
        space = Path(tempfile.mkdtemp(prefix="hta-worker-", dir=o.workdir))
    except OSError as exc:
        raise ValueError(f"--workdir {str(o.workdir)!r}: cannot make the worker's folder in it "
                         f"({exc.strerror or exc}): give a folder with room the worker can write in") from None
    try:
        return _supervise(dataclasses.replace(o, workdir=space), cap, env, signals)
    finally:
        shutil.rmtree(space, ignore_errors=True)  # (what a killed work_queue_worker could not delete)


def _supervise(o: WorkerOptions, cap: Capacity, env: dict[str, str], signals: list[int]) -> int:
    """Run ``work_queue_worker`` in ``o.workdir`` (this worker's own folder) to its end:
    CSS beside it, the closer's decisions, a drain on the first signal (see the module)."""
    # and if we die anyway (SIGKILL), the worker follows
    proc = subprocess.Popen(command(o, cap), env=env, preexec_fn=die_with_parent(signal.SIGTERM),
                            stderr=subprocess.PIPE)
    said = _Relay(proc)
    monitor = say_css_capabilities(o)  # (after the fork: the monitor may run a thread)
    daemon = None
    if monitor is not None:
        try:
            from hta.node.css.daemon import CSSConfig, CSSDaemon, Targets

            daemon = CSSDaemon(Targets(worker_pid=proc.pid),
                               CSSConfig(interval_s=o.css_interval_s, backend=o.css_backend,
                                         dry_run=o.css_dry_run, log_path=o.css_log, guard=o.css_guard,
                                         plan=o.css_plan,
                                         cores=sorted(os.sched_getaffinity(0))), monitor=monitor)
            daemon.start_thread()
        except OSError as exc:
            monitor.close()
            log.warning("CSS disabled: %s", exc)

    closer = None
    if o.ends_at is not None or o.max_tasks is not None:
        from hta.node.last_call import Closer

        closer = Closer(proc.pid, o.workdir, o.ends_at, o.last_call_s, o.max_tasks)
    passed_at: float | None = None
    left = False
    while proc.poll() is None:
        if closer is not None and passed_at is None and closer.step() is not None:
            left = True  # its job's end, or its tasks done: it leaves on its own, as if drained
            if closer.only_held():
                # nothing to lose: the master gives the held tasks back the moment the worker is
                # gone, where a SIGTERM has work_queue_worker wait until each is 3 s old to kill it
                # (3 s a job of a ScaledJob spent, its next task waiting, on every task it ran)
                leave_now(proc.pid)
            else:
                proc.send_signal(signal.SIGTERM)
            passed_at = time.monotonic()
        elif signals and passed_at is None and (len(signals) > 1 or not has_tasks(proc.pid, o.workdir)
                                                or (closer is not None and closer.only_held())):
            proc.send_signal(signal.SIGTERM)
            passed_at = time.monotonic()
        elif passed_at is not None and time.monotonic() - passed_at > (LEAVE_GRACE_S if left else STOP_GRACE_S):
            # seen here: an aborting worker blocked in wait4() on a task its kill did not reach;
            # and a worker looking for its master through a catalog ignores SIGTERM altogether
            kill_tree(proc.pid, quiet=not said.connected)
        time.sleep(closer.look_every_s(time.time()) if closer is not None else 0.2)
    if daemon is not None:
        daemon.stop_event.set()
    reap_leftovers()
    said.join()
    rc = proc.returncode
    if left:
        return 0
    if signals and (passed_at is not None or rc == 0):
        # a SIGTERM is how a backend drains a worker (a pod being deleted): its normal end, 0, as
        # work_queue_worker's own, and a drained pod ends Succeeded; another signal interrupted it: 128 + N
        return 0 if signals[0] == signal.SIGTERM else 128 + signals[0]
    if rc == 0 and said.never_connected and not signals:
        where = o.master or f"project {o.project}"
        print(f"hta: error: the worker could not reach its master ({where}) within {o.connect_timeout_s} s"
              f"{': ' + said.why if said.why else ''}; check that the master runs and that HOST:PORT is right",
              file=sys.stderr)
        return 1
    return 128 - rc if rc < 0 else rc


def say_css_capabilities(o: WorkerOptions) -> FutexMonitor | None:
    """Print, as one JSON line on stderr beside the capacity line, what CSS can do here
    (:func:`hta.node.css.daemon.capabilities`): its futex backend, or none and why, and how it
    pins. Where CSS runs unprivileged (a pod) its counters and pins degrade silently otherwise.
    Returns the futex monitor for the daemon (None: CSS off or no backend works)."""
    said: dict[str, object]
    if not o.css:
        monitor, said = None, {"backend": None, "why": "--no-css", "pinned_by": None, "cgroup_cpuset": None}
    else:
        from hta.node.css.daemon import capabilities

        monitor, said = capabilities(o.css_backend, o.css_dry_run)
    print(json.dumps({"hta_worker": "css", **said}), file=sys.stderr, flush=True)
    return monitor


class _Relay:
    """Copies work_queue_worker's stderr to ours line by line (HTA's local backend reads it
    from the log) and notes whether it gave up without ever reaching its master (it exits 0
    then, as after a normal idle timeout)."""

    def __init__(self, proc: subprocess.Popen):
        import threading

        self.connected = False
        self.gave_up = False
        self.why = ""
        self._thread = threading.Thread(target=self._copy, args=(proc.stderr,), daemon=True)
        self._thread.start()

    def _copy(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
            line = raw.decode(errors="replace")
            if "connected to manager" in line or "connected to master" in line:
                self.connected = True
            elif "could not connect after" in line:
                self.gave_up = True
            elif "couldn't resolve hostname" in line or "couldn't connect" in line:
                self.why = line.split("work_queue_worker:")[-1].strip()

    @property
    def never_connected(self) -> bool:
        return self.gave_up and not self.connected

    def join(self) -> None:
        self._thread.join(timeout=5)


def check_resolves(host: str, patience_s: float = 10.0) -> None:
    """The master's host name resolves (within ``patience_s``: a pod's DNS may lag its start)."""
    import socket

    deadline = time.monotonic() + patience_s
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except socket.gaierror as exc:
            if time.monotonic() > deadline:
                raise ValueError(f"cannot resolve the master's host {host!r} ({exc.strerror}): give --master "
                                 f"HOST:PORT with a host name or address this machine can reach") from None
        time.sleep(1.0)


#: how long a worker told to stop may take before its task processes and then it are killed
STOP_GRACE_S = 3.0
#: ... and one leaving before its job's end (its abort waits until each task it holds is 3 s old)
LEAVE_GRACE_S = 10.0


def kill_tree(pid: int, quiet: bool = False) -> None:
    """SIGKILL the worker's task processes, then the worker itself (``quiet``: a worker that
    never reached its master has nothing to lose, and its kill is no warning)."""
    try:
        root = psutil.Process(pid)
        victims = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for p in victims:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    if quiet and len(victims) == 1:
        log.info("worker %d (not connected) did not stop within %.0f s of SIGTERM: killed it", pid, STOP_GRACE_S)
        return
    log.warning("worker %d did not stop within %.0f s of SIGTERM: killed it and %d task processes",
                pid, STOP_GRACE_S, len(victims) - 1)


def leave_now(pid: int) -> None:
    """SIGKILL a worker that holds only tasks it stopped itself (:mod:`hta.node.last_call`),
    and those tasks: every result it had is with the master, which runs the held tasks
    elsewhere."""
    try:
        root = psutil.Process(pid)
        victims = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in victims:  # (the worker first: it must not see its task die and report it failed)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def check_workdir(workdir: Path) -> None:
    """The work directory exists and is a folder this user can write to, as ``work_queue_worker``
    needs (it does not create it, and quits with "could not resolve path")."""
    d = Path(workdir)
    if not d.exists():
        raise ValueError(f"--workdir {str(d)!r} does not exist: create it first (mkdir -p {d}) or give an "
                         f"existing folder")
    if not d.is_dir():
        raise ValueError(f"--workdir {str(d)!r} is not a folder: give a folder the worker can write in")
    if not os.access(d, os.W_OK | os.X_OK):
        raise ValueError(f"--workdir {str(d)!r} is not writable: give a folder the worker can write in")


def become_subreaper() -> None:
    """PR_SET_CHILD_SUBREAPER: task processes the worker leaves behind (its abort does not
    reach every process a task started) are re-parented to us, not to init."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)
    except OSError:
        pass


def reap_leftovers(grace_s: float = 2.0) -> None:
    """Stop every descendant still alive once the worker is gone: no orphan task processes."""
    left = psutil.Process().children(recursive=True)
    for p in left:
        try:
            p.terminate()
            p.resume()  # (a task held at a last call is stopped: it takes the signal once it runs)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    if left:
        log.info("stopped %d task processes left behind by the worker", len(left))
