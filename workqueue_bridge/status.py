"""The Work Queue master's status, read over its own port.

Any process can read a master: ``GET http://HOST:PORT/queue_status`` (also
``/task_status`` and ``/worker_status``) answers a JSON list. The parsers here
keep only the fields HTA uses and normalise CCTools' quirks: category names
keep the quotes of ``CATEGORY="x"`` in a Makeflow file, task states are
``WAITING`` or ``running`` depending on the list, times are microseconds.

``/task_status`` lists every task the master holds (about 150 bytes each: 15 MB
for 100k waiting tasks, about a second of CPU to serve and to read), while
``/queue_status`` is a few kB whatever the queue. :class:`MasterStatusClient`
therefore reads ``/task_status`` again only when ``/queue_status`` says the task
table may have changed (:func:`task_table_mark`), and otherwise hands back the
tasks it read last, which are then what a new read would have given.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
from pydantic import BaseModel, Field

from workqueue_bridge import cctools_json

US = 1e-6


def clean_category(name: Any) -> str:
    """``'"align"'`` → ``'align'``; a missing category is ``'default'``."""
    if not name:
        return "default"
    s = str(name).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    return s or "default"


def _num(v: Any, default: float = 0.0) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


class CategoryStatus(BaseModel):
    name: str
    waiting: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    max_cores: float | None = None
    max_memory_mb: float | None = None
    max_disk_mb: float | None = None


class QueueStatus(BaseModel):
    port: int | None = None
    project: str | None = None
    tasks_waiting: int = 0
    tasks_running: int = 0
    tasks_done: int = 0
    tasks_failed: int = 0
    workers_connected: int = 0
    categories: list[CategoryStatus] = []


class TaskStatus(BaseModel):
    task_id: int
    state: str  # "waiting" | "running" | ...
    category: str
    cores: float | None = None  # None: not declared
    memory_mb: float | None = None
    disk_mb: float | None = None
    worker: str | None = None  # "ip:port" of the worker running it
    started_at: float | None = None  # Unix time the dispatch began


class WorkerStatus(BaseModel):
    address: str  # "ip:port" of the worker's connection
    hostname: str = ""
    cores: float = 0
    memory_mb: float = 0
    disk_mb: float = 0
    cores_in_use: float = 0
    memory_in_use_mb: float = 0
    disk_in_use_mb: float = 0
    tasks_running: int = 0
    task_ids: list[int] = []
    started_at: float | None = None  # Unix time the worker connected


def _declared(v: Any) -> float | None:
    x = _num(v, -1.0)
    return x if x > 0 else None


def parse_queue_status(data: Any) -> QueueStatus:
    d = data[0] if isinstance(data, list) and data else (data or {})
    cats = []
    for c in d.get("categories", []):
        name = c.get("category")
        if name == "whole queue":
            continue
        cats.append(
            CategoryStatus(
                name=clean_category(name),
                waiting=int(_num(c.get("tasks_waiting"))),
                running=int(_num(c.get("tasks_running"))),
                done=int(_num(c.get("tasks_done"))),
                failed=int(_num(c.get("tasks_failed"))),
                max_cores=_declared(c.get("max_cores")),
                max_memory_mb=_declared(c.get("max_memory")),
                max_disk_mb=_declared(c.get("max_disk")),
            )
        )
    return QueueStatus(
        port=int(_num(d.get("port"))) or None,
        project=d.get("project"),
        tasks_waiting=int(_num(d.get("tasks_waiting"))),
        tasks_running=int(_num(d.get("tasks_running"))),
        tasks_done=int(_num(d.get("tasks_done"))),
        tasks_failed=int(_num(d.get("tasks_failed"))),
        workers_connected=int(_num(d.get("workers_connected"))),
        categories=cats,
    )


def parse_task_status(data: Any) -> list[TaskStatus]:
    """The tasks of ``/task_status`` in task id order. Built without pydantic's validation
    (100k tasks: 0.15 s instead of 0.75 s); every field is already of its declared type,
    so the models equal validated ones (``tests/test_status_scale.py`` checks)."""
    out = []
    make = TaskStatus.model_construct
    for t in data or []:
        start = _num(t.get("time_when_commit_start"), 0.0)
        worker = t.get("address_port")
        out.append(
            make(
                task_id=int(_num(t.get("taskid"))),
                state=str(t.get("state", "")).lower(),
                category=clean_category(t.get("category")),
                cores=_declared(t.get("cores")),
                memory_mb=_declared(t.get("memory")),
                disk_mb=_declared(t.get("disk")),
                worker=None if worker is None else str(worker),
                started_at=start * US if start > 0 else None,
            )
        )
    out.sort(key=lambda t: t.task_id)
    return out


def parse_worker_status(data: Any) -> list[WorkerStatus]:
    """The workers that can take tasks. The master lists a worker from the moment it
    accepts the connection, before its handshake (hostname ``unknown``) and its resource
    report (all totals 0); Work Queue sends such a worker nothing, so neither do we count
    it as connected (seen in CI: a worker listed with 0 cores for one poll)."""
    out = []
    for w in data or []:
        if not w.get("address_port"):
            continue
        if w.get("hostname") == "unknown" or not any(
                _num(w.get(k)) > 0 for k in ("cores_total", "memory_total", "disk_total")):
            continue
        ids = [int(_num(v)) for k, v in w.items() if k.startswith("current_task_") and k.endswith("_id")]
        start = _num(w.get("start_time"), 0.0)
        out.append(
            WorkerStatus(
                address=w["address_port"],
                hostname=str(w.get("hostname", "")),
                cores=_num(w.get("cores_total")),
                memory_mb=_num(w.get("memory_total")),
                disk_mb=_num(w.get("disk_total")),
                cores_in_use=_num(w.get("cores_inuse")),
                memory_in_use_mb=_num(w.get("memory_inuse")),
                disk_in_use_mb=_num(w.get("disk_inuse")),
                tasks_running=int(_num(w.get("total_tasks_running"), len(ids))),
                task_ids=sorted(ids),
                started_at=start * US if start > 0 else None,
            )
        )
    return out


class MasterSnapshot(BaseModel):
    """One consistent-enough read of the master (three requests, back to back)."""

    taken_at: float
    queue: QueueStatus
    tasks: list[TaskStatus]
    workers: list[WorkerStatus]
    #: ``tasks`` is an earlier read's table, kept within the read budget though the counts in
    #: ``queue`` moved since (:class:`MasterStatusClient`); recorded, so a replay sees it too
    table_kept: bool = False


#: /queue_status counters that move whenever a task enters or leaves the master's task table
#: or changes state: submitted and dispatched only grow (a submission, a dispatch); without
#: them moving, waiting (READY), running (RUNNING), with_results (WAITING_RETRIEVAL),
#: on_workers, done (counted at retrieval), failed and cancelled tell every other move
_TASK_COUNTERS = ("tasks_submitted", "tasks_dispatched", "tasks_waiting", "tasks_running", "tasks_on_workers",
                  "tasks_with_results", "tasks_done", "tasks_failed", "tasks_cancelled", "tasks_exhausted_attempts")


def task_table_mark(data: Any) -> tuple | None:
    """What of a ``/queue_status`` answer must stay equal for ``/task_status`` to answer as
    it did; None if this master does not report enough to tell (always read again).

    A waiting task's reported cores, memory and disk are its category's allocation, which
    moves with the category's declared maximum and learned peaks (the per-category entries,
    kept whole here) and with the largest worker (``*_largest``); a running task's are fixed
    when it is dispatched. Every other ``tasks_*`` and ``workers_*`` figure is kept too: a
    mark that changes for nothing costs one read, one that stays put wrongly costs a stale
    observation."""
    d = data[0] if isinstance(data, list) and data else data
    if not isinstance(d, dict) or any(k not in d for k in _TASK_COUNTERS):
        return None
    kept = tuple(sorted((k, repr(v)) for k, v in d.items()
                        if k.startswith(("tasks_", "workers_")) or k.endswith("_largest") or k == "workers"))
    return kept, json.dumps(d.get("categories"), sort_keys=True)


class TaskTable:
    """One read of ``/task_status``, kept while ``mark`` holds: the waiting tasks as runs of
    alike consecutive ids (see :func:`~workqueue_bridge.observation.snapshot_waiting`), the
    running ones, and ``tasks`` in id order — every task with ``full`` (a recording replays
    through them), else only those not waiting (no model per waiting task: most of the cost
    of reading 100k of them)."""

    def __init__(self, mark: tuple | None, data: Any, full: bool = False, read_at: float = 0.0):
        from workqueue_bridge.observation import split_task_status, waiting_segments  # they import this module

        self.mark = mark
        self.read_at = read_at  # time.monotonic() when its read began
        if full:
            self.tasks = parse_task_status(data)
            self.waiting_segments = waiting_segments(self.tasks)
        else:
            self.tasks, self.waiting_segments = split_task_status(data)
        self.running = [t for t in self.tasks if t.state == "running"]


class LiveSnapshot(MasterSnapshot):
    """A read of a real master by :class:`MasterStatusClient`: a :class:`MasterSnapshot` that
    also carries what the observation builder would otherwise work out from ``tasks`` on
    every read. ``tasks`` lists every task, as ``/task_status`` does, only from a client with
    ``full_tasks`` (a recording: a recorded snapshot replays through ``tasks``, and these
    two are left out of dumps); otherwise the waiting ones are only in the segments."""

    waiting_segments: list | None = Field(default=None, exclude=True)
    running_tasks: list[TaskStatus] | None = Field(default=None, exclude=True)


class MasterStatusClient:
    """Reads a Work Queue master's HTTP status endpoints with aiohttp.

    :meth:`snapshot` reads ``/task_status`` only when :func:`task_table_mark` of the
    ``/queue_status`` just read differs from the one read before the last ``/task_status``
    (``reuse_tasks=False``, or a master whose counters cannot tell: every time), and no
    sooner than the last read's wall time divided by ``read_budget`` after it: a queue
    that moves every second would otherwise have the whole table read every second.
    At 100k tasks one read takes 0.3–2.1 s (measured on this project's 2-core VM on
    different days) and holds the master meanwhile (it serves status from the loop that
    dispatches tasks); with the default 2 %, a moving table is read every 15–100 s, and the
    observations in between — decisions included: HTA
    decides every 5 s — keep the table of the last read, while ``/queue_status``'s counts
    and ``/worker_status`` are read at every snapshot (and bring a kept table up to date:
    ``ObservationBuilder._dispatched_since``, :func:`~workqueue_bridge.observation.at_the_counts`).
    A table is never older than 50 reads' time (1/``read_budget``); small queues read in a few ms, so theirs is read at
    every change as before (``read_budget=0``: always). Reading fresh for every decision
    instead cost 65 ms of CPU per second at 100k tasks, over the 20 ms goal.
    ``full_tasks``: a snapshot's ``tasks`` lists the waiting tasks too (see
    :class:`LiveSnapshot`). ``bytes_read``, ``requests``, ``task_reads`` and
    ``stale_reuses`` (a changed table not read again yet) count what it has done so far."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0, reuse_tasks: bool = True,
                 full_tasks: bool = False, read_budget: float = 0.02):
        if not 0 <= read_budget <= 1:
            raise ValueError(f"read_budget must be a fraction of time in [0, 1], not {read_budget}")
        self.base = f"http://{host}:{port}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.reuse_tasks = reuse_tasks
        self.full_tasks = full_tasks
        self.read_budget = read_budget
        self._table: TaskTable | None = None
        self._next_read_at = 0.0  # time.monotonic() before which a changed table is kept
        self.bytes_read = 0
        self.requests = 0
        self.task_reads = 0
        self.stale_reuses = 0

    async def __aenter__(self) -> "MasterStatusClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _get(self, path: str) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        async with self._session.get(self.base + path) as resp:
            resp.raise_for_status()
            body = await resp.read()
            self.bytes_read += len(body)
            self.requests += 1
            # what resp.json(content_type=None) does: the master answers without a JSON content type
            text = body.decode(resp.get_encoding())
            return cctools_json.loads(text) if text.strip() else None

    def table_age_s(self) -> float | None:
        """Seconds since the task table the last snapshot carried began to be read."""
        return None if self._table is None else time.monotonic() - self._table.read_at

    async def queue_status(self) -> QueueStatus:
        return parse_queue_status(await self._get("/queue_status"))

    async def task_status(self) -> list[TaskStatus]:
        return parse_task_status(await self._get("/task_status"))

    async def worker_status(self) -> list[WorkerStatus]:
        return parse_worker_status(await self._get("/worker_status"))

    async def _task_table_kept(self, mark: tuple | None) -> tuple[TaskTable, bool]:
        """The task table to use with counts marked ``mark``, and whether it was kept
        though it changed (within the read budget)."""
        table = self._table
        if self.reuse_tasks and table is not None and mark is not None:
            if table.mark == mark:
                return table, False
            if time.monotonic() < self._next_read_at:
                self.stale_reuses += 1
                return table, True
        self.task_reads += 1
        started = time.monotonic()
        # marked with the /queue_status read before it: a change in between shows next time
        table = self._table = TaskTable(mark, await self._get("/task_status"), self.full_tasks, started)
        took = time.monotonic() - started
        self._next_read_at = time.monotonic() + (took / self.read_budget if self.read_budget else 0.0)
        return table, False

    async def snapshot(self, now: float) -> MasterSnapshot:
        """One read of the master; a task table that changed since it was last read may be
        kept, within ``read_budget``."""
        # one at a time: the master serves status requests from its own event loop
        raw = await self._get("/queue_status")
        q = parse_queue_status(raw)
        table, kept = await self._task_table_kept(task_table_mark(raw))
        w = await self.worker_status()
        return LiveSnapshot.model_construct(taken_at=now, queue=q, tasks=table.tasks, workers=w,
                                            waiting_segments=table.waiting_segments, running_tasks=table.running,
                                            table_kept=kept)
