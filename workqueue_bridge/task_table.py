"""The master's task table as HTA reads it: waiting tasks as runs of alike consecutive ids
(a read of 100k waiting tasks builds no model per task), the groups a policy sees, and a
kept table brought up to date by newer counts."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import Any

from workqueue_bridge.queue import TaskGroup
from workqueue_bridge.resources import Resources
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import (
    CategoryStatus,
    TaskStatus,
    WorkerStatus,
    clean_category,
    declared,
    num,
    parse_task_status,
)


def task_request(task: TaskStatus) -> Resources:
    """What Work Queue will allocate a task, as far as the master tells.

    Nothing declared → a whole worker (``Resources()``); otherwise the declared
    values, with undeclared dimensions left 0 (Work Queue gives those a
    proportional share, which fits whenever the cores fit).
    """
    return declared_request(task.cores, task.memory_mb, task.disk_mb)


def declared_request(cores: float | None, memory_mb: float | None, disk_mb: float | None) -> Resources:
    """:func:`task_request` from the three declared values (None: not declared)."""
    if cores is None and memory_mb is None and disk_mb is None:
        return Resources()
    return Resources(cores=cores or 0.0, memory_mb=memory_mb or 0.0, disk_mb=disk_mb or 0.0)


def group_waiting(tasks: list[TaskStatus]) -> list[TaskGroup]:
    """Waiting tasks in dispatch (task id) order, runs of alike tasks merged."""
    return index_waiting(tasks)[0]


def index_waiting(tasks: list[TaskStatus]) -> tuple[list[TaskGroup], dict[int, str]]:
    """The waiting groups (ids ``g0``, ``g1``…) and which group each task id is in."""
    groups: list[TaskGroup] = []
    group_of: dict[int, str] = {}
    for t in sorted((t for t in tasks if t.state == "waiting"), key=lambda t: t.task_id):
        req = task_request(t)
        if groups and groups[-1].category == t.category and groups[-1].request == req:
            groups[-1].count += 1
        else:
            groups.append(TaskGroup(category=t.category, count=1, request=req, id=f"g{len(groups)}"))
        group_of[t.task_id] = f"g{len(groups) - 1}"
    return groups, group_of


class SegmentMap(Mapping[int, str]):
    """Which waiting group each waiting task id is in, kept as ranges: ``segments`` is
    ``(first id, last id, group id)`` for runs of consecutive ids that all wait, in order.
    Reads like the dict :func:`index_waiting` returns, without one entry per task."""

    def __init__(self, segments: list[tuple[int, int, str]]):
        self.segments = segments
        self._los = [s[0] for s in segments]

    def _find(self, task_id: object) -> str | None:
        if not isinstance(task_id, int):
            return None
        i = bisect.bisect_right(self._los, task_id) - 1
        if i >= 0 and task_id <= self.segments[i][1]:
            return self.segments[i][2]
        return None

    def __getitem__(self, task_id: int) -> str:
        g = self._find(task_id)
        if g is None:
            raise KeyError(task_id)
        return g

    def get(self, task_id, default=None):
        g = self._find(task_id)
        return default if g is None else g

    def __contains__(self, task_id: object) -> bool:
        return self._find(task_id) is not None

    def __iter__(self) -> Iterator[int]:
        for lo, hi, _ in self.segments:
            yield from range(lo, hi + 1)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi, _ in self.segments)


#: a run of waiting tasks with consecutive ids: (first id, last id, category, what each asks)
WaitingSegment = tuple[int, int, str, Resources]


def waiting_segments(tasks: list[TaskStatus]) -> list[WaitingSegment]:
    """The waiting tasks as runs of consecutive ids alike in category and request."""
    out: list[WaitingSegment] = []
    for t in sorted((t for t in tasks if t.state == "waiting"), key=lambda t: t.task_id):
        req = task_request(t)
        if out and out[-1][1] == t.task_id - 1 and out[-1][2] == t.category and out[-1][3] == req:
            out[-1] = (out[-1][0], t.task_id, t.category, req)
        else:
            out.append((t.task_id, t.task_id, t.category, req))
    return out


def split_task_status(data: Any) -> tuple[list[TaskStatus], list[WaitingSegment]]:
    """A ``/task_status`` answer as :func:`~workqueue_bridge.status.parse_task_status` then
    :func:`waiting_segments` would read it — the tasks that are not waiting, in id order,
    and the waiting ones as runs — without a model per waiting task. A read of 100k waiting
    tasks is most of a changed cycle's cost; each waiting task is here a few dict lookups
    (``tests/test_split_task_status.py`` checks both give the same, on odd input too)."""
    rows = [(int(num(t.get("taskid"))), t) for t in data or []]
    rows.sort(key=lambda r: r[0])
    others: list[dict] = []
    out: list[WaitingSegment] = []
    # the same few raw values recur across 100k tasks: each is cleaned once
    waiting_states: dict[Any, bool] = {}
    categories: dict[Any, str] = {}
    requests: dict[tuple, Resources] = {}
    for tid, t in rows:
        state = t.get("state", "")
        waiting = waiting_states.get(state) if isinstance(state, str) else None
        if waiting is None:
            waiting = str(state).lower() == "waiting"
            if isinstance(state, str):
                waiting_states[state] = waiting
        if not waiting:
            others.append(t)
            continue
        raw_category = t.get("category")
        category = categories.get(raw_category) if isinstance(raw_category, str) else None
        if category is None:
            category = clean_category(raw_category)
            if isinstance(raw_category, str):
                categories[raw_category] = category
        raw: tuple | None = (t.get("cores"), t.get("memory"), t.get("disk"))
        req: Resources | None = None
        try:  # values equal as keys (1, 1.0, True, "1") are equal to declared() too
            req = requests.get(raw) if raw is not None else None
        except TypeError:  # an unhashable value: worked out, not kept
            req, raw = None, None
        if req is None:  # what task_request gives the TaskStatus parse_task_status would make
            req = declared_request(*(declared(t.get(k)) for k in ("cores", "memory", "disk")))
            if raw is not None:
                requests[raw] = req
        last = out[-1] if out else None
        if last is not None and last[1] == tid - 1 and last[2] == category and (last[3] is req or last[3] == req):
            out[-1] = (out[-1][0], tid, category, req)
        else:
            out.append((tid, tid, category, req))
    return parse_task_status(others), out


def index_segments(segments: list[WaitingSegment]) -> tuple[list[TaskGroup], SegmentMap]:
    """:func:`index_waiting` on waiting tasks given as runs of consecutive ids (in id
    order): the same groups, and the group of each task id as a :class:`SegmentMap`."""
    groups: list[TaskGroup] = []
    spans: list[tuple[int, int, str]] = []
    for lo, hi, category, req in segments:
        if groups and groups[-1].category == category and groups[-1].request == req:
            groups[-1].count += hi - lo + 1
        else:
            groups.append(TaskGroup(category=category, count=hi - lo + 1, request=req, id=f"g{len(groups)}"))
        spans.append((lo, hi, f"g{len(groups) - 1}"))
    return groups, SegmentMap(spans)


def snapshot_waiting(snap: MasterSnapshot) -> tuple[list[TaskGroup], Mapping[int, str]]:
    """The waiting groups of a read of the master. A master that reports its waiting
    tasks as runs of consecutive ids (``waiting_segments``, as the simulated one does
    with a queue of 100k tasks) is read by run; otherwise task by task."""
    segments = getattr(snap, "waiting_segments", None)
    if segments is None:
        return index_waiting(snap.tasks)
    return index_segments(segments)


def without_tasks(group_of: Mapping[int, str], ids: set[int], groups: set[str]) -> Mapping[int, str]:
    """``group_of`` less the task ``ids`` and every task of ``groups`` (kept as ranges if it was)."""
    if isinstance(group_of, SegmentMap):
        spans = []
        cuts = sorted(ids)
        for lo, hi, g in group_of.segments:
            if g in groups:
                continue
            for i in cuts[bisect.bisect_left(cuts, lo):bisect.bisect_right(cuts, hi)]:
                if lo < i:
                    spans.append((lo, i - 1, g))
                lo = i + 1
            if lo <= hi:
                spans.append((lo, hi, g))
        return SegmentMap(spans)
    return {t: g for t, g in group_of.items() if t not in ids and g not in groups}


def at_the_counts(groups: list[TaskGroup], counts: list[CategoryStatus],
                  requests: Mapping[str, Resources] | None = None) -> tuple[list[TaskGroup], set[str]]:
    """The waiting groups of a kept read of the master's task table, brought to the counts
    of a newer ``/queue_status``; and the ids of the groups that went. A large table is read
    within a budget (``MasterStatusClient.read_budget``: at 100k tasks, a read every
    15-100 s) while the counts are read every time.

    - A category with more waiting than its groups hold gets the rest as a group at the
      back (the newest, which the master dispatches first): tasks submitted since the table
      was read (a whole new stage, at a barrier) or put back in the queue (a lost
      worker's). Without them a decision would see nothing waiting, and nothing upcoming
      either, since the lookahead cannot place their parents. The group asks what the
      category's newest group asked, else ``requests[category]`` (what a task of it in
      the table asked), else what the category declares at most, else a whole worker.
    - A category with fewer loses the rest from the back, its newest tasks: tasks dispatched
      since, newest first as the master dispatches (those a
      worker runs now were taken out before: ``ObservationBuilder._dispatched_since``).
      A category the counts do not list is left as the table has it.
    - A group left with nothing (``count`` 0 given, or cut to it) goes.

    Applied only to a kept table (``MasterSnapshot.table_kept``): a fresh one is read
    after the counts, and a task dispatched in between would come back as one still
    waiting."""
    held: dict[str, int] = {}
    newest: dict[str, Resources] = {}
    for g in groups:
        held[g.category] = held.get(g.category, 0) + g.count
        newest[g.category] = g.request
    waiting = {c.name: c.waiting for c in counts}
    excess = {c: n - waiting[c] for c, n in held.items() if c in waiting and n > waiting[c]}
    out: list[TaskGroup] = []
    for g in reversed(groups):  # the newest first: the master dispatched them first
        cut = min(g.count, excess.get(g.category, 0))
        if cut > 0:
            excess[g.category] -= cut
        if g.count > cut:
            out.append(g if not cut else g.model_copy(update={"count": g.count - cut}))
    out.reverse()
    taken = {g.id for g in groups if g.id is not None}  # (the gone ones' too: no id twice)
    for c in counts:
        n = c.waiting - held.get(c.name, 0)
        if n <= 0:
            continue
        request = newest.get(c.name) or (requests or {}).get(c.name) or declared_request(
            c.max_cores, c.max_memory_mb, c.max_disk_mb)
        gid = len(out)
        while f"g{gid}" in taken:
            gid += 1
        taken.add(f"g{gid}")
        out.append(TaskGroup(category=c.name, count=n, request=request, id=f"g{gid}"))
    return out, taken - {g.id for g in out if g.id is not None}


def still_running(t: TaskStatus, w: WorkerStatus | None) -> bool:
    """Does the current read of the workers leave a task of a kept table running? Not where
    its worker is gone or runs nothing now, or lists its tasks without this one: it ended,
    or went back to the queue (where the counts have it: :func:`at_the_counts`)."""
    if w is None or w.tasks_running == 0:
        return False
    return not w.task_ids or t.task_id in w.task_ids


def snapshot_running(snap: MasterSnapshot) -> list[TaskStatus]:
    """The running tasks of a read of the master, in task id order. A read that carries them
    already (``running_tasks``, as :class:`~workqueue_bridge.status.LiveSnapshot` does, worked
    out once per read of ``/task_status``) is not searched again."""
    running = getattr(snap, "running_tasks", None)
    if running is None:
        return [t for t in snap.tasks if t.state == "running"]
    return running


class TaskTable:
    """One read of ``/task_status``, kept while ``mark`` holds: the waiting tasks as runs of
    alike consecutive ids (see :func:`~workqueue_bridge.task_table.snapshot_waiting`), the
    running ones, and ``tasks`` in id order — every task with ``full`` (a recording replays
    through them), else only those not waiting (no model per waiting task: most of the cost
    of reading 100k of them)."""

    def __init__(self, mark: tuple | None, data: Any, full: bool = False, read_at: float = 0.0):
        self.mark = mark
        self.read_at = read_at  # time.monotonic() when its read began
        if full:
            self.tasks = parse_task_status(data)
            self.waiting_segments = waiting_segments(self.tasks)
        else:
            self.tasks, self.waiting_segments = split_task_status(data)
        self.running = [t for t in self.tasks if t.state == "running"]
