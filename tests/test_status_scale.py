"""The master's status read at scale: /task_status is read again only when /queue_status
says the task table moved, parsed without per-task validation, and what policies observe
is the same as with the old read path (every endpoint read and validated each time,
waiting tasks grouped one by one). On a real Work Queue master with a few hundred tasks."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

import pytest
from conftest import DATA

from hta.model import LatencyStats, Resources, TaskGroup
from hta.observation import ObservationBuilder
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status import MasterStatusClient, task_table_mark
from workqueue_bridge.status_json import TaskStatus, parse_task_status

SHAPE = Resources(cores=4, memory_mb=8000, disk_mb=16000)


def validated(tasks: list[TaskStatus]) -> list[TaskStatus]:
    return [TaskStatus(**t.model_dump()) for t in tasks]


def test_tasks_parsed_without_validation_equal_validated_ones():
    data = json.loads((DATA / "task_status_running.json").read_text())
    data.append({"taskid": 9, "state": "WAITING", "category": "'x'", "cores": -1, "memory": 0, "disk": "12"})
    fast = parse_task_status(data)
    assert fast == validated(fast)
    assert [(t.task_id, t.state, t.category, t.cores, t.disk_mb) for t in fast][-1] == (9, "waiting", "x", None, 12.0)
    assert all(type(t.cores) in (float, type(None)) and type(t.task_id) is int for t in fast)


def test_mark_needs_the_task_counters():
    q = json.loads((DATA / "queue_status_running.json").read_text())
    assert task_table_mark(q) is not None
    assert task_table_mark([{k: v for k, v in q[0].items() if k != "tasks_dispatched"}]) is None
    moved = [{**q[0], "tasks_dispatched": q[0]["tasks_dispatched"] + 1}]
    assert task_table_mark(moved) != task_table_mark(q)


class Reads:
    """The new read path (one client, reusing its task table) beside the old one (every
    endpoint read each time, each task validated, a plain MasterSnapshot: the observation
    builder groups waiting tasks one by one and searches ``tasks`` for running ones).

    The new client reads a moved table at once (``read_budget=0``): with the default 2 %
    budget, whether the next read is due depends on how long this machine took over the
    last one (a 100 ms read under load keeps the table 5 s), and the budget has its own
    tests below."""

    def __init__(self, port: int):
        self.new = MasterStatusClient("127.0.0.1", port, read_budget=0)
        self.old = MasterStatusClient("127.0.0.1", port, reuse_tasks=False)
        self.builders = [ObservationBuilder(epoch=0.0, worker_shape=SHAPE, min_workers=0, max_workers=3)
                         for _ in range(2)]

    async def old_snapshot(self, now: float) -> MasterSnapshot:
        q = await self.old.queue_status()
        tasks = validated(await self.old.task_status())
        workers = await self.old.worker_status()
        return MasterSnapshot(taken_at=now, queue=q, tasks=tasks, workers=workers)

    async def both(self, now: float, upcoming_seen: list):
        def upcoming(group_of, running):
            upcoming_seen.append(({i: group_of.get(i) for i in range(1, 700)}, running))
            return []

        snaps = [await self.new.snapshot(now), await self.old_snapshot(now)]
        return [b.build(s, categories={}, worker_ids={}, pending=[], latency=LatencyStats(), upcoming=upcoming)
                for b, s in zip(self.builders, snaps)]

    async def close(self):
        await self.new.close()
        await self.old.close()


#: a real master in its own process (in this one, pumped by wait(0), each status request
#: waits about a second); it submits and cancels tasks when told on stdin, between waits
MASTER = """
import select, sys
from workqueue_bridge.wq import load
wq = load()
q = wq.WorkQueue(port=0)
print(q.port, flush=True)
while True:
    q.wait(1)  # an int: the SWIG module refuses 0.2
    if select.select([sys.stdin], [], [], 0)[0]:
        words = sys.stdin.readline().split()
        if not words:
            break
        if words[0] == "submit":  # submit CATEGORY[,CATEGORY...] CORES MEMORY N: categories in turn
            categories, cores, memory, n = words[1].split(","), int(words[2]), int(words[3]), int(words[4])
            for i in range(n):
                category = categories[i % len(categories)]
                t = wq.Task("./%s.sh %d" % (category, i))
                t.specify_category(category)
                t.specify_cores(cores)
                t.specify_memory(memory)
                q.submit(t)
        elif words[0] == "cancel":
            for w in words[1:]:
                q.cancel_by_taskid(int(w))
        print("ok", flush=True)
"""


class ChildMaster:
    def __init__(self):
        # (a TMPDIR of its own: the work_queue module's staging folder, which it removes only
        # at a normal exit, goes with it when the master is killed)
        self.tmp = tempfile.mkdtemp(prefix="hta-test-master-")
        self.proc = subprocess.Popen([sys.executable, "-c", MASTER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": self.tmp})
        self.port = int(self.proc.stdout.readline())

    def tell(self, *words: object) -> None:
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def submit(self, category: str, cores: int, memory: int, n: int) -> None:
        self.tell("submit", category, cores, memory, n)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def same(a, b) -> bool:
    """Equal observations, but for the link's counters: the master's own, read at two instants
    (the old and the new path's reads), they may move between."""
    link = {"link": b.link}
    return a.model_copy(update=link) == b.model_copy(update=link)


async def test_observations_are_the_same_on_the_old_and_new_read_paths():
    master = ChildMaster()
    reads = Reads(master.port)
    try:
        master.submit("split", 1, 500, 150)
        master.submit("align", 2, 2000, 100)
        master.submit("split,reduce", 1, 1000, 60)  # interleaved: a group per task
        seen: list = []
        new, old = await reads.both(1.0, seen)
        assert reads.new.task_reads == 1
        assert same(new, old)
        assert new.waiting_count == 310 and len(new.waiting) == 62
        assert seen[0] == seen[1]  # the lookahead is told the same groups

        for t in (2.0, 3.0):  # nothing moved: the table is not read again, the observation is the same
            bytes_before = reads.new.bytes_read
            new, old = await reads.both(t, seen)
            assert same(new, old) and reads.new.task_reads == 1
            assert reads.new.bytes_read - bytes_before < 10_000
        assert seen[-2] == seen[-1]

        master.submit("gather", 4, 100, 3)  # new tasks, a new category
        new, old = await reads.both(4.0, seen)
        assert reads.new.task_reads == 2 and same(new, old) and new.waiting_count == 313

        master.tell("cancel", 5, 200, 300)
        new, old = await reads.both(5.0, seen)
        assert reads.new.task_reads == 3 and same(new, old) and new.waiting_count == 310
        assert seen[-2] == seen[-1]
    finally:
        await reads.close()
        master.close()


async def test_a_moved_table_is_kept_within_the_read_budget():
    master = ChildMaster()
    # a budget of a millionth: after any read, the next one waits more than an hour
    thrifty = MasterStatusClient("127.0.0.1", master.port, read_budget=1e-6)
    eager = MasterStatusClient("127.0.0.1", master.port, read_budget=0)
    try:
        master.submit("split", 1, 500, 40)
        for c in (thrifty, eager):
            snap = await c.snapshot(1.0)  # nothing read yet: read
            assert c.task_reads == 1 and len(snap.waiting_segments) == 1
        master.submit("align", 2, 2000, 10)
        kept = await thrifty.snapshot(2.0)
        assert thrifty.task_reads == 1 and thrifty.stale_reuses == 1
        assert sum(hi - lo + 1 for lo, hi, *_ in kept.waiting_segments) == 40  # the table of the last read
        assert kept.queue.tasks_waiting == 50  # /queue_status is read every time
        read = await eager.snapshot(2.0)  # budget 0: read at every change, as before
        assert eager.task_reads == 2 and sum(hi - lo + 1 for lo, hi, *_ in read.waiting_segments) == 50
        age = thrifty.table_age_s()
        assert age is not None and age > 0
        # a master whose counters cannot tell whether its table moved: read every time
        await thrifty._task_table_kept(None)
        assert thrifty.task_reads == 2 and thrifty.table_age_s() < age

        thrifty.read_budget = 1.0  # from its next read on, the one after may come that read's time later
        master.submit("align", 2, 2000, 5)
        await thrifty._task_table_kept(None)
        assert thrifty.task_reads == 3
        master.submit("align", 2, 2000, 5)
        while time.monotonic() < thrifty._next_read_at:
            await asyncio.sleep(0.001)
        moved = await thrifty.snapshot(6.0)
        assert thrifty.task_reads == 4 and sum(hi - lo + 1 for lo, hi, *_ in moved.waiting_segments) == 60
        await thrifty.snapshot(7.0)  # unchanged: nothing to read, nothing kept stale
        assert thrifty.task_reads == 4 and thrifty.stale_reuses == 1
    finally:
        await thrifty.close()
        await eager.close()
        master.close()


async def test_a_kept_table_still_shows_what_was_submitted_since_by_the_masters_counts():
    master = ChildMaster()
    thrifty = MasterStatusClient("127.0.0.1", master.port, read_budget=1e-6)
    builder = ObservationBuilder(epoch=0.0, worker_shape=SHAPE, min_workers=0, max_workers=3)

    def observe(snap):
        return builder.build(snap, categories={}, worker_ids={}, pending=[], latency=LatencyStats())

    try:
        master.submit("split", 1, 500, 40)
        fresh = await thrifty.snapshot(1.0)
        assert not fresh.table_kept and observe(fresh).waiting_count == 40
        master.submit("split", 1, 500, 5)  # more of a category the table holds ...
        master.submit("align", 2, 2000, 10)  # ... and a new stage, at a barrier
        kept = await thrifty.snapshot(2.0)
        assert kept.table_kept and thrifty.task_reads == 1  # the table of the first read
        obs = observe(kept)
        assert obs.waiting_count == 55  # as the counts, read every time, say
        assert [(g.category, g.count) for g in obs.waiting] == [("split", 40), ("split", 5), ("align", 10)]
        assert obs.waiting[1].request == obs.waiting[0].request  # as the category's newest group asked
        assert obs.waiting[2].whole_worker  # a category the table never showed: a whole worker, until read
        # a recording replays it: the flag is in the dump
        from workqueue_bridge.snapshot import MasterSnapshot
        again = MasterSnapshot.model_validate(kept.model_dump(mode="json"))
        assert again.table_kept
    finally:
        await thrifty.close()
        master.close()


@pytest.mark.parametrize("kept", [True, False])
def test_a_task_a_kept_table_shows_running_that_went_back_to_the_queue_counts_once(kept):
    # the table (read a minute ago) has task 7 running on worker a; since, a lost its task
    # (the master put it back: the counts say 1 waiting) and b finished task 8 and runs 9
    from workqueue_bridge.snapshot import MasterSnapshot
    from workqueue_bridge.status_json import CategoryStatus, QueueStatus, TaskStatus, WorkerStatus

    tasks = [TaskStatus(task_id=7, state="running", category="align", cores=1, memory_mb=500, worker="a:1"),
             TaskStatus(task_id=8, state="running", category="split", cores=1, memory_mb=100, worker="b:1"),
             TaskStatus(task_id=9, state="running", category="split", cores=1, memory_mb=100, worker="b:1")]
    workers = [WorkerStatus(address="a:1", cores=2, memory_mb=4000, disk_mb=1000),
               WorkerStatus(address="b:1", cores=2, memory_mb=4000, disk_mb=1000, cores_in_use=1, tasks_running=1,
                            task_ids=[9])]
    queue = QueueStatus(tasks_waiting=1, tasks_running=1,
                        categories=[CategoryStatus(name="align", waiting=1), CategoryStatus(name="split", running=1)])
    snap = MasterSnapshot(taken_at=100.0, queue=queue, tasks=tasks, workers=workers, table_kept=kept)
    obs = ObservationBuilder(epoch=0.0, worker_shape=SHAPE, min_workers=0, max_workers=3).build(
        snap, categories={}, worker_ids={}, pending=[], latency=LatencyStats())
    if kept:  # the workers' read and the counts, read now, say what moved
        assert [t.task_id for t in obs.running] == [9]
        assert [(g.category, g.count, g.request.cores) for g in obs.waiting] == [("align", 1, 1.0)]  # as it asked
    else:  # a fresh table is read after the counts: it is taken as it is
        assert [t.task_id for t in obs.running] == [7, 8, 9] and obs.waiting == []


@pytest.mark.parametrize("segments", [True, False])
def test_a_kept_table_loses_what_was_dispatched_since_to_the_workers_and_the_counts(segments):
    # the table (read a while ago) has tasks 1-10 of align waiting; since, worker a took 1
    # and 2, and 3 more were dispatched and done between two reads: the counts say 5 wait.
    # Seen on a loaded master: a kept table showed 168 waiting and 0 running while 60 ran
    from workqueue_bridge.snapshot import LiveSnapshot, MasterSnapshot
    from workqueue_bridge.status_json import CategoryStatus, QueueStatus, TaskStatus, WorkerStatus
    from workqueue_bridge.task_table import SegmentMap

    tasks = [TaskStatus(task_id=i, state="waiting", category="align", cores=1, memory_mb=500) for i in range(1, 11)]
    seen: list[Mapping] = []

    def upcoming(group_of, running):
        seen.append((dict(group_of.items()), isinstance(group_of, SegmentMap), set(running)))
        return []

    def snap(at: float, waiting: int, runs: list[int]) -> MasterSnapshot:
        workers = [WorkerStatus(address="a:1", cores=4, memory_mb=8000, disk_mb=1000, cores_in_use=len(runs),
                                tasks_running=len(runs), task_ids=runs)]
        queue = QueueStatus(tasks_waiting=waiting, tasks_running=len(runs),
                            categories=[CategoryStatus(name="align", waiting=waiting, running=len(runs))])
        if not segments:
            return MasterSnapshot(taken_at=at, queue=queue, tasks=tasks, workers=workers, table_kept=True)
        return LiveSnapshot.model_construct(taken_at=at, queue=queue, tasks=[], workers=workers, table_kept=True,
                                            waiting_segments=[(1, 10, "align", Resources(cores=1, memory_mb=500))],
                                            running_tasks=[])

    builder = ObservationBuilder(epoch=0.0, worker_shape=SHAPE, min_workers=0, max_workers=3)

    def observe(s):
        return builder.build(s, categories={}, worker_ids={"a:1": "pod-a"}, pending=[], latency=LatencyStats(),
                             upcoming=upcoming)

    obs = observe(snap(100.0, 5, [1, 2]))
    assert [(t.task_id, t.category, t.worker, t.started_at, t.allocation.cores) for t in obs.running] == \
        [(1, "align", "pod-a", 100.0, 1.0), (2, "align", "pod-a", 100.0, 1.0)]  # from the read that saw them
    assert [(g.category, g.count) for g in obs.waiting] == [("align", 5)]
    group_of, as_ranges, running = seen[-1]
    assert 1 not in group_of and 2 not in group_of and group_of[10] == obs.waiting[0].id and running == {1, 2}
    assert as_ranges == segments  # (ranges stay ranges: the lookahead reads them by run)
    later = observe(snap(104.0, 5, [1, 2]))
    assert [t.started_at for t in later.running] == [100.0, 100.0]  # still the first read that saw them
    # every waiting task dispatched: the group goes, and so do its tasks' entries
    empty = observe(snap(108.0, 0, [2, 9]))
    assert [t.task_id for t in empty.running] == [2, 9] and empty.waiting == []
    assert empty.running[0].started_at == 100.0 and empty.running[1].started_at == 108.0
    assert seen[-1][0] == {}


def test_a_kept_table_brought_up_to_date_names_each_group_once_and_each_task_once():
    # groups g0 (align), g1 (blast), g2 (align, 2 cores); since the read, g0's one task
    # runs, listed by two workers in passing, and a new category, merge, waits
    from workqueue_bridge.snapshot import MasterSnapshot
    from workqueue_bridge.status_json import CategoryStatus, QueueStatus, TaskStatus, WorkerStatus

    tasks = [TaskStatus(task_id=1, state="waiting", category="align", cores=1),
             TaskStatus(task_id=2, state="waiting", category="blast", cores=1),
             TaskStatus(task_id=3, state="waiting", category="align", cores=2)]
    workers = [WorkerStatus(address=f"{a}:1", cores=4, memory_mb=8000, disk_mb=1000, tasks_running=1, task_ids=[1])
               for a in "ab"]
    queue = QueueStatus(tasks_waiting=4, categories=[
        CategoryStatus(name="align", waiting=1, running=1), CategoryStatus(name="blast", waiting=1),
        CategoryStatus(name="merge", waiting=2)])
    snap = MasterSnapshot(taken_at=10.0, queue=queue, tasks=tasks, workers=workers, table_kept=True)
    obs = ObservationBuilder(epoch=0.0, worker_shape=SHAPE, min_workers=0, max_workers=3).build(
        snap, categories={}, worker_ids={}, pending=[], latency=LatencyStats())
    assert [t.task_id for t in obs.running] == [1]
    assert [(g.id, g.category, g.count) for g in obs.waiting] == [("g1", "blast", 1), ("g2", "align", 1),
                                                                   ("g3", "merge", 2)]


def test_a_kept_table_loses_the_newest_tasks_the_master_dispatched_since():
    # align waits in g0 (older, 1 core) and g2 (newer, 2 cores), blast in g1; since the read
    # two align tasks were dispatched and have ended: the master dispatches the newest first
    # (workqueue_bridge/dispatch.py), so they were g2's, not g0's
    from workqueue_bridge.status_json import CategoryStatus
    from workqueue_bridge.task_table import at_the_counts

    one, two = Resources(cores=1), Resources(cores=2)
    groups = [TaskGroup(category="align", count=3, request=one, id="g0"),
              TaskGroup(category="blast", count=1, request=one, id="g1"),
              TaskGroup(category="align", count=3, request=two, id="g2")]
    out, gone = at_the_counts(groups, [CategoryStatus(name="align", waiting=4), CategoryStatus(name="blast", waiting=1)])
    assert [(g.id, g.count) for g in out] == [("g0", 3), ("g1", 1), ("g2", 1)] and gone == set()
    out, gone = at_the_counts(groups, [CategoryStatus(name="align", waiting=2)])
    assert [(g.id, g.count) for g in out] == [("g0", 2), ("g1", 1)] and gone == {"g2"}


def test_a_read_budget_outside_zero_to_one_is_refused():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="read_budget"):
            MasterStatusClient("127.0.0.1", 1, read_budget=bad)
