"""Monitor: futex system calls per container, summed over its process tree.

Three backends, best first; :func:`choose` takes the first that works here:

1. ``perf`` — ``perf_event_open`` counters on the ``syscalls:sys_enter_futex``
   tracepoint for every thread, open a tenth of the time (ctypes; needs root or
   CAP_PERFMON and tracefs, which is mounted if absent). Exact within its windows;
   counting all the time taxed futex-heavy tasks (see :class:`PerfMonitor`).
2. ``bpftrace`` — one bpftrace process counting futex calls per process.
3. ``proc`` — unprivileged: estimates futex waits from each thread's voluntary
   context switches, attributed by sampling the syscall it sleeps in from
   ``/proc/PID/task/TID/syscall`` (20 Hz; see :class:`ProcSampler`).

Counts accumulate until :meth:`reset` (SBCC's cleaning interval).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import resource
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger("hta.css")

#: λ per backend: the paper's 30 futex calls; the sampler's estimate counts futex
#: waits (a CPU-bound stress-ng: 0 in 5 s; a futex-heavy one: about 200,000)
LAMBDA = {"perf": 30.0, "bpftrace": 30.0, "proc": 30.0}
SYS_FUTEX_X86_64 = 202
SYS_PERF_EVENT_OPEN_X86_64 = 298
TRACEFS = [Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing")]


def threads_of(pids: set[int]) -> set[int]:
    tids: set[int] = set()
    for pid in pids:
        try:
            tids.update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return tids


class FutexMonitor(Protocol):
    name: str

    def update(self, containers: dict[str, set[int]]) -> None:
        """Track these containers (id → the PIDs of its process tree)."""

    def counts(self) -> dict[str, int]:
        """Futex count per container since the last reset."""

    def reset(self) -> None: ...

    def close(self) -> None: ...


class _Accumulated:
    """Counts per container added up by a background thread, read and cleaned under a lock."""

    def __init__(self) -> None:
        self.acc: dict[str, int] = {}
        self.lock = threading.Lock()

    def _add(self, container: str, n: int) -> None:  # call with the lock held
        self.acc[container] = self.acc.get(container, 0) + n

    def counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self.acc)

    def reset(self) -> None:
        with self.lock:
            self.acc.clear()


# -- perf_event_open ---------------------------------------------------------------
class _PerfEventAttr(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64), ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64), ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64), ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32), ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16), ("reserved", ctypes.c_uint16),
    ]


def tracefs_dir(mount: bool = True) -> Path | None:
    for d in TRACEFS:
        if (d / "events" / "syscalls").is_dir():
            return d
    if mount and os.geteuid() == 0 and TRACEFS[0].is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS[0])], capture_output=True)
        if (TRACEFS[0] / "events" / "syscalls").is_dir():
            log.info("mounted tracefs at %s", TRACEFS[0])
            return TRACEFS[0]
    return None


class PerfMonitor(_Accumulated):
    """Futex calls counted in windows: ``perf_event_open`` counters on every watched
    thread for ``window_s`` out of every ``period_s``, the counts scaled up by
    ``period_s / window_s``.

    Why windows: while a ``sys_enter`` tracepoint is open, every system call of every
    thread on the node takes the kernel's slow path, and every futex call of a watched
    thread goes through perf. A ``stress-ng --futex`` alone lost 4.4 % of its
    operations to counters open all the time (median of 4 rounds, 79.9k against 83.6k
    bogo ops/s), and the paper's mix (2 futex beside 2 CPU tasks on 2 cores) ran
    1.06 × as long with CSS only watching. Closing every counter between windows
    unregisters the tracepoint, so the tax falls with the share of time counted; a
    tenth keeps it inside the noise, and a futex-heavy task still makes thousands of
    calls in a window where λ is 30 in an interval.
    """

    name = "perf"

    def __init__(self, window_s: float = 0.25, period_s: float = 2.5) -> None:
        tf = tracefs_dir()
        if tf is None:
            raise OSError("no tracefs with syscall tracepoints (mount needs root)")
        self.tp_id = int((tf / "events/syscalls/sys_enter_futex/id").read_text())
        raise_open_files_limit()  # one counter per thread, while a window is open
        self.libc = ctypes.CDLL(None, use_errno=True)
        os.close(self._open(os.getpid()))  # prove it works here
        super().__init__()
        self.window_s, self.period_s = window_s, period_s
        self.tracked: dict[str, set[int]] = {}
        self.cleaned = 0  # resets so far
        self.stop = threading.Event()
        #: count now, not at the next period: new containers to classify, or counts cleaned
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name="css-perf", daemon=True)
        self.thread.start()

    def _open(self, tid: int) -> int:
        attr = _PerfEventAttr()
        attr.type = 2  # PERF_TYPE_TRACEPOINT
        attr.size = ctypes.sizeof(_PerfEventAttr)
        attr.config = self.tp_id
        fd = self.libc.syscall(SYS_PERF_EVENT_OPEN_X86_64, ctypes.byref(attr), tid, -1, -1, 8)  # FD_CLOEXEC
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"perf_event_open: {os.strerror(err)}")
        return fd

    @staticmethod
    def _read(fd: int) -> int:
        return int.from_bytes(os.read(fd, 8), "little")  # perf fds do not seek

    def update(self, containers: dict[str, set[int]]) -> None:
        with self.lock:
            new = set(containers) - set(self.tracked)
            self.tracked = {c: set(pids) for c, pids in containers.items()}
        if new:
            self.wake.set()

    def reset(self) -> None:
        with self.lock:
            self.acc.clear()
            self.cleaned += 1  # (a window open across the reset is dropped: it began before)
        self.wake.set()

    def _window(self, stands_for_s: float) -> None:
        """Open a counter on every thread of the tracked trees, wait ``window_s``, add what
        they counted (scaled to ``stands_for_s``, the time since the last window began)
        and close them all."""
        with self.lock:
            tracked = {c: set(pids) for c, pids in self.tracked.items()}
            cleaned = self.cleaned
        fds: list[tuple[str, int]] = []
        try:
            for c, pids in tracked.items():
                for tid in threads_of(process_tree(pids)):
                    try:
                        fds.append((c, self._open(tid)))
                    except OSError:
                        continue  # the thread ended meanwhile
            if not fds or self.stop.wait(self.window_s):
                return
            counted = [(c, self._read(fd)) for c, fd in fds]
            scale = stands_for_s / self.window_s
            with self.lock:
                if self.cleaned == cleaned:
                    for c, n in counted:
                        self._add(c, round(n * scale))
        finally:
            for _, fd in fds:
                os.close(fd)

    def _run(self) -> None:
        last: float | None = None
        while not self.stop.is_set():
            self.wake.clear()
            started = time.monotonic()
            try:
                self._window(self.period_s if last is None else min(self.period_s, started - last))
            except Exception:  # (keep counting: a dead thread would class every task CPU-bound)
                log.exception("futex counting window failed")
            last = started
            self.wake.wait(max(0.0, self.period_s - (time.monotonic() - started)))

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
        self.thread.join(self.window_s + 5)


# -- bpftrace ----------------------------------------------------------------------
class BpftraceMonitor(_Accumulated):
    name = "bpftrace"
    PROGRAM = ("tracepoint:syscalls:sys_enter_futex { @c[pid] = count(); } "
               "interval:ms:500 { print(@c); clear(@c); }")

    def __init__(self, start_timeout_s: float = 20.0) -> None:
        exe = shutil.which("bpftrace")
        if exe is None or os.geteuid() != 0:
            raise OSError("bpftrace needs root and the bpftrace package")
        tracefs_dir()
        super().__init__()
        self.proc = subprocess.Popen([exe, "-e", self.PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.owner: dict[int, str] = {}
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(start_timeout_s):
            self.close()
            raise OSError("bpftrace did not start")

    def _read(self) -> None:
        pat = re.compile(r"@c\[(\d+)\]: (\d+)")
        assert self.proc.stdout is not None  # (Popen with stdout=PIPE)
        for line in self.proc.stdout:
            if line.startswith("Attaching"):
                self.ready.set()
                continue
            m = pat.match(line.strip())
            if m:
                pid, n = int(m.group(1)), int(m.group(2))
                with self.lock:
                    c = self.owner.get(pid)
                    if c is not None:
                        self._add(c, n)

    def update(self, containers: dict[str, set[int]]) -> None:
        with self.lock:
            self.owner = {pid: c for c, pids in containers.items() for pid in pids}

    def counts(self) -> dict[str, int]:
        time.sleep(0.6)  # one print interval: counts up to now
        return super().counts()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# -- /proc sampler -----------------------------------------------------------------
def process_tree(pids: set[int]) -> set[int]:
    """These processes and all their descendants (``/proc/PID/task/TID/children``).

    Cheaper than psutil's scan of every process, so the sampler can follow the
    trees every second; on a kernel without that file it returns the given
    processes, which the daemon has already expanded with psutil."""
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            try:
                fd = os.open(f"/proc/{pid}/task/{t}/children", os.O_RDONLY)
            except OSError:
                continue
            try:
                todo.extend(int(x) for x in os.read(fd, 65536).split())
            except OSError:
                pass
            finally:
                os.close(fd)
    return seen


@dataclass
class _SampledThread:
    container: str
    syscall_fd: int  # /proc/PID/task/TID/syscall, kept open
    status_fd: int  # /proc/PID/task/TID/status, kept open
    switches: int  # its voluntary context switches when last read
    blocked_in: int | None = None  # the syscall it was last seen asleep in
    active: bool = True  # it switched in the tick before: sample it until the next tick
    sampled: bool = False  # it was sampled since the last tick
    switched: int = 0  # its voluntary context switches since the last tick


def raise_open_files_limit() -> None:
    """Soft limit on open files up to the hard one: the backends keep one or two
    files open per watched thread, and 1,024 is only 500 threads (nothing here
    uses select())."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)


def _voluntary_switches(status_fd: int) -> int:
    text = os.pread(status_fd, 4096, 0)
    at = text.index(b"\nvoluntary_ctxt_switches:") + len(b"\nvoluntary_ctxt_switches:")
    return int(text[at:text.index(b"\n", at)])


class ProcSampler(_Accumulated):
    """Futex waits per container, estimated without privileges from ``/proc``.

    Every futex wait that sleeps is one voluntary context switch of its thread,
    and the kernel counts those per thread (``voluntary_ctxt_switches``). Which
    syscall a thread sleeps in is sampled ``hz`` times a second from its
    ``syscall`` file. Once a second (a tick) each thread's new voluntary
    switches are added to its container when the thread was last seen asleep
    in futex, or sampled but never caught asleep (waits too short for the
    sampler: the wait/wake ping-pong of a futex-heavy task). A thread last seen
    asleep in anything else (read, poll, wait4, nanosleep) adds nothing, and
    neither does a thread parked in futex that never wakes (no new switches).
    The result is a count of futex waits, the unit of λ for the counters.

    Only threads that switched in the previous tick are sampled: parked and
    CPU-bound threads cost one read of their ``status`` a second. A thread
    that wakes after a quiet tick is attributed by what it was last seen
    asleep in; never seen, its first second is not counted.

    Why not count the samples that find a thread in futex (this backend's first
    form): a futex-heavy task's waits last microseconds, so that count swung
    between 0 and 16 per second for the same ``stress-ng --futex`` while its
    voluntary switches stayed at 29,000–55,000 a second; CI once saw 0 in a
    5 s interval and called the task CPU-bound.

    The threads are re-listed every tick from the tracked process trees, not
    only at :meth:`update` (once per management interval): a task's busy
    process is often forked after the task started (``sh -c`` → program).
    """

    name = "proc"

    def __init__(self, hz: float = 20.0, tick_s: float = 1.0) -> None:
        super().__init__()
        raise_open_files_limit()  # two kept-open files per thread
        self.period = 1.0 / hz
        self.tick_every = max(1, round(tick_s * hz))
        self.tracked: dict[str, set[int]] = {}
        self.threads: dict[int, _SampledThread] = {}  # by TID
        self.stop = threading.Event()
        self.samples = 0
        threading.Thread(target=self._run, daemon=True).start()

    def update(self, containers: dict[str, set[int]]) -> None:
        with self.lock:
            self.tracked = {c: set(pids) for c, pids in containers.items()}
            self._relist()

    def counts(self) -> dict[str, int]:
        with self.lock:
            self._count_switches()  # up to now, not only to the last tick
        return super().counts()

    def _tick(self) -> None:  # call with the lock held
        self._count_switches()
        for t in self.threads.values():
            t.active, t.sampled, t.switched = t.switched > 0, False, 0
        self._relist()

    def _count_switches(self) -> None:  # call with the lock held
        """Add each thread's voluntary switches since they were last read to its container."""
        for t in self.threads.values():
            try:
                now = _voluntary_switches(t.status_fd)
            except (OSError, ValueError):
                continue  # ended since the last tick
            new = now - t.switches
            if t.blocked_in == SYS_FUTEX_X86_64 or (t.blocked_in is None and t.sampled):
                self._add(t.container, new)
            t.switches, t.switched = now, t.switched + new

    def _relist(self) -> None:  # call with the lock held
        """Follow the tracked process trees: open the threads that are new, close those gone."""
        want: dict[int, tuple[str, int]] = {}  # TID → (container, PID)
        for c, pids in self.tracked.items():
            for pid in process_tree(pids):
                try:
                    want.update((int(tid), (c, pid)) for tid in os.listdir(f"/proc/{pid}/task"))
                except OSError:
                    continue
        for tid in [tid for tid in self.threads if tid not in want]:
            self._forget(tid)
        for tid, (c, pid) in want.items():
            if tid in self.threads:
                self.threads[tid].container = c
                continue
            fds: list[int] = []
            try:
                for name in ("syscall", "status"):
                    fds.append(os.open(f"/proc/{pid}/task/{tid}/{name}", os.O_RDONLY))
                self.threads[tid] = _SampledThread(c, fds[0], fds[1], switches=_voluntary_switches(fds[1]))
            except (OSError, ValueError):
                for fd in fds:  # the thread ended meanwhile
                    os.close(fd)

    def _forget(self, tid: int) -> None:
        t = self.threads.pop(tid)
        os.close(t.syscall_fd)
        os.close(t.status_fd)

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            with self.lock:  # update() closes fds: read none of them meanwhile
                self.samples += 1
                if self.samples % self.tick_every == 0:
                    self._tick()
                for t in self.threads.values():
                    if not t.active:
                        continue
                    try:
                        first = os.pread(t.syscall_fd, 32, 0).split(b" ", 1)[0]
                    except OSError:
                        continue
                    t.sampled = True
                    if first.isdigit():  # asleep in that syscall ("running" otherwise)
                        t.blocked_in = int(first)

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            for tid in list(self.threads):
                self._forget(tid)
            self.tracked = {}


BACKENDS = {"perf": PerfMonitor, "bpftrace": BpftraceMonitor, "proc": ProcSampler}


def available() -> list[str]:
    """The backends that work on this machine, best first."""
    out = []
    for name in ("perf", "bpftrace", "proc"):
        try:
            m = BACKENDS[name]()
        except OSError:
            continue
        m.close()
        out.append(name)
    return out


def choose(preference: str = "auto", passed_over: list[str] | None = None) -> FutexMonitor:
    """The first backend that works, best first (or the one asked for); the choice is logged.
    ``passed_over`` gets why each backend tried before it did not work (``"perf: ..."``)."""
    order = ["perf", "bpftrace", "proc"] if preference == "auto" else [preference]
    errors = [] if passed_over is None else passed_over
    for name in order:
        try:
            m = BACKENDS[name]()
            log.info("futex monitor: %s", name)
            return m
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise OSError("no futex monitor works here: " + "; ".join(errors))
