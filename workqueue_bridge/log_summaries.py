"""Task summaries from makeflow's log, for runs without the resource monitor.

makeflow 8.0 cannot run ``--monitor`` beside ``--shared-fs`` or the storage
options (``./cctools-monitor: not found``; a segfault), so HTA runs those
workflows without it. Learning then degrades rather than stops: each rule's
runtime is read from the makeflowlog (RUNNING → COMPLETE), its category from
the workflow's rules, and its size is left to what the category declares —
what the master itself knows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workqueue_bridge.makeflow_log import MakeflowLog, NodeState
from workqueue_bridge.monitor_summaries import TaskSummary


class LogSummaries:
    """A :class:`~hta.controller.SummarySource` over a makeflowlog: one summary per rule
    completed after ``since`` (Unix seconds), carrying its category and wall time."""

    def __init__(self, log_path: Path, category_of: Callable[[int], str | None], since: float = 0.0):
        self.log = MakeflowLog(log_path)
        self.category_of = category_of
        self.since = since
        self._started: dict[int, float] = {}

    def poll(self) -> list[TaskSummary]:
        out = []
        for e in self.log.poll():
            if e.time < self.since:
                continue
            if e.state == NodeState.RUNNING:
                self._started[e.node_id] = e.time
            elif e.state == NodeState.COMPLETE and e.node_id in self._started:
                start = self._started.pop(e.node_id)
                out.append(TaskSummary(category=self.category_of(e.node_id) or "default", exit_type="normal",
                                       exit_status=0, start=start, end=e.time, wall_time_s=e.time - start))
        return out
