"""The master's transactions log, tailed (workqueue_bridge/transactions.py), and the status
client bringing a kept task table forward with it between reads of /task_status."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hta.model import LatencyStats, Resources
from hta.observation import ObservationBuilder
from workqueue_bridge.makeflow_args import MakeflowArgs
from workqueue_bridge.status import MasterStatusClient
from workqueue_bridge.status_json import CategoryStatus
from workqueue_bridge.task_table import TaskTable
from workqueue_bridge.transactions import ManagerEvent, TaskEvent, TransactionsTail, WorkerEvent, parse_line

#: lines as CCTools 8.0 writes them (from a makeflow -T wq run, and the Python API's WAITING)
HEADER = "# time manager_pid TASK taskid RUNNING worker_address (FIRST_RESOURCES|MAX_RESOURCES) {resources_allocated}\n"
START = "1795898976172730 17951 MANAGER START\n"
CONNECT = "1795898976477606 17951 WORKER worker-b00f 127.0.0.1:47994  CONNECTION\n"
WORKER_RES = '1795898976478768 17951 WORKER worker-b00f RESOURCES {"memory":[1024,"MB"],"cores":[1,"cores"]}\n'
WAITING = '1795898976400000 17951 TASK 11 WAITING "align" FIRST_RESOURCES {"cores":[2,"cores"],"memory":[2000,"MB"]}\n'
ALLOC = '{"memory":[1024,"MB"],"disk":[4096,"MB"],"gpus":[0,"gpus"],"cores":[1,"cores"]}'


def running(tid: int, t_us: int, worker: str = "127.0.0.1:47994") -> str:
    return f"{t_us} 17951 TASK {tid} RUNNING {worker}  FIRST_RESOURCES {ALLOC}\n"


def done(tid: int, t_us: int, worker: str = "127.0.0.1:47994") -> str:
    return (f"{t_us} 17951 TASK {tid} WAITING_RETRIEVAL {worker} \n"
            f"{t_us + 200} 17951 TASK {tid} RETRIEVED SUCCESS  0  {{}} {{}}\n"
            f"{t_us + 210} 17951 TASK {tid} DONE SUCCESS  0  {{}} {{}}\n")


def test_lines_parse_as_cctools_writes_them():
    assert parse_line(HEADER) is None and parse_line("\n") is None and parse_line(WORKER_RES) is None
    assert parse_line(START) == ManagerEvent(1795898976.17273, 17951, True)
    assert parse_line(CONNECT) == WorkerEvent(1795898976.477606, "127.0.0.1:47994", True)
    gone = parse_line("1795898980382428 17951 WORKER (null) 127.0.0.1:48046  DISCONNECTION STATUS_WORKER")
    assert gone == WorkerEvent(1795898980.382428, "127.0.0.1:48046", False, "STATUS_WORKER")
    ev = parse_line(running(10, 1795898976479694))
    assert isinstance(ev, TaskEvent)
    assert (ev.task_id, ev.state, ev.worker, ev.cores, ev.memory_mb, ev.disk_mb) == (
        10, "RUNNING", "127.0.0.1:47994", 1.0, 1024.0, 4096.0)
    assert ev.time == pytest.approx(1795898976.479694)
    w = parse_line(WAITING)
    assert isinstance(w, TaskEvent) and (w.category, w.cores, w.memory_mb, w.disk_mb) == ("align", 2.0, 2000.0, None)
    states = [parse_line(line) for line in done(10, 1795898980692224).splitlines()]
    assert [(e.state, e.worker, e.result) for e in states if isinstance(e, TaskEvent)] == [
        ("WAITING_RETRIEVAL", "127.0.0.1:47994", None), ("RETRIEVED", None, "SUCCESS"), ("DONE", None, "SUCCESS")]
    for bad in ("hello world", "17 1 TASK x RUNNING", "17 1 TASK 3 FLYING a", "17 1 TASK 3 RUNNING a FIRST {oops",
                "17 1 BANANA 3"):
        with pytest.raises(ValueError):
            parse_line(bad)


def test_the_tail_reads_only_whole_new_lines_and_skips_garbage(tmp_path: Path):
    log = tmp_path / "Makeflow.wqlog.tr"
    tail = TransactionsTail(log)
    assert tail.poll() == [] and tail.gaps == 0  # no file yet: nothing, no error
    log.write_text(HEADER + START + CONNECT)
    assert [type(e) for e in tail.poll()] == [ManagerEvent, WorkerEvent]  # a file that appears: read whole
    assert tail.poll() == []  # nothing new
    line = running(10, 1795898976479694)
    with open(log, "a") as f:
        f.write("garbage that is no line of Work Queue's\n" + line[:30])  # a line still being written
    assert tail.poll() == [] and tail.garbage == 1
    with open(log, "a") as f:
        f.write(line[30:] + "\x00\xff not a line either\n")
    events = tail.poll()
    assert [(e.task_id, e.state) for e in events if isinstance(e, TaskEvent)] == [(10, "RUNNING")]
    assert tail.garbage == 2 and tail.gaps == 0 and tail.offset == log.stat().st_size


def test_the_tail_starts_over_on_a_truncated_replaced_or_removed_file(tmp_path: Path):
    log = tmp_path / "Makeflow.wqlog.tr"
    log.write_text(START + running(1, 1795898976000000) + running(2, 1795898976000001))
    tail = TransactionsTail(log)
    assert len(tail.poll()) == 3
    log.write_text(running(3, 1795898977000000))  # truncated (shorter than what was read) and rewritten
    assert [e.task_id for e in tail.poll() if isinstance(e, TaskEvent)] == [3] and tail.gaps == 1
    os.rename(log, tmp_path / "old.tr")  # rotated: a new file under the name, longer than the old one
    log.write_text(START + running(4, 1795898978000000) + running(5, 1795898978000001) + done(4, 1795898979000000))
    assert [e.task_id for e in tail.poll() if isinstance(e, TaskEvent)] == [4, 5, 4, 4, 4] and tail.gaps == 2
    log.unlink()
    assert tail.poll() == [] and tail.gaps == 3


def test_skip_to_end_stops_at_the_last_whole_line(tmp_path: Path):
    log = tmp_path / "t.tr"
    tail = TransactionsTail(log)
    assert tail.skip_to_end() is False
    line = running(7, 1795898976479694)
    log.write_text(START + running(6, 1795898976000000) + line[:25])
    assert tail.skip_to_end() is True
    with open(log, "a") as f:
        f.write(line[25:])
    assert [(e.task_id, e.time) for e in tail.poll() if isinstance(e, TaskEvent)] == [(7, pytest.approx(
        1795898976.479694))]  # the line written across the skip is read whole, not from its middle


def test_the_log_is_where_makeflow_writes_it(tmp_path: Path):
    # makeflow 8.0 -T wq: WORKFLOW.wqlog (-L FILE) plus .tr, relative to -X DIR as its makeflowlog
    assert MakeflowArgs.parse(["sub/Makeflow"], cwd=tmp_path).transactions_log_path == \
        tmp_path / "sub" / "Makeflow.wqlog.tr"
    assert MakeflowArgs.parse(["-X", "wd", "Makeflow"], cwd=tmp_path).transactions_log_path == \
        tmp_path / "wd" / "Makeflow.wqlog.tr"
    for argv in (["-Lb.log", "Makeflow"], ["--batch-log", "b.log", "Makeflow"], ["Makeflow", "--batch-log=b.log"]):
        assert MakeflowArgs.parse(argv, cwd=tmp_path).transactions_log_path == tmp_path / "b.log.tr"


# -- the kept table brought forward ---------------------------------------------------------------
def table_data() -> list[dict]:
    """/task_status of tasks 1-8 (split, 1 core) and 9-10 (align, 2 cores) waiting, 11 running."""
    rows = [{"taskid": i, "state": "WAITING", "category": "split", "cores": 1, "memory": 500, "disk": -1}
            for i in range(1, 9)]
    rows += [{"taskid": i, "state": "WAITING", "category": "align", "cores": 2, "memory": 2000, "disk": -1}
             for i in (9, 10)]
    rows.append({"taskid": 11, "state": "running", "category": "split", "cores": 1, "memory": 500, "disk": -1,
                 "address_port": "w2:9000", "time_when_commit_start": 1795898970000000})
    return rows


def events(text: str):
    return [e for e in (parse_line(line) for line in text.splitlines()) if e is not None]


@pytest.mark.parametrize("full", [False, True])
def test_a_table_follows_a_task_from_waiting_to_running_to_done(full: bool):
    table = TaskTable(None, table_data(), full=full)
    before_segments, before_running = table.waiting_segments, table.running
    t0 = 1795898976_000000
    assert table.apply(events(running(8, t0) + running(10, t0 + 5, "w2:9000"))) == 2
    assert [(lo, hi, c) for lo, hi, c, _ in table.waiting_segments] == [(1, 7, "split"), (9, 9, "align")]
    assert [(t.task_id, t.category, t.worker, t.started_at) for t in table.running] == [
        (8, "split", "127.0.0.1:47994", pytest.approx(1795898976.0)), (10, "align", "w2:9000", pytest.approx(
            1795898976.000005)), (11, "split", "w2:9000", pytest.approx(1795898970.0))]
    # the request the table had (what /task_status reports), not the worker's share
    assert (table.running[0].cores, table.running[0].memory_mb, table.running[1].cores) == (1.0, 500.0, 2.0)
    assert len(before_segments) == 2 and len(before_running) == 1  # an earlier snapshot's lists are left alone
    assert table.apply(events(done(8, t0 + 10**6) + done(11, t0 + 10**6))) == 2
    assert [t.task_id for t in table.running] == [10]
    assert 8 not in {t.task_id for t in table.tasks} and 11 not in {t.task_id for t in table.tasks}
    if full:  # a recording's table lists the waiting tasks too
        assert [t.task_id for t in table.tasks if t.state == "waiting"] == [*range(1, 8), 9]
    # a line logged while the table was read changes nothing
    assert table.apply(events(running(10, t0 + 5, "w2:9000") + done(8, t0 + 10**6))) == 0


def test_a_table_takes_submissions_lost_workers_and_tasks_it_never_had():
    table = TaskTable(None, table_data())
    t0 = 1795898976_000000
    # the Python API logs submissions: task 12 waits, after the align run, in a new run
    table.apply(events(WAITING.replace("TASK 11", "TASK 12") + running(11, t0 - 1, "w2:9000")))
    assert [(lo, hi, c) for lo, hi, c, _ in table.waiting_segments] == [(1, 8, "split"), (9, 10, "align"),
                                                                         (12, 12, "align")]
    # w2 is lost: the master puts its task 11 back in the queue, between the runs it joins
    table.apply(events("1795898977000000 17951 WORKER w-2 w2:9000  DISCONNECTION FAILURE\n"))
    assert [(lo, hi, c) for lo, hi, c, _ in table.waiting_segments] == [(1, 8, "split"), (9, 10, "align"),
                                                                         (11, 11, "split"), (12, 12, "align")]
    assert table.running == []
    # makeflow logs no submission: task 20, never in the table, runs; the counts say align runs one
    counts = [CategoryStatus(name="split", waiting=8, running=0), CategoryStatus(name="align", waiting=3, running=1)]
    table.apply(events(running(20, t0 + 100)), counts)
    assert [(t.task_id, t.category, t.cores, t.memory_mb) for t in table.running] == [(20, "align", 2.0, 2000.0)]


# -- the status client ----------------------------------------------------------------------------------
#: a real master in its own process with a transactions log; submits when told on stdin
MASTER = """
import select, sys
from workqueue_bridge.wq import load
wq = load()
q = wq.WorkQueue(port=0, transactions_log=sys.argv[1])
print(q.port, flush=True)
while True:
    q.wait(1)
    if select.select([sys.stdin], [], [], 0)[0]:
        words = sys.stdin.readline().split()
        if not words:
            break
        for i in range(int(words[1])):  # submit N COMMAND...
            t = wq.Task(" ".join(words[2:]))
            t.specify_category("split")
            t.specify_cores(1)
            t.specify_memory(100)
            t.specify_disk(100)
            q.submit(t)
        print("ok", flush=True)
"""


class LoggingMaster:
    def __init__(self, log: Path):
        self.log = log
        # (its TMPDIR the test's own: the work_queue module's staging folder, which it removes
        # only at a normal exit, goes with the test's files when the master is killed)
        self.proc = subprocess.Popen([sys.executable, "-c", MASTER, str(log)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "TMPDIR": str(log.parent)})
        self.port = int(self.proc.stdout.readline())

    def submit(self, n: int, command: str) -> None:
        self.proc.stdin.write(f"submit {n} {command}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def segment_ids(snap) -> list[int]:
    return [i for lo, hi, *_ in snap.waiting_segments for i in range(lo, hi + 1)]


async def test_the_client_moves_a_task_from_waiting_to_running_to_done_without_reading_the_table(tmp_path: Path):
    # the master's table stays put; the log the client tails says task 3 ran and finished
    master = LoggingMaster(tmp_path / "master.tr")
    log = tmp_path / "Makeflow.wqlog.tr"
    log.write_text(HEADER + START)
    client = MasterStatusClient("127.0.0.1", master.port, read_budget=1e-6, transactions_log=log)
    builder = ObservationBuilder(epoch=0.0, worker_shape=Resources(cores=4, memory_mb=8000, disk_mb=16000),
                                 min_workers=0, max_workers=3)
    try:
        master.submit(4, "./split.sh")
        first = await client.snapshot(1.0)
        assert client.task_reads == 1 and segment_ids(first) == [1, 2, 3, 4] and first.running_tasks == []
        with open(log, "a") as f:
            f.write(running(3, int(time.time() * 1e6)))
        snap = await client.snapshot(2.0)
        assert client.task_reads == 1 and segment_ids(snap) == [1, 2, 4]
        assert [(t.task_id, t.category, t.worker, t.cores) for t in snap.running_tasks] == [
            (3, "split", "127.0.0.1:47994", 1.0)]
        obs = builder.build(snap, categories={}, worker_ids={}, pending=[], latency=LatencyStats())
        assert obs.waiting_count == 3  # (the observation, from the same table)
        assert segment_ids(first) == [1, 2, 3, 4]  # the earlier snapshot kept what it read
        with open(log, "a") as f:
            f.write(done(3, int(time.time() * 1e6)))
        snap = await client.snapshot(3.0)
        assert client.task_reads == 1 and segment_ids(snap) == [1, 2, 4] and snap.running_tasks == []
        assert client.log_events == 4
        # a log cut short: not applied again until the table is read, which the budget then does not hold
        log.write_text(START)
        await client.snapshot(4.0)
        assert client.log_gaps == 1 and not client._synced and client.task_reads == 1
        with open(log, "a") as f:
            f.write(running(4, int(time.time() * 1e6)))
        assert segment_ids(await client.snapshot(4.5)) == [1, 2, 4]  # (not applied)
        master.submit(1, "./split.sh")
        snap = await client.snapshot(5.0)
        # the master's own table: task 3 never ran there
        assert client.task_reads == 2 and client._synced and segment_ids(snap) == [1, 2, 3, 4, 5]
    finally:
        await client.close()
        master.close()


@pytest.mark.skipif(shutil.which("work_queue_worker") is None, reason="needs CCTools' work_queue_worker")
async def test_a_real_masters_log_keeps_a_kept_table_current(tmp_path: Path):
    """A real master and worker: the submissions the master logs, the task a worker runs and
    its end reach the kept table; /task_status is read once."""
    log = tmp_path / "master.tr"
    master = LoggingMaster(log)
    client = MasterStatusClient("127.0.0.1", master.port, read_budget=1e-6, transactions_log=log)
    worker = None
    try:
        master.submit(3, "sleep 2")
        await client.snapshot(1.0)
        assert client.task_reads == 1
        master.submit(2, "sleep 2")  # logged as WAITING by the Python API
        snap = await client.snapshot(2.0)
        assert snap.table_kept and segment_ids(snap) == [1, 2, 3, 4, 5] and client.task_reads == 1
        age, read_age = client.table_age_s(), client.table_read_age_s()
        assert age is not None and read_age is not None and age < read_age
        # (its workspace in tmp_path: killed below, it cannot remove it)
        worker = subprocess.Popen(["work_queue_worker", "--single-shot", "--cores", "1", "--memory", "1000",
                                   "--disk", "1000", "--timeout", "30", f"--workdir={tmp_path}", "127.0.0.1",
                                   str(master.port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen_running: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = await client.snapshot(time.time())
            seen_running |= {t.task_id for t in snap.running_tasks}
            if len(segment_ids(snap)) <= 3 and not (seen_running & set(segment_ids(snap))):
                break
            await asyncio.sleep(0.2)
        # newest first: 5 ran (and finished, or still runs), then 4; neither waits any more
        assert {5, 4} <= seen_running and 5 not in segment_ids(snap) and 4 not in segment_ids(snap)
        assert client.task_reads == 1 and all(t.started_at for t in snap.running_tasks)
        assert [t.task_id for t in snap.running_tasks] in ([], [4], [3])
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(10)
        await client.close()
        master.close()
