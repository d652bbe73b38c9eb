"""The master's task table as HTA reads it: waiting tasks as runs of alike consecutive ids
(a read of 100k waiting tasks builds no model per task), the groups a policy sees, and a
kept table brought up to date by the master's transactions log and by newer counts."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from workqueue_bridge.transactions import Event, TaskEvent, WorkerEvent


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


def _declared_fields(req: Resources) -> dict[str, Any]:
    """The TaskStatus fields that :func:`task_request` reads back as ``req``."""
    return dict(cores=req.cores or None, memory_mb=req.memory_mb or None, disk_mb=req.disk_mb or None)


def _positive(v: float | None) -> float | None:
    return v if v is not None and v > 0 else None


#: a task's state in :meth:`TaskTable.apply`: waiting (category, request), a task that is not
#: waiting (running or with results), or gone (done, retrieved)
_Waiting = tuple[str, Resources]
_State = _Waiting | TaskStatus | None


class TaskTable:
    """One read of ``/task_status``, kept while ``mark`` holds: the waiting tasks as runs of
    alike consecutive ids (see :func:`~workqueue_bridge.task_table.snapshot_waiting`), the
    running ones, and ``tasks`` in id order — every task with ``full`` (a recording replays
    through them), else only those not waiting (no model per waiting task: most of the cost
    of reading 100k of them). :meth:`apply` brings it forward by the master's transactions
    log; ``read_at`` stays the time of the read."""

    def __init__(self, mark: tuple | None, data: Any, full: bool = False, read_at: float = 0.0):
        self.mark = mark
        self.read_at = read_at  # time.monotonic() when its read began
        self.full = full
        if full:
            self.tasks = parse_task_status(data)
            self.waiting_segments = waiting_segments(self.tasks)
        else:
            self.tasks, self.waiting_segments = split_task_status(data)
        self.running = [t for t in self.tasks if t.state == "running"]
        #: tasks moved by :meth:`apply` so far
        self.applied = 0

    def apply(self, events: Iterable[Event], counts: Sequence[CategoryStatus] = ()) -> int:
        """Bring the table forward by the events of the master's transactions log written
        since it was read (see :class:`~workqueue_bridge.transactions.TransactionsTail`), in
        their order; the number of tasks whose state changed.

        - ``WAITING``: the task waits (a submission, where the master logs it; a retry).
        - ``RUNNING``: it leaves the waiting runs and runs on its worker from the line's
          time, with the request the table had for it (what ``/task_status`` would report;
          the line's allocation is the worker's share Work Queue gave it, a whole worker for
          a task that declares nothing, as the observation reads a running task with none).
          A task the table never had (submitted since, by a master that logs no
          submission) takes the category whose ``counts`` run more tasks than the table
          does, and that category's request.
        - ``WAITING_RETRIEVAL``: it no longer runs; ``RETRIEVED``, ``DONE``: it is gone.
        - a worker's ``DISCONNECTION``: the tasks it ran go back to waiting (the master
          requeues them).

        An event the table already shows (one logged while it was read) changes nothing.
        The lists are replaced, not changed in place: a snapshot that carries them keeps
        what it read."""
        segs = self.waiting_segments
        los = [s[0] for s in segs]

        def in_segment(tid: int) -> _Waiting | None:
            i = bisect.bisect_right(los, tid) - 1
            if i >= 0 and tid <= segs[i][1]:
                return segs[i][2], segs[i][3]
            return None

        by_id = {t.task_id: t for t in self.tasks}
        final: dict[int, _State] = {}
        info: dict[int, _Waiting] = {}  # each task's category and request, once known

        def current(tid: int) -> _State:
            if tid in final:
                return final[tid]
            t = by_id.get(tid)
            if t is not None and t.state != "waiting":
                return t
            return in_segment(tid)

        def known(tid: int) -> _Waiting | None:
            if tid not in info:
                cur = current(tid)
                if isinstance(cur, tuple):
                    info[tid] = cur
                elif isinstance(cur, TaskStatus) and cur.category:
                    info[tid] = (cur.category, task_request(cur))
            return info.get(tid)

        for ev in events:
            if isinstance(ev, WorkerEvent):
                if ev.connected:
                    continue
                on_it = {tid for tid, st in final.items() if isinstance(st, TaskStatus) and st.worker == ev.address}
                on_it |= {t.task_id for t in self.tasks if t.worker == ev.address and t.task_id not in final
                          and t.state in ("running", "waiting_retrieval")}
                for tid in on_it:
                    final[tid] = known(tid)  # (unknown: gone; the counts have it waiting)
                continue
            if not isinstance(ev, TaskEvent):
                continue
            tid = ev.task_id
            if ev.state == "WAITING":
                info[tid] = (ev.category or "default", declared_request(
                    _positive(ev.cores), _positive(ev.memory_mb), _positive(ev.disk_mb)))
                final[tid] = info[tid]
            elif ev.state == "RUNNING":
                cur = current(tid)
                if isinstance(cur, TaskStatus) and cur.state == "running" and cur.worker == ev.worker:
                    final[tid] = cur  # (logged while the table was read: it shows it already)
                    continue
                k = known(tid)
                category, req = k if k is not None else ("", Resources())  # ("": resolved below)
                final[tid] = TaskStatus.model_construct(
                    task_id=tid, state="running", category=category, **_declared_fields(req), worker=ev.worker,
                    started_at=ev.time)
            elif ev.state == "WAITING_RETRIEVAL":
                cur = current(tid)
                final[tid] = cur.model_copy(update={"state": "waiting_retrieval"}) \
                    if isinstance(cur, TaskStatus) else None
            else:  # RETRIEVED, DONE
                known(tid)
                final[tid] = None
        if not final:
            return 0
        # -- what changed, and the lists rebuilt ----------------------------------------------
        changed = 0
        cuts: list[int] = []
        adds: list[tuple[int, str, Resources]] = []
        for tid, st in final.items():
            was = in_segment(tid)
            if isinstance(st, tuple):
                if was == st:
                    continue
                if was is not None:
                    cuts.append(tid)
                adds.append((tid, st[0], st[1]))
            elif was is not None:
                cuts.append(tid)
            elif st is by_id.get(tid) or (st is None and tid not in by_id):
                continue
            changed += 1
        if cuts or adds:
            self.waiting_segments = _cut_and_add(segs, sorted(cuts), sorted(adds, key=lambda a: a[0]))
        self._resolve_unknown(final, counts)
        for tid, st in final.items():
            if isinstance(st, TaskStatus):
                by_id[tid] = st
            elif st is not None and self.full:
                by_id[tid] = TaskStatus.model_construct(task_id=tid, state="waiting", category=st[0],
                                                        **_declared_fields(st[1]), worker=None, started_at=None)
            else:
                by_id.pop(tid, None)
        self.tasks = sorted(by_id.values(), key=lambda t: t.task_id)
        self.running = [t for t in self.tasks if t.state == "running"]
        self.applied += changed
        return changed

    def _resolve_unknown(self, final: dict[int, _State], counts: Sequence[CategoryStatus]) -> None:
        """Name the category of the running tasks the table never had: each goes to the
        category whose ``counts`` run the most tasks more than the table now shows running,
        and asks what that category's newest waiting run asks (else a task of it that runs,
        else its declared maximum)."""
        unknown = sorted(tid for tid, st in final.items() if isinstance(st, TaskStatus) and not st.category)
        if not unknown:
            return
        shown: dict[str, int] = {}
        asks: dict[str, Resources] = {}
        for t in [*(t for t in self.tasks if t.task_id not in final), *(st for st in final.values()
                                                                        if isinstance(st, TaskStatus))]:
            if t.state == "running" and t.category:
                shown[t.category] = shown.get(t.category, 0) + 1
                asks.setdefault(t.category, task_request(t))
        for _lo, _hi, category, req in self.waiting_segments:
            asks[category] = req
        deficit = {c.name: c.running - shown.get(c.name, 0) for c in counts}
        fallback = self.waiting_segments[-1][2] if self.waiting_segments else "default"
        for tid in unknown:
            category = max(deficit, key=lambda c: deficit[c]) if deficit else fallback
            if deficit:
                deficit[category] -= 1
            declared_max = next((declared_request(c.max_cores, c.max_memory_mb, c.max_disk_mb)
                                 for c in counts if c.name == category), Resources())
            req = asks.get(category, declared_max)
            st = final[tid]
            assert isinstance(st, TaskStatus)
            final[tid] = st.model_copy(update={"category": category, **_declared_fields(req)})


def _cut_and_add(segments: list[WaitingSegment], cuts: list[int],
                 adds: list[tuple[int, str, Resources]]) -> list[WaitingSegment]:
    """``segments`` less the task ids ``cuts`` (sorted) plus the waiting tasks ``adds``
    (sorted by id, none in ``segments`` after the cuts), as runs of alike consecutive ids."""
    pieces: list[WaitingSegment] = []
    for lo, hi, category, req in segments:
        for i in cuts[bisect.bisect_left(cuts, lo):bisect.bisect_right(cuts, hi)]:
            if lo < i:
                pieces.append((lo, i - 1, category, req))
            lo = i + 1
        if lo <= hi:
            pieces.append((lo, hi, category, req))
    pieces.extend((tid, tid, category, req) for tid, category, req in adds)
    pieces.sort(key=lambda p: p[0])
    out: list[WaitingSegment] = []
    for p in pieces:
        last = out[-1] if out else None
        if last is not None and last[1] == p[0] - 1 and last[2] == p[2] and last[3] == p[3]:
            out[-1] = (last[0], p[1], last[2], last[3])
        else:
            out.append(p)
    return out
