"""Reader for ``Makeflow.makeflowlog``: node state changes with their times.

Each non-comment line is::

    timestamp_us node_id new_state job_id waiting running complete failed aborted total

with states 0 waiting, 1 running, 2 complete, 3 failed, 4 aborted. Comment
lines (``# STARTED``, ``# COMPLETED``, ``# FILE ...``) mark the run's life.
The reader is incremental: call :meth:`MakeflowLog.poll` as often as you like,
it reads only what was appended (and never a half-written line).
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path

from pydantic import BaseModel


class NodeState(IntEnum):
    WAITING = 0
    RUNNING = 1
    COMPLETE = 2
    FAILED = 3
    ABORTED = 4


class NodeEvent(BaseModel):
    time: float  # Unix seconds
    node_id: int
    state: NodeState
    job_id: int
    waiting: int
    running: int
    complete: int
    failed: int
    aborted: int
    total: int


def parse_line(line: str) -> NodeEvent | None:
    parts = line.split()
    if not parts or line.startswith("#") or len(parts) < 10:
        return None
    try:
        v = [int(x) for x in parts[:10]]
    except ValueError:
        return None
    return NodeEvent(
        time=v[0] / 1e6, node_id=v[1], state=NodeState(v[2]), job_id=v[3], waiting=v[4],
        running=v[5], complete=v[6], failed=v[7], aborted=v[8], total=v[9],
    )


class MakeflowLog:
    """Follows a makeflowlog as makeflow appends to it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._offset = 0
        self.events: list[NodeEvent] = []
        self.started_at: float | None = None
        self.completed_at: float | None = None
        self.failed = False
        self.submissions: dict[int, int] = {}  # node → times it was started (re-runs show as > 1)

    def poll(self) -> list[NodeEvent]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        new = []
        for raw in chunk[: end + 1].decode(errors="replace").splitlines():
            if raw.startswith("# STARTED"):
                self.started_at = int(raw.split()[2]) / 1e6
            elif raw.startswith("# COMPLETED"):
                self.completed_at = int(raw.split()[2]) / 1e6
            elif raw.startswith(("# FAILED", "# ABORTED")):
                self.failed = True
            ev = parse_line(raw)
            if ev is None:
                continue
            if ev.state == NodeState.RUNNING:
                self.submissions[ev.node_id] = self.submissions.get(ev.node_id, 0) + 1
            new.append(ev)
        self.events.extend(new)
        return new

    @property
    def latest(self) -> NodeEvent | None:
        return self.events[-1] if self.events else None

    @property
    def retried(self) -> int:
        return sum(n - 1 for n in self.submissions.values() if n > 1)
