"""The Work Queue master's status answers, parsed.

Any process can read a master: ``GET http://HOST:PORT/queue_status`` (also ``/task_status``
and ``/worker_status``) answers a JSON list. The parsers here keep only the fields HTA uses
and normalise CCTools' quirks: category names keep the quotes of ``CATEGORY="x"`` in a
Makeflow file, task states are ``WAITING`` or ``running`` depending on the list, times are
microseconds.
"""

from __future__ import annotations

from typing import Any

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


def num(v: Any, default: float = 0.0) -> float:
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
    #: the master's link, since it started: bytes it sent to workers and brought back, and
    #: the seconds it spent doing so (CCTools reports ``time_send``/``time_receive`` in µs).
    #: The transactions log of the Work Queue HTA runs (9.9) wrote no ``TRANSFER`` line for
    #: the inputs of a run checked here; these counters are where the master says what its
    #: transfers took, both ways
    bytes_sent: float = 0.0
    bytes_received: float = 0.0
    time_send_s: float = 0.0
    time_receive_s: float = 0.0


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


def declared(v: Any) -> float | None:
    x = num(v, -1.0)
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
                waiting=int(num(c.get("tasks_waiting"))),
                running=int(num(c.get("tasks_running"))),
                done=int(num(c.get("tasks_done"))),
                failed=int(num(c.get("tasks_failed"))),
                max_cores=declared(c.get("max_cores")),
                max_memory_mb=declared(c.get("max_memory")),
                max_disk_mb=declared(c.get("max_disk")),
            )
        )
    return QueueStatus(
        port=int(num(d.get("port"))) or None,
        project=d.get("project"),
        tasks_waiting=int(num(d.get("tasks_waiting"))),
        tasks_running=int(num(d.get("tasks_running"))),
        tasks_done=int(num(d.get("tasks_done"))),
        tasks_failed=int(num(d.get("tasks_failed"))),
        workers_connected=int(num(d.get("workers_connected"))),
        categories=cats,
        bytes_sent=num(d.get("bytes_sent")),
        bytes_received=num(d.get("bytes_received")),
        time_send_s=num(d.get("time_send")) / 1e6,
        time_receive_s=num(d.get("time_receive")) / 1e6,
    )


def parse_task_status(data: Any) -> list[TaskStatus]:
    """The tasks of ``/task_status`` in task id order. Built without pydantic's validation
    (100k tasks: 0.15 s instead of 0.75 s); every field is already of its declared type,
    so the models equal validated ones (``tests/test_status_scale.py`` checks)."""
    out = []
    make = TaskStatus.model_construct
    for t in data or []:
        start = num(t.get("time_when_commit_start"), 0.0)
        worker = t.get("address_port")
        out.append(
            make(
                task_id=int(num(t.get("taskid"))),
                state=str(t.get("state", "")).lower(),
                category=clean_category(t.get("category")),
                cores=declared(t.get("cores")),
                memory_mb=declared(t.get("memory")),
                disk_mb=declared(t.get("disk")),
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
                num(w.get(k)) > 0 for k in ("cores_total", "memory_total", "disk_total")):
            continue
        ids = [int(num(v)) for k, v in w.items() if k.startswith("current_task_") and k.endswith("_id")]
        start = num(w.get("start_time"), 0.0)
        out.append(
            WorkerStatus(
                address=w["address_port"],
                hostname=str(w.get("hostname", "")),
                cores=num(w.get("cores_total")),
                memory_mb=num(w.get("memory_total")),
                disk_mb=num(w.get("disk_total")),
                cores_in_use=num(w.get("cores_inuse")),
                memory_in_use_mb=num(w.get("memory_inuse")),
                disk_in_use_mb=num(w.get("disk_inuse")),
                tasks_running=int(num(w.get("total_tasks_running"), len(ids))),
                task_ids=sorted(ids),
                started_at=start * US if start > 0 else None,
            )
        )
    return out
