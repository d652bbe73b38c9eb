"""Reader for ``Makeflow.makeflowlog``: node state changes with their times.

Each non-comment line is::

    timestamp_us node_id new_state job_id waiting running complete failed aborted total

with states 0 waiting, 1 running, 2 complete, 3 failed, 4 aborted. Comment
lines (``# STARTED``, ``# COMPLETED``, ``# FILE ...``) mark the run's life.
The reader is incremental: call :meth:`MakeflowLog.poll` as often as you like,
it reads only what was appended (and never a half-written line).

A restarted makeflow appends to the same log (each run begins with its own
``# STARTED``) and re-reads all of it, so re-runs and failures are counted
from the point the current run started (a rule the previous run left
unfinished and this one starts again counts as a re-run).

A rule that fails and will be retried is logged FAILED and, at once, WAITING
again; one that failed for good stays FAILED. makeflow 8.0 (``-T wq``) never
exits once such a rule has rules depending on it: :meth:`MakeflowLog.stuck`
tells when it has nothing left to run.
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
        #: every ``# STARTED`` mark, Unix time: each makeflow that opened this log writes one
        self.starts: list[float] = []
        self.completed_at: float | None = None
        self.failed = False
        #: node → times it was started in the current run (re-runs show as > 1)
        self.submissions: dict[int, int] = {}
        #: rules completed in the current run (the log's progress counts also hold those an
        #: earlier run of the workflow completed)
        self.completed_this_run = 0
        #: node → its latest event (any run)
        self.states: dict[int, NodeEvent] = {}
        self._unfinished: set[int] = set()
        #: node → the state a WAITING event put it back from (makeflow's recovery resets the
        #: rules whose outputs are gone, and those a killed run left running)
        self._reset_from: dict[int, NodeState] = {}

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
                self.starts.append(self.started_at)
                # what the previous run started and did not complete, this one runs again (a rule
                # makeflow rebuilds because its outputs were deleted is not a re-run)
                unfinished = (NodeState.RUNNING, NodeState.FAILED, NodeState.ABORTED)
                self._unfinished = {n for n in self.submissions if n in self.states and (
                    self.states[n].state in unfinished
                    or (self.states[n].state == NodeState.WAITING and self._reset_from.get(n) in unfinished))}
                self.submissions = {}
                self._reset_from = {}
                self.completed_this_run = 0
            elif raw.startswith("# COMPLETED"):
                self.completed_at = int(raw.split()[2]) / 1e6
            elif raw.startswith(("# FAILED", "# ABORTED")):
                self.failed = True
            ev = parse_line(raw)
            if ev is None:
                continue
            if ev.state == NodeState.RUNNING:
                self.submissions[ev.node_id] = self.submissions.get(ev.node_id, 0) + 1
            elif ev.state == NodeState.COMPLETE:
                self.completed_this_run += 1
            elif ev.state == NodeState.WAITING and ev.node_id in self.states:
                self._reset_from[ev.node_id] = self.states[ev.node_id].state
            self.states[ev.node_id] = ev
            new.append(ev)
        self.events.extend(new)
        return new

    @property
    def latest(self) -> NodeEvent | None:
        return self.events[-1] if self.events else None

    @property
    def retried(self) -> int:
        """Rules started more than once in the current run (makeflow's retries)."""
        return sum(n - 1 for n in self.submissions.values() if n > 1)

    @property
    def resumed(self) -> int:
        """Rules a previous run (killed or interrupted) had started without completing that
        this run starts again: not failures, the work the last run left, run again whole (a
        task's work is not kept, so nothing is resumed but the workflow)."""
        return sum(1 for n in self.submissions if n in self._unfinished)

    def failed_for_good(self, now: float, quiet_s: float = 3.0, since: float = 0.0) -> list[NodeEvent]:
        """The last FAILED event of each node that failed in the current run (and after Unix
        time ``since``: a makeflow just restarted has not logged its ``# STARTED`` yet) and was
        not put back to WAITING for a retry within ``quiet_s`` seconds (makeflow logs a
        retry's WAITING right after the FAILED), in node order."""
        since = max(since, self.started_at or 0.0)
        return sorted((e for e in self.states.values()
                       if e.state == NodeState.FAILED and e.time >= since and now - e.time >= quiet_s),
                      key=lambda e: e.node_id)

    def stuck(self, now: float, quiet_s: float = 3.0, since: float = 0.0) -> list[NodeEvent]:
        """Rules that failed for good, if makeflow has nothing left running and has logged
        nothing for ``quiet_s`` seconds: a makeflow that would exit has done so by then;
        one that has not waits forever (empty list otherwise)."""
        last = self.latest
        if last is None or last.running or now - last.time < quiet_s:
            return []
        return self.failed_for_good(now, quiet_s, since)
