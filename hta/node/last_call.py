"""A worker that must be gone at a known time takes no task it cannot finish.

A batch job ends at its time limit, and its worker's running tasks with it: their work is
lost. The master would not send a task to a worker ending too soon only if the task said
how long it runs (``end`` or ``min_running_time``, checked in CCTools' ``work_queue.c``
``check_worker_against_task``), and makeflow 8.0 sets neither: ``WALL_TIME`` becomes the
task's *maximum* running time, which the master does not compare with the worker's end.
Work Queue's own drain (``work_queue_specify_draining_by_hostname``) is an API of the
master, which makeflow owns. So ``hta worker`` closes itself (docs/decisions/0032):

- **last call** (the end, less :data:`STOP_BEFORE_S`, less the expected task length): a
  task first seen after it is held at once (SIGSTOP to its process group and every process
  under it, within one look, :data:`LOOK_CLOSED_S`). A held task keeps its slot, so the
  master sends no more; the tasks started before it finish.
- once only held tasks are left (or none), the worker leaves (SIGTERM: it gives its held
  tasks back, and the master runs them elsewhere, having lost well under a second of each).
- **the end** (``ends_at - STOP_BEFORE_S``): if a task is still running, the worker leaves
  anyway, before the batch system kills it, and says its tasks were cut by the time limit.

``last_call_s`` is the longest a task is expected to run: what the controller had learned
when it launched the worker, or, if longer, the longest task this worker has run itself,
with a margin (:data:`MARGIN`).

The same rule ends a worker after a number of tasks (``hta worker --tasks N``: a KEDA
ScaledJob's job, one pod per task or per few): a task first seen once N have started is
held at once, and the worker leaves once only held tasks are left and every result has
been fetched. ``work_queue_worker --single-shot`` cannot do it: it quits on disconnection,
not after a task, and the master sends the next task as soon as a slot frees.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: the worker leaves this long before its job's end, ahead of the batch system's kill
#: (``work_queue_worker``'s abort waits until each task it kills is 3 s old)
STOP_BEFORE_S = 15.0
#: a task's expected runtime is the longest seen, times this (runtimes vary)
MARGIN = 1.25
#: how often the worker's tasks are looked at once the last call has passed
LOOK_CLOSED_S = 0.05


@dataclass
class Task:
    pid: int
    #: when the worker first saw it (see :meth:`LastCall.seen`)
    started: float
    sandbox: str
    #: it was first seen after the last call: it is held, and handed back when the worker leaves
    late: bool = False
    held: bool = False


@dataclass
class LastCall:
    """The decisions, as a pure function of time and the tasks seen (see the module)."""

    ends_at: float = float("inf")
    last_call_s: float = 0.0
    #: tasks to run before leaving (None: no such limit)
    max_tasks: int | None = None
    #: when the worker started: a last call before it means no task of the expected length
    #: fits in this job at all, and holding would only pass it on; it runs and is cut
    #: (the run says so: :mod:`hta.backends.pool`)
    started_at: float = field(default_factory=time.time)
    stop_before_s: float = STOP_BEFORE_S
    longest_s: float = 0.0
    tasks: dict[int, Task] = field(default_factory=dict)
    #: tasks run (not held) so far
    started: int = 0
    #: the sandboxes of the tasks counted in ``started``
    counted: set[str] = field(default_factory=set)

    @property
    def tasks_done(self) -> bool:
        """Its ``max_tasks`` have started: any task after them is held."""
        return self.max_tasks is not None and self.started >= self.max_tasks

    def expected_s(self) -> float:
        return max(self.last_call_s, self.longest_s * MARGIN)

    def closes_at(self) -> float:
        """The last call (infinity where no task of the expected length fits at all)."""
        closes = self.ends_at - self.stop_before_s - self.expected_s()
        return closes if closes > self.started_at else float("inf")

    def seen(self, now: float, running: dict[int, str], boxes: AbstractSet[str] = frozenset()) -> list[str]:
        """The worker's task processes at ``now`` (pid → sandbox) and its sandboxes. A task
        started when it was first seen (the kernel's start time is read through the boot time,
        which psutil rounds: up to a second off ``time.time()``, more than a look), and whether
        it came after the last call is decided then, once: a call that moves earlier later (a
        longer task learned) never stops a task already running. A task gone ended, and its
        runtime teaches how long the next may run (a held one taught nothing). A sandbox with
        no process seen is a task that ran between two looks (its result waits for the
        master): it counts toward ``max_tasks`` all the same, or a worker of N tasks would run
        one more. The sandboxes newly counted so are returned."""
        for pid in list(self.tasks):
            if pid not in running:
                t = self.tasks.pop(pid)
                if not t.held:
                    self.longest_s = max(self.longest_s, now - t.started)
        # a sandbox gone is a task over: the master may send a task of the same id again
        self.counted &= set(boxes) | set(running.values())
        for pid, sandbox in running.items():
            if pid not in self.tasks:
                late = sandbox not in self.counted and (now >= self.closes_at() or self.tasks_done)
                self.tasks[pid] = Task(pid, now, sandbox, late=late)
                if not late and sandbox not in self.counted:
                    self.started += 1
                    self.counted.add(sandbox)
        ran = []
        for box in sorted(boxes - self.counted - {t.sandbox for t in self.tasks.values()}):
            if now >= self.closes_at() or self.tasks_done:
                break  # (one that came late waits for its process, to be held)
            self.started += 1
            self.counted.add(box)
            ran.append(box)
        return ran

    def to_hold(self) -> list[int]:
        """Tasks that came after the last call and are not held yet."""
        return [t.pid for t in self.tasks.values() if t.late and not t.held]

    def leave(self, now: float, sandboxes: set[str]) -> str | None:
        """Why the worker leaves now (None: not yet). ``sandboxes``: the tasks the worker
        holds, running or with a result the master has not fetched yet: once only held ones
        are left, after the last call, it leaves (nothing is lost); at its end it leaves
        anyway, and what else it held is cut."""
        held = {t.sandbox for t in self.tasks.values() if t.held}
        only_held = sandboxes <= held and all(t.held for t in self.tasks.values())
        if now >= self.ends_at - self.stop_before_s:
            return "last call" if only_held else "time limit"
        if only_held and self.tasks_done:
            return "tasks done"
        if only_held and (held or now >= self.closes_at()):
            return "last call"
        return None


def task_processes(worker_pid: int) -> dict[int, str]:
    """The worker's task processes: pid → its sandbox. A process counts once it leads its
    own process group in its ``t.<id>`` sandbox: ``work_queue_worker`` forks it in its own
    group, and only then does it ``setpgid`` and ``chdir``; before, a stop would reach the
    worker itself."""
    out: dict[int, str] = {}
    try:
        children = psutil.Process(worker_pid).children()
    except psutil.NoSuchProcess:
        return out
    for p in children:
        try:
            cwd = p.cwd()
            if os.getpgid(p.pid) == p.pid and Path(cwd).name.startswith("t."):
                out[p.pid] = cwd
        except (psutil.Error, OSError):
            continue
    return out


def sandboxes(workdir: Path, worker_pid: int) -> set[str]:
    """The task sandboxes the worker keeps (``t.<id>``): a task running, or one whose
    result the master has not fetched yet. Each as its real path, the form a task's own
    working directory takes (a relative or symlinked ``--workdir`` would otherwise never
    match a held task's, and the worker would stay with it stopped)."""
    return {os.path.realpath(p) for p in Path(workdir).glob(f"worker-*-{worker_pid}/t.*")}


def hold(pid: int) -> None:
    """Stop a task: its process group, and every process under it (a resource monitor may
    start the task's own command in a group of its own)."""
    try:
        os.killpg(os.getpgid(pid), signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in below:
        try:
            p.suspend()
        except psutil.Error:
            pass


def say(event: str, **fields: object) -> None:
    """One JSON line on stderr, beside ``hta worker``'s capacity line: the batch job's log
    keeps it, and the backend reads why its worker left (:func:`left_how`)."""
    print(json.dumps({"hta_worker": event, **fields}), file=sys.stderr, flush=True)


def left_how(log_text: str) -> dict | None:
    """The worker's own word on why it left, from its log (None: it did not say)."""
    for line in reversed(log_text.splitlines()):
        if line.startswith('{"hta_worker": "left"'):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


class Closer:
    """Runs :class:`LastCall` against a live ``work_queue_worker`` (``hta worker``'s loop)."""

    def __init__(self, worker_pid: int, workdir: Path, ends_at: float | None, last_call_s: float,
                 max_tasks: int | None = None):
        self.pid = worker_pid
        self.workdir = workdir
        self.rule = LastCall(ends_at=float("inf") if ends_at is None else ends_at, last_call_s=last_call_s,
                             max_tasks=max_tasks)
        self.why: str | None = None
        #: when each held task was stopped (its slot's time is counted as lost work)
        self.held_at: dict[int, float] = {}

    def only_held(self) -> bool:
        """Whether the worker holds only tasks it held (no other task runs, no result waits
        for the master): a stop then loses nothing."""
        held = {t.sandbox for t in self.rule.tasks.values() if t.held}
        return bool(held) and all(t.held for t in self.rule.tasks.values()) \
            and sandboxes(self.workdir, self.pid) <= held

    def look_every_s(self, now: float) -> float:
        """Often once a task must be held within a look: its last call has passed, or the
        task that may come next is one too many (the master sends it as soon as a slot
        frees, so only while a task runs: before the first, none can be late)."""
        near = min(self.rule.closes_at(), self.rule.ends_at - self.rule.stop_before_s) - 1.0
        last = (self.rule.max_tasks is not None and self.rule.started >= self.rule.max_tasks - 1
                and any(not t.held for t in self.rule.tasks.values()))
        return LOOK_CLOSED_S if now >= near or last else 0.2

    def step(self, now: float | None = None) -> str | None:
        """Hold what must be held; the reason to leave now, once (then None)."""
        if self.why is not None:
            return None
        now = time.time() if now is None else now
        before = set(self.rule.tasks)
        boxes = sandboxes(self.workdir, self.pid)
        for box in self.rule.seen(now, task_processes(self.pid), boxes):
            say("task", sandbox=Path(box).name, late=False, started=self.rule.started, by="sandbox")
        for pid in set(self.rule.tasks) - before:  # (the pod's log tells a hung worker's story)
            t = self.rule.tasks[pid]
            say("task", sandbox=Path(t.sandbox).name, late=t.late, started=self.rule.started)
        for pid in self.rule.to_hold():
            hold(pid)
            self.rule.tasks[pid].held = True
            self.held_at[pid] = now
        why = self.rule.leave(now, boxes)
        if why is not None:
            self.why = why
            held = [t for t in self.rule.tasks.values() if t.held]
            # cut: every other task it holds, running or with a result the master has not fetched
            ends = self.rule.ends_at
            say("left", why=why, ends_at=round(ends) if ends != float("inf") else None, held=len(held),
                held_s=round(sum(now - self.held_at.get(t.pid, now) for t in held), 3),
                cut=len(boxes - {t.sandbox for t in held}), last_call_s=round(self.rule.expected_s(), 1))
        return why
