"""Monitor: futex system calls per container, summed over its process tree.

Three backends, best first; :func:`choose` takes the first that works here:

1. ``perf`` — a ``perf_event_open`` counter on the ``syscalls:sys_enter_futex``
   tracepoint for every thread (ctypes; needs root or CAP_PERFMON and tracefs,
   which is mounted if absent). Exact, negligible overhead.
2. ``bpftrace`` — one bpftrace process counting futex calls per process.
3. ``proc`` — unprivileged: samples ``/proc/PID/task/TID/syscall`` of every
   thread (fds kept open) and counts the samples blocked in futex (202 on
   x86_64). It counts time blocked, not calls, so it has its own λ.

Counts accumulate until :meth:`reset` (SBCC's cleaning interval).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Protocol

log = logging.getLogger("hta.css")

#: λ per backend: the paper's 30 futex calls for counters; for the sampler,
#: futex-blocked samples at 20 Hz (a CPU-bound task shows none; a futex-heavy one 8–25 in 5 s)
LAMBDA = {"perf": 30.0, "bpftrace": 30.0, "proc": 4.0}
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


class PerfMonitor:
    name = "perf"

    def __init__(self) -> None:
        tf = tracefs_dir()
        if tf is None:
            raise OSError("no tracefs with syscall tracepoints (mount needs root)")
        self.tp_id = int((tf / "events/syscalls/sys_enter_futex/id").read_text())
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fds: dict[int, tuple[str, int]] = {}  # tid → (container, fd)
        self.base: dict[str, int] = {}  # counts of threads that ended, since reset
        self.zero: dict[int, int] = {}  # reading of each fd at the last reset
        fd = self._open(os.getpid())  # prove it works here
        os.close(fd)

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
        want = {}
        for c, pids in containers.items():
            for tid in threads_of(pids):
                want[tid] = c
        for tid in list(self.fds):
            if tid not in want:
                c, fd = self.fds.pop(tid)
                self.base[c] = self.base.get(c, 0) + self._read(fd) - self.zero.pop(tid, 0)
                os.close(fd)
        for tid, c in want.items():
            if tid not in self.fds:
                try:
                    self.fds[tid] = (c, self._open(tid))
                    self.zero[tid] = 0
                except OSError:
                    continue  # the thread ended meanwhile

    def counts(self) -> dict[str, int]:
        out = dict(self.base)
        for tid, (c, fd) in self.fds.items():
            out[c] = out.get(c, 0) + self._read(fd) - self.zero.get(tid, 0)
        return out

    def reset(self) -> None:
        self.base.clear()
        self.zero = {tid: self._read(fd) for tid, (_, fd) in self.fds.items()}

    def close(self) -> None:
        for _, fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


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
class ProcSampler(_Accumulated):
    name = "proc"

    def __init__(self, hz: float = 20.0) -> None:
        super().__init__()
        self.period = 1.0 / hz
        self.fds: dict[int, tuple[str, int]] = {}
        self.stop = threading.Event()
        self.samples = 0
        threading.Thread(target=self._run, daemon=True).start()

    def update(self, containers: dict[str, set[int]]) -> None:
        want = {}
        for c, pids in containers.items():
            for pid in pids:
                try:
                    for t in os.listdir(f"/proc/{pid}/task"):
                        want[(pid, int(t))] = c
                except OSError:
                    continue
        wanted = {tid for _, tid in want}
        with self.lock:
            for tid in [t for t in self.fds if t not in wanted]:
                os.close(self.fds.pop(tid)[1])
            for (pid, tid), c in want.items():
                if tid not in self.fds:
                    try:
                        self.fds[tid] = (c, os.open(f"/proc/{pid}/task/{tid}/syscall", os.O_RDONLY))
                    except OSError:
                        continue

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            with self.lock:
                items = list(self.fds.items())
            hits: dict[str, int] = {}
            for tid, (c, fd) in items:
                try:
                    first = os.pread(fd, 32, 0).split(b" ", 1)[0]
                except OSError:
                    continue
                if first.isdigit() and int(first) == SYS_FUTEX_X86_64:
                    hits[c] = hits.get(c, 0) + 1
            with self.lock:
                self.samples += 1
                for c, n in hits.items():
                    self._add(c, n)

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            for _, fd in self.fds.values():
                os.close(fd)
            self.fds.clear()


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


def choose(preference: str = "auto") -> FutexMonitor:
    """The first backend that works, best first (or the one asked for); the choice is logged."""
    order = ["perf", "bpftrace", "proc"] if preference == "auto" else [preference]
    errors = []
    for name in order:
        try:
            m = BACKENDS[name]()
            log.info("futex monitor: %s", name)
            return m
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise OSError("no futex monitor works here: " + "; ".join(errors))
