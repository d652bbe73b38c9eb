"""A worker's life as every backend keeps it: start failures, workers the master stopped
listing, and the work lost with a worker that went away.

Local processes, Kubernetes pods and batch jobs differ in how a worker is started and
stopped; what happens once it is asked for is the same. A worker that never connects
counts towards :data:`MAX_START_FAILURES` in a row, after which the run ends with one line
(``fatal``) instead of asking for workers forever. A connected worker the master has not
listed for :data:`DROPPED_AFTER_S` while its process lives was dropped by the master's
keepalive (stalled, or its node went away): it is lost and replaced. A worker lost or
removed takes its running tasks with it; the master runs them again, and the work they had
done is counted (:meth:`Lifecycle.ended`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hta.scaling_log import WorkerRecord
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.task_table import snapshot_running

#: workers in a row that ended before connecting, before the run is given up
MAX_START_FAILURES = 5
#: a connected worker the master has not listed for this long, while it lives, was dropped
#: by the master (its keepalive gave up): it is lost and replaced
DROPPED_AFTER_S = 3.0

#: task id → (Unix time it started, cores it holds), as the master last showed it
TaskClock = dict[int, tuple[float, float]]


@dataclass
class WorkerLife:
    """What the lifecycle keeps of one connected worker."""

    #: the tasks the master last showed running on it
    tasks: TaskClock = field(default_factory=dict)
    #: when the master was first seen not listing it (None: listed)
    missing_since: float | None = None


def running_by_worker(snap: MasterSnapshot) -> dict[str, TaskClock]:
    """The running tasks of each worker the master lists, by its address. A task that
    declared nothing holds its whole worker's cores."""
    listed = {w.address: w for w in snap.workers}
    out: dict[str, TaskClock] = {}
    for t in snapshot_running(snap):  # not every task: a master may hold 100k waiting ones
        w = listed.get(t.worker or "")
        if w is not None:
            start = snap.taken_at if t.started_at is None else t.started_at
            out.setdefault(w.address, {})[t.task_id] = (start, t.cores or w.cores)
    return out


class Lifecycle:
    """The part of a backend's bookkeeping every backend shares; see the module."""

    def __init__(self, max_start_failures: int = MAX_START_FAILURES, dropped_after_s: float = DROPPED_AFTER_S):
        self.max_start_failures = max_start_failures
        self.dropped_after_s = dropped_after_s
        #: workers in a row that ended before connecting (reset when one connects)
        self.start_failures = 0
        #: set when workers cannot start: the run cannot go on (one line, with the cause)
        self.fatal: str | None = None
        self._events: list[WorkerRecord] = []

    # -- events ---------------------------------------------------------------
    def record(self, event: WorkerRecord) -> WorkerRecord:
        self._events.append(event)
        return event

    def flush(self) -> list[WorkerRecord]:
        """The events recorded since the last flush, in the order they happened."""
        out, self._events = self._events, []
        return out

    # -- starting -------------------------------------------------------------
    def connected(self) -> None:
        self.start_failures = 0

    def start_failed(self, fatal_line: Callable[[int], str]) -> int:
        """One more worker ended before connecting; at :attr:`max_start_failures` in a row,
        ``fatal_line(count)`` ends the run. Returns the count."""
        self.start_failures += 1
        if self.start_failures >= self.max_start_failures:
            self.give_up(fatal_line(self.start_failures))
        return self.start_failures

    def give_up(self, line: str) -> None:
        """No worker can ever start: the run ends with ``line`` (the first one said stays)."""
        if self.fatal is None:
            self.fatal = line

    # -- connected workers ------------------------------------------------------
    def listed(self, life: WorkerLife, tasks: TaskClock) -> None:
        """The master lists the worker, running ``tasks``."""
        life.missing_since = None
        life.tasks = tasks

    def dropped(self, life: WorkerLife, taken_at: float) -> bool:
        """The master's read at ``taken_at`` does not list the worker, which still lives:
        True once that has lasted :attr:`dropped_after_s` (the master gave up on it)."""
        if life.missing_since is None:
            life.missing_since = taken_at
        return taken_at - life.missing_since >= self.dropped_after_s

    def ended(self, life: WorkerLife, *, t: float, worker: str, event: str, cores: float | None, at: float,
              reason: str = "") -> WorkerRecord:
        """Record a worker gone while connected (``lost``, ``removed``, ``failed``): its last
        known tasks go with it, and the work they had done by ``at`` (Unix time). The tasks
        are known from the last task table read, which on a large moving queue may be a read
        budget old: the figure is a report's estimate, not what the master runs again."""
        core_s = sum(max(0.0, at - started) * c for started, c in life.tasks.values())
        rec = WorkerRecord(t=round(t, 3), worker=worker, event=event, cores=cores, tasks_lost=len(life.tasks),
                           lost_work_core_s=round(core_s, 3), reason=reason)
        life.tasks = {}
        return self.record(rec)
