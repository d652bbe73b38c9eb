"""The CSS MAPE-K loop: monitor → analyse → plan → execute, every management
interval (5 s); futex counters are cleaned every cleaning interval (30 s).

What it watches ("containers"):
- the tasks of a ``work_queue_worker`` (``worker_pid``): each child process of
  the worker is one task, its container is its whole process tree;
- given process trees (``pids``);
- cgroups (``cgroups``): the processes in ``cgroup.procs``.

Execute: a cgroup container is pinned through its ``cpuset.cpus`` when that
file is writable (v1 or v2); a process tree through ``sched_setaffinity`` on
every thread, each interval (new threads inherit only their creator's mask).
With ``dry_run`` it decides and logs without pinning. The decision log
(JSON Lines) holds one record per container per interval, and one per trial of the
plan against the kernel's scheduling (:mod:`hta.node.css.guard`: the plan is applied
only while it measurably helps; ``guard=False`` applies it always, as the paper applies CTBRA).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hta.node.css.guard import PlanGuard, task_kind
from hta.node.css.monitor import LAMBDA, FutexMonitor, choose
from hta.node.css.plan import Kind, PlanStyle, classify, ctbra

log = logging.getLogger("hta.css")


@dataclass
class CSSConfig:
    interval_s: float = 5.0
    cleaning_s: float = 30.0
    lam: float | None = None  # None: the backend's calibrated λ
    mu: int = 2
    backend: str = "auto"
    dry_run: bool = False
    cores: list[int] | None = None  # the cores to share (default: this process's affinity)
    log_path: Path | None = None
    #: keep the plan only while it measurably helps (:mod:`hta.node.css.guard`)
    guard: bool = True
    #: the guard's epoch (None: three management intervals)
    epoch_s: float | None = None
    #: how the plan places the classes (:mod:`hta.node.css.plan`): the I/O tasks confined
    #: to μ cores, the CPU tasks on every core (``confine``), or the paper's CTBRA
    #: (``partition``: the CPU tasks split the other cores)
    plan: PlanStyle = "confine"


@dataclass
class Targets:
    worker_pid: int | None = None
    pids: list[int] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)


def check_log_path(path: Path, flag: str = "--log") -> None:
    """The decision log can be written (appended to) at ``path``; else a :class:`ValueError`
    naming ``flag`` and the fix. Nothing is created."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is a folder: give a file path for the decision log, e.g. {p / 'css.jsonl'}")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise ValueError(f"{flag} {str(p)!r} is not writable: give a file path you can write to")
        return
    parent = p.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {str(p)!r}: folder {str(parent)!r} does not exist: create it first or give "
                         f"a file path in an existing folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r}: folder {str(parent)!r} is not writable: give a file path you can "
                         f"write to")


def check_cores(text: str) -> list[int]:
    """``--cores`` as ``0-3,8``: the CPUs to share, each one this machine has online; else a
    :class:`ValueError` naming the fix."""
    online = _online_cpus()
    shown = _cpu_list(online)
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        a, dash, b = part.partition("-")
        try:
            lo, hi = (int(a), int(b)) if dash else (int(part), int(part))
        except ValueError:
            lo, hi = -1, -1
        if 0 <= hi < lo:
            raise ValueError(f"--cores {text!r}: the range {part!r} goes down: write it low-high, e.g. {hi}-{lo}")
        if lo < 0:
            raise ValueError(f"--cores {text!r}: {part!r} is not a CPU number or range: give CPUs as a list like "
                             f"0-3,8 (this machine's: {shown})")
        if online and hi > max(online):  # (before the range is built: 0-1000000000 is refused, not listed)
            raise ValueError(f"--cores {text!r}: this machine has no CPU {max(lo, max(online) + 1)}"
                             f"{'-' + str(hi) if hi > max(lo, max(online) + 1) else ''}: give CPUs among {shown}")
        cpus.update(range(lo, hi + 1))
    missing = sorted(cpus - online)
    if missing:
        raise ValueError(f"--cores {text!r}: this machine has no CPU {_cpu_list(set(missing))}: give CPUs among "
                         f"{shown}")
    return sorted(cpus)


def _online_cpus() -> set[int]:
    from hta.node.capacity import parse_cpuset

    try:
        return parse_cpuset(Path("/sys/devices/system/cpu/online").read_text())
    except (OSError, ValueError):
        return set(range(os.cpu_count() or 1))


def _cpu_list(cpus: set[int]) -> str:
    """{0, 1, 2, 5} → ``0-2,5``."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and c - 1 == int(out[-1].rpartition("-")[2]):
            out[-1] = f"{out[-1].partition('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def check_cgroup(d: Path) -> None:
    """``d`` is a cgroup folder (it lists its processes in ``cgroup.procs``)."""
    if not Path(d).is_dir():
        raise ValueError(f"--cgroup {str(d)!r} is not a folder: give a cgroup folder, e.g. under /sys/fs/cgroup")
    if not (Path(d) / "cgroup.procs").is_file():
        raise ValueError(f"--cgroup {str(d)!r} is not a cgroup (it has no cgroup.procs): give a cgroup folder, "
                         f"e.g. under /sys/fs/cgroup")


def tree(pid: int) -> set[int]:
    try:
        p = psutil.Process(pid)
        return {pid} | {c.pid for c in p.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def discover(t: Targets) -> tuple[dict[str, set[int]], dict[str, Path]]:
    """Containers (id → PIDs) and, for cgroup containers, their directory."""
    out: dict[str, set[int]] = {}
    cg: dict[str, Path] = {}
    if t.worker_pid is not None:
        try:
            for child in psutil.Process(t.worker_pid).children():
                pids = tree(child.pid)
                if pids:
                    out[f"task-{child.pid}"] = pids
        except psutil.NoSuchProcess:
            pass
    for pid in t.pids:
        pids = tree(pid)
        if pids:
            out[f"pid-{pid}"] = pids
    for d in t.cgroups:
        try:
            pids = {int(x) for x in (d / "cgroup.procs").read_text().split()}
        except OSError:
            continue
        if pids:
            out[f"cgroup-{d.name}"] = pids
            cg[f"cgroup-{d.name}"] = d
    return out, cg


#: how a trial's log line names what decided it
EVIDENCE = {"completions": "the tasks' durations", "cpu": "the CPU time the tasks received",
            "none": "nothing (no task ran throughout or ended: tried again, longer)"}


def _root_pid(container: str) -> int | None:
    """The first process of a task or process-tree container (``task-PID``, ``pid-PID``)."""
    prefix, _, pid = container.partition("-")
    return int(pid) if prefix in ("task", "pid") and pid.isdigit() else None


def pin_tree(pids: set[int], cpus: list[int]) -> int:
    """sched_setaffinity on every thread of the tree; returns threads pinned."""
    n = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
                n += 1
            except OSError:
                continue
    return n


def pin_cgroup(d: Path, cpus: list[int]) -> bool:
    f = d / "cpuset.cpus"
    try:
        f.write_text(",".join(str(c) for c in cpus))
        return True
    except OSError:
        return False


def cgroup_pinnable(root: Path = Path("/sys/fs/cgroup"), proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> bool:
    """Could CSS pin this process's own cgroup through its ``cpuset.cpus``? Found by
    :func:`pin_cgroup` writing the CPUs the cgroup already has (the kernel leaves an unchanged
    cpuset alone): v1's ``cpuset`` hierarchy, else v2's unified one."""
    from hta.node.capacity import cgroup_dir, parse_cpuset

    d = cgroup_dir("cpuset" if (root / "cpuset").is_dir() else "", root, proc_self_cgroup)
    try:
        cpus = parse_cpuset((d / "cpuset.cpus").read_text())
    except (OSError, ValueError):
        return False
    return pin_cgroup(d, sorted(cpus))


def capabilities(backend: str = "auto", dry_run: bool = False) -> tuple[FutexMonitor | None, dict[str, object]]:
    """What CSS can do here, found with the daemon's own means, for ``hta worker`` to say once
    at start: in a pod nothing else shows whether the exact futex counters or only the /proc
    estimate count, nor whether the pins take effect (the decision log's ``pinned_by`` names the
    means tried, not whether the kernel took it).

    Returns the futex monitor :func:`choose` picked (for the daemon; None if none works) and
    ``{"backend", "why", "pinned_by", "cgroup_cpuset"}``: the backend's name or None; ``why``
    the backends passed over and what failed (None if the first tried works); ``pinned_by`` how
    the worker's tasks are pinned, as the decision log says it ("affinity" when :func:`pin_tree`
    can set this process's threads to the CPUs they have, which a process may do to its
    children alike; "dry-run"; None: cannot pin); ``cgroup_cpuset`` whether its own cgroup's
    ``cpuset.cpus`` is writable (:func:`cgroup_pinnable`; ``hta css --cgroup`` pins through it).
    """
    failed: list[str] = []
    monitor: FutexMonitor | None
    try:
        monitor = choose(backend, failed)
    except OSError:
        monitor = None
    pinned_by: str | None = "dry-run" if dry_run else "affinity"
    if not dry_run and pin_tree({os.getpid()}, sorted(os.sched_getaffinity(0))) == 0:
        pinned_by = None
        failed.append("sched_setaffinity: refused")
    return monitor, {"backend": monitor.name if monitor else None, "why": "; ".join(failed) or None,
                     "pinned_by": pinned_by, "cgroup_cpuset": cgroup_pinnable()}


class CSSDaemon:
    def __init__(self, targets: Targets, config: CSSConfig, monitor: FutexMonitor | None = None):
        self.targets = targets
        self.config = config
        self.monitor = monitor or choose(config.backend)
        self.lam = config.lam if config.lam is not None else LAMBDA[self.monitor.name]
        self.cores = config.cores or sorted(os.sched_getaffinity(0))
        self.stop_event = threading.Event()
        self.decisions: list[dict] = []
        self._log = open(config.log_path, "a", encoding="utf-8") if config.log_path else None
        self._last_clean = time.monotonic()
        self.cpu_seconds = 0.0
        epoch = config.epoch_s or 3 * config.interval_s
        self.guard = PlanGuard(epoch) if config.guard else None
        self._kinds: dict[str, str] = {}
        #: task kinds seen IO-intensive (:meth:`_remember_io`)
        self._io_kinds: set[str] = set()
        log.info("CSS: backend %s, λ=%g, μ=%d, plan %s, cores %s, interval %gs, cleaning %gs, %s%s",
                 self.monitor.name, self.lam, config.mu, config.plan, self.cores, config.interval_s, config.cleaning_s,
                 f"plan kept only while it helps (trial epochs of {epoch:g}s)" if self.guard else "plan always applied",
                 " (dry run)" if config.dry_run else "")

    def step(self) -> list[dict]:
        t0 = time.thread_time()
        containers, cgroups = discover(self.targets)
        self.monitor.update(containers)
        counts = self.monitor.counts()
        futex = {c: counts.get(c, 0) for c in containers}
        kinds = classify(futex, self.lam)
        now = time.time()
        task_kinds, ages = self._identify(containers, now)
        self._remember_io(kinds, task_kinds)
        plan = ctbra(kinds, self.cores, self.config.mu, self.config.plan)
        out = []
        # (a plan that leaves every task on every core is the kernel's: nothing to apply or try)
        applied = any(sorted(plan.get(c, self.cores)) != sorted(self.cores) for c in containers)
        if self.guard is not None and not applied:
            self.guard.pause(containers, task_kinds, ages)
        elif self.guard is not None:
            mix = (sum(1 for k in kinds.values() if k == "io"), sum(1 for k in kinds.values() if k == "cpu"))
            applied, verdict = self.guard.step(containers, mix, task_kinds, ages)
            if verdict is not None:
                choice = ("plan kept" if verdict.keep else "kernel scheduling" if verdict.evidence != "none"
                          else "undecided")
                log.info("CSS trial: %s on %s (progress under the plan %+.1f%%, worst %-.1f%%, noise %.1f%%, "
                         "%d tasks)", choice, EVIDENCE[verdict.evidence], 100 * verdict.gain,
                         -100 * verdict.worst_loss, 100 * verdict.noise, verdict.tasks)
                rec = {"time": round(now, 3), "trial": choice, "evidence": verdict.evidence, "gain": verdict.gain,
                       "noise": verdict.noise, "worst_loss": verdict.worst_loss, "tasks": verdict.tasks,
                       "ratios": verdict.ratios}
                out.append(rec)
                if self._log:
                    self._log.write(json.dumps(rec) + "\n")
        for c in sorted(containers):
            cpus = plan.get(c, self.cores) if applied else self.cores
            how = "dry-run"
            if not self.config.dry_run:
                if c in cgroups and pin_cgroup(cgroups[c], cpus):
                    how = "cpuset"
                else:
                    pin_tree(containers[c], cpus)
                    how = "affinity"
            rec = {"time": round(now, 3), "container": c, "futex": futex[c], "class": kinds[c], "cpus": cpus,
                   "backend": self.monitor.name, "pinned_by": how, "processes": len(containers[c]),
                   "plan": applied}
            out.append(rec)
            if self._log:
                self._log.write(json.dumps(rec) + "\n")
        if self._log:
            self._log.flush()
        if time.monotonic() - self._last_clean >= self.config.cleaning_s:
            self.monitor.reset()
            self._last_clean = time.monotonic()
        self.decisions.extend(out)
        self.cpu_seconds += time.thread_time() - t0
        return out

    def _identify(self, containers: dict[str, set[int]], now: float) -> tuple[dict[str, str], dict[str, float]]:
        """Each task's kind (its command, read once) and how long it has run, for the guard
        to judge plans by the tasks' durations. A cgroup container names no command."""
        ages: dict[str, float] = {}
        for c in containers:
            root = _root_pid(c)
            if root is None:
                continue
            try:
                proc = psutil.Process(root)
                if c not in self._kinds:
                    self._kinds[c] = task_kind(proc.cmdline())
                ages[c] = now - proc.create_time()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for gone in set(self._kinds) - set(containers):
            del self._kinds[gone]
        return {c: self._kinds[c] for c in containers if c in self._kinds}, ages

    def _remember_io(self, classes: dict[str, Kind], task_kinds: dict[str, str]) -> None:
        """A task of a kind already seen IO-intensive is IO-intensive from its start: a new
        task's futex count starts at 0, and a stream of short tasks would otherwise change
        the mix of classes (and the plan) every time one starts, and no trial would end."""
        for c, cls in classes.items():
            kind = task_kinds.get(c)
            if not kind:
                continue
            if cls == "io":
                self._io_kinds.add(kind)
            elif kind in self._io_kinds:
                classes[c] = "io"

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 — keep managing: a task ending mid-step is normal
                log.warning("CSS step failed: %s", exc)
            self.stop_event.wait(self.config.interval_s)
        self.close()

    def run_until_done(self, duration_s: float | None = None) -> int | None:
        """``hta css``'s loop: manage every interval until stopped, ``duration_s`` passes, or
        (when not watching a worker) every watched process tree is gone; SIGTERM or SIGINT
        stops it. Returns the number of the signal that stopped it, or None."""
        import signal

        stopped_by: list[int] = []

        def on_signal(signum, _frame):
            stopped_by.append(signum)
            self.stop_event.set()

        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, on_signal)
        deadline = time.monotonic() + duration_s if duration_s else None
        try:
            while not self.stop_event.is_set():
                self.step()
                if deadline and time.monotonic() >= deadline:
                    break
                if self.targets.worker_pid is None and not discover(self.targets)[0]:
                    break
                wait_s = self.config.interval_s
                if deadline:  # (the last interval ends at the deadline, not past it)
                    wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
                self.stop_event.wait(wait_s)
        finally:
            self.close()
        return stopped_by[0] if stopped_by else None

    def start_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="css", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.monitor.close()
        if self._log:
            self._log.close()
            self._log = None
