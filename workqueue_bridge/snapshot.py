"""One read of the master: its counts, its task table and its workers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from workqueue_bridge.status_json import QueueStatus, TaskStatus, WorkerStatus


class MasterSnapshot(BaseModel):
    """One consistent-enough read of the master (three requests, back to back)."""

    taken_at: float
    queue: QueueStatus
    tasks: list[TaskStatus]
    workers: list[WorkerStatus]
    #: ``tasks`` is an earlier read's table, kept within the read budget though the counts in
    #: ``queue`` moved since (:class:`~workqueue_bridge.status.MasterStatusClient`); recorded, so a replay sees it too
    table_kept: bool = False


class LiveSnapshot(MasterSnapshot):
    """A read of a real master by :class:`~workqueue_bridge.status.MasterStatusClient`: a :class:`MasterSnapshot` that
    also carries what the observation builder would otherwise work out from ``tasks`` on
    every read. ``tasks`` lists every task, as ``/task_status`` does, only from a client with
    ``full_tasks`` (a recording: a recorded snapshot replays through ``tasks``, and these
    two are left out of dumps); otherwise the waiting ones are only in the segments."""

    waiting_segments: list | None = Field(default=None, exclude=True)
    running_tasks: list[TaskStatus] | None = Field(default=None, exclude=True)
