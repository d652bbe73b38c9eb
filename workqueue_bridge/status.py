"""The Work Queue master's status, read over its own port.

Any process can read a master: ``GET http://HOST:PORT/queue_status`` (also
``/task_status`` and ``/worker_status``) answers a JSON list. The parsers here
keep only the fields HTA uses and normalise CCTools' quirks: category names
keep the quotes of ``CATEGORY="x"`` in a Makeflow file, task states are
``WAITING`` or ``running`` depending on the list, times are microseconds.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from pydantic import BaseModel

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
    out = []
    for t in data or []:
        start = _num(t.get("time_when_commit_start"), 0.0)
        out.append(
            TaskStatus(
                task_id=int(_num(t.get("taskid"))),
                state=str(t.get("state", "")).lower(),
                category=clean_category(t.get("category")),
                cores=_declared(t.get("cores")),
                memory_mb=_declared(t.get("memory")),
                disk_mb=_declared(t.get("disk")),
                worker=t.get("address_port"),
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


class MasterStatusClient:
    """Reads a Work Queue master's HTTP status endpoints with aiohttp."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0):
        self.base = f"http://{host}:{port}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

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
            # the master answers without a JSON content type
            return await resp.json(content_type=None)

    async def queue_status(self) -> QueueStatus:
        return parse_queue_status(await self._get("/queue_status"))

    async def task_status(self) -> list[TaskStatus]:
        return parse_task_status(await self._get("/task_status"))

    async def worker_status(self) -> list[WorkerStatus]:
        return parse_worker_status(await self._get("/worker_status"))

    async def snapshot(self, now: float) -> MasterSnapshot:
        # one at a time: the master serves status requests from its own event loop
        q = await self.queue_status()
        t = await self.task_status()
        w = await self.worker_status()
        return MasterSnapshot(taken_at=now, queue=q, tasks=t, workers=w)
