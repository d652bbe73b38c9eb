"""The simulated Makeflow: it releases a task when all its parents completed, and writes
what its log would say of each rule.

The rules released at once are submitted last-in-the-file first (makeflow walks its rules
newest-parsed first), so the master, newest first, runs them in the file's order; a task's
Work Queue id is its submission's number, as the master numbers them.
"""

from __future__ import annotations

from collections import deque

import simpy

from hta.sim.work_queue import SimWorkQueue
from hta.sim.workload import SimTask, Workload
from workqueue_bridge.makeflow_log import NodeState


def check_acyclic(tasks: dict[str, SimTask], children: dict[str, list[str]]) -> None:
    """Raise ValueError if the workflow has a dependency cycle."""
    left = {tid: len(t.parents) for tid, t in tasks.items()}
    ready = deque(t for t, n in left.items() if n == 0)
    seen = 0
    while ready:
        t = ready.popleft()
        seen += 1
        for c in children[t]:
            left[c] -= 1
            if left[c] == 0:
                ready.append(c)
    if seen != len(tasks):
        raise ValueError("the workflow has a dependency cycle")


class SimMakeflow:
    """The workflow's manager: releases tasks to the master as their parents complete."""

    def __init__(self, workload: Workload, tasks: dict[str, SimTask], env: simpy.Environment,
                 queue: SimWorkQueue):
        self.workload = workload
        self.tasks = tasks
        self.queue = queue
        self.children: dict[str, list[str]] = {tid: [] for tid in tasks}
        self.parents_left: dict[str, int] = {}
        for t in workload.tasks:
            self.parents_left[t.id] = len(t.parents)
            for p in t.parents:
                self.children[p].append(t.id)
        check_acyclic(tasks, self.children)
        #: makeflow's node id of each rule (its position in the workflow, from 0)
        self.rule = {t.id: i for i, t in enumerate(workload.tasks)}
        #: what makeflow's log says of each released rule (node → (state, job)), and every
        #: change of it in order (the lookahead reads them incrementally)
        self.states: dict[int, tuple[NodeState, int]] = {}
        self.state_log: list[tuple[int, NodeState, int]] = []
        self.released: set[str] = set()
        self.done: set[str] = set()
        self.finished_at: float | None = None
        self.finished = env.event()
        self._env = env

    def start(self) -> None:
        """Release the tasks that have no parents (makeflow's first submissions)."""
        self.release([t.id for t in self.workload.tasks if not t.parents])
        self.queue.dispatch()

    def node_states(self) -> dict[int, tuple[NodeState, int]]:
        """What makeflow's log would say of each rule: (state, Work Queue task id)."""
        return dict(self.states)

    def _set_state(self, tid: str, state: NodeState) -> None:
        rule, n = self.rule[tid], self.queue.task_id[tid]
        self.states[rule] = (state, n)
        self.state_log.append((rule, state, n))

    def release(self, tids: list[str]) -> None:
        """Makeflow submits the rules that became ready together (``tids``, in the workflow's
        order) last in the file first: its node list is built newest-parsed first."""
        for tid in reversed(tids):
            self.released.add(tid)
            self.queue.submit(tid)
            self._set_state(tid, NodeState.RUNNING)
            self.queue.on_change()

    def complete(self, tid: str) -> None:
        """A task completed well: its rule is done, and the rules that waited only for it
        are released; the last one ends the workflow."""
        self.done.add(tid)
        self._set_state(tid, NodeState.COMPLETE)
        ready = []
        for c in self.children[tid]:
            self.parents_left[c] -= 1
            if self.parents_left[c] == 0:
                ready.append(c)
        self.release(ready)
        if len(self.done) == len(self.tasks):
            self.finished_at = self._env.now
            self.finished.succeed()
            return
        self.queue.dispatch()
