"""Reading a Work Queue master over its own port.

``/task_status`` lists every task the master holds (about 150 bytes each: 15 MB for 100k
waiting tasks, about a second of CPU to serve and to read), while ``/queue_status`` is a
few kB whatever the queue. :class:`MasterStatusClient` therefore reads ``/task_status``
again only when ``/queue_status`` says the task table may have changed
(:func:`task_table_mark`), and otherwise hands back the tasks it read last, which are then
what a new read would have given. Between reads of a moved table, the master's transactions
log (:mod:`workqueue_bridge.transactions`), read as it grows, brings the kept table forward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from workqueue_bridge import cctools_json
from workqueue_bridge.snapshot import LiveSnapshot, MasterSnapshot
from workqueue_bridge.status_json import (
    QueueStatus,
    TaskStatus,
    WorkerStatus,
    parse_queue_status,
    parse_task_status,
    parse_worker_status,
)
from workqueue_bridge.task_table import TaskTable
from workqueue_bridge.transactions import Event, ManagerEvent, TransactionsTail

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


#: /queue_status counters of what the transactions log writes a line for (a dispatch; a
#: retrieval): while they stay put, a log with no new line has missed nothing
_LOGGED_COUNTERS = ("tasks_dispatched", "tasks_done")


def _logged_moves(data: Any) -> tuple | None:
    d = data[0] if isinstance(data, list) and data else data
    if not isinstance(d, dict) or any(k not in d for k in _LOGGED_COUNTERS):
        return None
    return tuple(d[k] for k in _LOGGED_COUNTERS)


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
    ``ObservationBuilder._dispatched_since``, :func:`~workqueue_bridge.task_table.at_the_counts`).
    A table is never older than 50 reads' time (1/``read_budget``); small queues read in a few ms, so theirs is read at
    every change as before (``read_budget=0``: always). Reading fresh for every decision
    instead cost 65 ms of CPU per second at 100k tasks, over the 20 ms goal.
    ``full_tasks``: a snapshot's ``tasks`` lists the waiting tasks too (see
    :class:`LiveSnapshot`). ``bytes_read``, ``requests``, ``task_reads`` and
    ``stale_reuses`` (a changed table not read again yet) count what it has done so far.

    ``transactions_log``: the master's transactions log (``makeflow -T wq`` writes
    ``<workflow>.wqlog.tr``). Each snapshot then first reads the lines appended since the
    last one (three or four lines of about 150 bytes over a task's life, where one
    ``/task_status`` of 100k tasks is 15 MB) and applies
    them to a kept table (:meth:`TaskTable.apply`): the tasks dispatched since leave the
    waiting runs and run, from their start, and the tasks done leave. ``/task_status``
    stays the ground truth, read within the budget as before (the log is skipped up to
    that read: the table has what it says); a log that went away, shrank or was replaced
    since, or a new master in it, is not applied again before the next read, which is
    then not held back by the budget. Submissions still come from the counts where the
    master logs none (makeflow 8.0). The log is read before ``/queue_status``: the counts
    are never older than the table, as :func:`~workqueue_bridge.task_table.at_the_counts`
    needs. ``log_events`` counts the events read, ``log_gaps`` the breaks seen."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0, reuse_tasks: bool = True,
                 full_tasks: bool = False, read_budget: float = 0.02, transactions_log: Path | str | None = None):
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
        self.tail = TransactionsTail(transactions_log) if transactions_log is not None else None
        self._synced = False  # the tail has every line since the kept table's read
        self._lines_at_read = 0  # the tail's lines then
        self._moves_at_read: tuple | None = None  # _logged_moves of the counts then
        self._current_at = 0.0  # time.monotonic() the kept table is known current at
        self.log_events = 0
        self.log_gaps = 0

    async def __aenter__(self) -> MasterStatusClient:
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
        """How old the task table the last snapshot carried is: seconds since it began to be
        read or, brought forward by the transactions log, since the log was last read, when
        the log has missed nothing since the read (its lines grew, or the dispatches and
        retrievals the counts show did not move)."""
        if self._table is None:
            return None
        return time.monotonic() - max(self._table.read_at, self._current_at)

    def table_read_age_s(self) -> float | None:
        """Seconds since the task table the last snapshot carried began to be read from ``/task_status``."""
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
        if self.tail is not None:  # what the log holds by now, the table will have
            self.tail.skip_to_end()
            self._synced, self._lines_at_read, self._current_at = True, self.tail.lines, started
            self.log_gaps = self.tail.gaps
        # marked with the /queue_status read before it: a change in between shows next time
        table = self._table = TaskTable(mark, await self._get("/task_status"), self.full_tasks, started)
        took = time.monotonic() - started
        self._next_read_at = time.monotonic() + (took / self.read_budget if self.read_budget else 0.0)
        return table, False

    def _read_log(self) -> list[Event]:
        """The transactions log's events since the last snapshot, if they can be applied to
        the kept table (none were missed since it was read)."""
        if self.tail is None or self._table is None or not self.reuse_tasks:
            return []
        events = self.tail.poll()
        self.log_events += len(events)
        if self.tail.gaps != self.log_gaps or any(isinstance(e, ManagerEvent) and e.started for e in events):
            self.log_gaps = self.tail.gaps
            self._synced = False
            self._next_read_at = 0.0  # read the table again at its next change, whatever the budget
        return events if self._synced else []

    async def snapshot(self, now: float) -> MasterSnapshot:
        """One read of the master; a task table that changed since it was last read may be
        kept, within ``read_budget``."""
        # one at a time: the master serves status requests from its own event loop
        polled_at = time.monotonic()
        events = self._read_log()  # (before the counts: they must not be older than the table)
        raw = await self._get("/queue_status")
        q = parse_queue_status(raw)
        before = self._table
        table, kept = await self._task_table_kept(task_table_mark(raw))
        if table is before and self._synced and self.tail is not None:
            table.apply(events, q.categories)
            moves = _logged_moves(raw)
            if self.tail.lines > self._lines_at_read or (moves is not None and moves == self._moves_at_read):
                self._current_at = polled_at
        elif table is not before:
            self._moves_at_read = _logged_moves(raw)
        w = await self.worker_status()
        return LiveSnapshot.model_construct(taken_at=now, queue=q, tasks=table.tasks, workers=w,
                                            waiting_segments=table.waiting_segments, running_tasks=table.running,
                                            table_kept=kept)
