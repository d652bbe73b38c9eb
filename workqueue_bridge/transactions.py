"""Work Queue's transactions log, read as it grows.

A master started with a transactions log (``makeflow -T wq`` writes ``<workflow>.wqlog.tr``
beside its ``.wqlog``: ``-L FILE`` makes it ``FILE.tr``; the Python API's
``WorkQueue(transactions_log=...)``) appends a line for every change of a task's state and
every worker that comes or goes, and flushes it at once::

    # time manager_pid TASK taskid WAITING category_name (FIRST_RESOURCES|MAX_RESOURCES) {resources_requested}
    # time manager_pid TASK taskid RUNNING worker_address (FIRST_RESOURCES|MAX_RESOURCES) {resources_allocated}
    # time manager_pid TASK taskid WAITING_RETRIEVAL worker_address
    # time manager_pid TASK taskid (RETRIEVED|DONE) (SUCCESS|SIGNAL|...) exit_code {limits_exceeded} {measured}
    # time manager_pid WORKER worker_id host:port (CONNECTION|DISCONNECTION reason)
    # time manager_pid MANAGER (START|END)

(times in µs since the epoch). makeflow 8.0 logs no ``WAITING`` line when it submits a
task (the Python API does): a task appears at its dispatch. Appending a line costs the
master nothing it would notice, and reading the new lines costs the reader only what was
appended since it last looked, where ``/task_status`` answers the whole table every time.

:class:`TransactionsTail` keeps its offset in the file and hands back the events of the
complete lines appended since; a line still being written is read once it is whole, a
line it cannot parse is counted and skipped, and a file that shrank, was replaced or went
away is counted as a gap (events were missed: the caller reads the table again).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workqueue_bridge.status_json import clean_category

#: task states a ``TASK`` line can carry
TASK_STATES = frozenset({"WAITING", "RUNNING", "WAITING_RETRIEVAL", "RETRIEVED", "DONE"})
#: a resources value's unit → MB (memory and disk; CCTools writes "MB")
_MB = {"MB": 1.0, "MiB": 1.0, "GB": 1024.0, "GiB": 1024.0, "KB": 1 / 1024, "KiB": 1 / 1024}
#: what one poll reads at most (the rest is read by the next poll)
MAX_READ = 64 << 20


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A ``TASK`` line. ``cores``, ``memory_mb`` and ``disk_mb`` are what the line's
    resources say (RUNNING: allocated; WAITING: requested), None where it says nothing."""

    time: float  # Unix seconds
    task_id: int
    state: str  # one of TASK_STATES
    worker: str | None = None  # RUNNING, WAITING_RETRIEVAL: the worker's host:port
    category: str | None = None  # WAITING
    cores: float | None = None
    memory_mb: float | None = None
    disk_mb: float | None = None
    result: str | None = None  # RETRIEVED, DONE: SUCCESS, SIGNAL, RESOURCE_EXHAUSTION...


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """A worker's ``CONNECTION`` or ``DISCONNECTION`` (``RESOURCES`` lines are skipped)."""

    time: float
    address: str  # host:port, as /worker_status and RUNNING lines give it
    connected: bool
    reason: str | None = None  # a disconnection's: IDLE_OUT, FAST_ABORT, FAILURE, ...


@dataclass(frozen=True, slots=True)
class ManagerEvent:
    time: float
    pid: int
    started: bool  # START, else END


Event = TaskEvent | WorkerEvent | ManagerEvent


def _resources(text: str) -> tuple[float | None, float | None, float | None]:
    """(cores, memory MB, disk MB) of a ``{"cores":[1,"cores"],"memory":[1024,"MB"],...}``."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("resources are not an object")
    out: list[float | None] = []
    for key in ("cores", "memory", "disk"):
        v = data.get(key)
        value: Any = v
        unit: Any = ""
        if isinstance(v, list):
            value, unit = (v[0] if v else None), (v[1] if len(v) > 1 else "")
        if value is None:
            out.append(None)
            continue
        x = float(value)
        if key != "cores":
            x *= _MB.get(str(unit), 1.0)
        out.append(x)
    return out[0], out[1], out[2]


def parse_line(line: str) -> Event | None:
    """The event of one line; None for a comment, a blank line or a line of a kind not
    read here (``CATEGORY``, a worker's ``RESOURCES``). Raises ValueError on a line that is
    none of these (garbage)."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    parts = line.split(None, 3)
    if len(parts) < 3:
        raise ValueError(f"too short: {line[:80]!r}")
    t = int(parts[0]) / 1_000_000  # (exact to the µs, where * 1e-6 is not)
    kind = parts[2]
    rest = parts[3] if len(parts) > 3 else ""
    if kind == "TASK":
        words = rest.split(None, 2)
        if len(words) < 2 or words[1] not in TASK_STATES:
            raise ValueError(f"not a task line: {line[:80]!r}")
        tid, state = int(words[0]), words[1]
        tail = words[2] if len(words) > 2 else ""
        if state in ("WAITING", "RUNNING"):
            who, _, res = tail.partition(" ")
            brace = res.find("{")
            if not who or brace < 0:
                raise ValueError(f"a {state} line without its resources: {line[:80]!r}")
            cores, memory, disk = _resources(res[brace:])
            if state == "WAITING":
                return TaskEvent(t, tid, state, category=clean_category(who), cores=cores, memory_mb=memory, disk_mb=disk)
            return TaskEvent(t, tid, state, worker=who, cores=cores, memory_mb=memory, disk_mb=disk)
        if state == "WAITING_RETRIEVAL":
            return TaskEvent(t, tid, state, worker=tail.split()[0] if tail.strip() else None)
        return TaskEvent(t, tid, state, result=tail.split()[0] if tail.strip() else None)
    if kind == "WORKER":
        words = rest.split()
        if len(words) >= 3 and words[2] in ("CONNECTION", "DISCONNECTION"):
            return WorkerEvent(t, words[1], words[2] == "CONNECTION", words[3] if len(words) > 3 else None)
        if len(words) >= 2 and words[1] == "RESOURCES":
            return None
        raise ValueError(f"not a worker line: {line[:80]!r}")
    if kind == "MANAGER" and rest in ("START", "END"):
        return ManagerEvent(t, int(parts[1]), rest == "START")
    if kind in ("CATEGORY", "TRANSFER", "CACHE", "LIBRARY"):
        return None
    raise ValueError(f"unknown line: {line[:80]!r}")


class TransactionsTail:
    """Reads a transactions log as it grows: :meth:`poll` returns the events of the whole
    lines appended since the last poll. ``lines`` counts the lines consumed, ``garbage``
    those that did not parse, ``gaps`` the times the file shrank, was replaced or went
    away after being read (events may have been missed)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.offset = 0
        self._inode: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self.lines = 0
        self.garbage = 0
        self.gaps = 0

    def _stat(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def _check(self, st: os.stat_result | None) -> None:
        """Start over, counting a gap, if the file went, was replaced or shrank."""
        if st is None:
            if self._inode is not None:
                self.gaps += 1
            self._inode, self.offset = None, 0
            return
        ident = (st.st_dev, st.st_ino)
        if self._inode is not None and (ident != self._inode or st.st_size < self.offset):
            self.gaps += 1
            self.offset = 0
        self._inode = ident

    def skip_to_end(self) -> bool:
        """Skip what the file holds now (up to its last whole line) without reading it:
        what the caller knows from elsewhere. False if there is no file (then anything
        written to it later is new)."""
        st = self._stat()
        self._check(st)
        if st is None:
            return False
        end = st.st_size
        try:
            with open(self.path, "rb") as f:
                pos = end
                while pos > 0:  # back to the end of the last whole line
                    start = max(0, pos - 65536)
                    f.seek(start)
                    chunk = f.read(pos - start)
                    nl = chunk.rfind(b"\n")
                    if nl >= 0:
                        self.offset = start + nl + 1
                        return True
                    pos = start
                self.offset = 0
        except OSError:
            return False
        return True

    def poll(self) -> list[Event]:
        """The events of the whole lines appended since the last poll (or skip)."""
        st = self._stat()
        self._check(st)
        if st is None or st.st_size <= self.offset:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(min(st.st_size - self.offset, MAX_READ))
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:  # a line still being written
            return []
        self.offset += end + 1
        out: list[Event] = []
        for raw in data[:end].split(b"\n"):
            self.lines += 1
            try:
                event = parse_line(raw.decode("utf-8", "replace"))
            except (ValueError, IndexError, TypeError):
                self.garbage += 1
                continue
            if event is not None:
                out.append(event)
        return out
