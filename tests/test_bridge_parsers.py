"""The bridge's readers, on JSON and logs captured from a real CCTools 8.0 master."""

import json

import pytest
from conftest import DATA

from hta.model import CategoryModel, LatencyStats, Resources
from hta.observation import ObservationBuilder
from workqueue_bridge.makeflow_log import MakeflowLog, NodeState
from workqueue_bridge.monitor_summaries import SummaryDirectory, parse_summary
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import clean_category, parse_queue_status, parse_task_status, parse_worker_status
from workqueue_bridge.task_table import group_waiting


def load(name):
    return json.loads((DATA / name).read_text())


def captured_snapshot() -> MasterSnapshot:
    """One read of a real master: one worker running two tasks, a third waiting."""
    return MasterSnapshot(
        taken_at=1795315971.9,
        queue=parse_queue_status(load("queue_status_running.json")),
        tasks=parse_task_status(load("task_status_running.json")),
        workers=parse_worker_status(load("worker_status_running.json")),
    )


def test_category_quotes_are_stripped():
    assert clean_category('"align"') == "align"
    assert clean_category("align") == "align"
    assert clean_category(None) == "default"


def test_queue_status_from_real_master():
    q = parse_queue_status(load("queue_status_waiting.json"))
    assert q.tasks_waiting == 3 and q.tasks_running == 0
    assert [c.name for c in q.categories] == ["align"]  # "whole queue" is not a category
    assert q.categories[0].waiting == 3


def test_task_status_from_real_master():
    tasks = parse_task_status(load("task_status_running.json"))
    assert [t.task_id for t in tasks] == [1, 2, 3]  # dispatch order
    states = {t.task_id: t.state for t in tasks}
    assert states == {1: "waiting", 2: "running", 3: "running"}
    t3 = tasks[2]
    assert t3.category == "align" and t3.cores == 1 and t3.memory_mb == 200 and t3.disk_mb == 100
    assert t3.worker == "127.0.0.1:51424" and t3.started_at > 1.7e9


def test_worker_status_from_real_master():
    (w,) = parse_worker_status(load("worker_status_running.json"))
    assert w.address == "127.0.0.1:51424"
    assert (w.cores, w.memory_mb, w.disk_mb) == (2, 1000, 1000)
    assert w.cores_in_use == 2 and w.tasks_running == 2 and w.task_ids == [2, 3]


def test_a_worker_that_has_not_reported_its_resources_is_not_listed():
    (real,) = load("worker_status_running.json")
    accepted = {**real, "address_port": "127.0.0.1:51500", "hostname": "unknown", "total_tasks_running": 0,
                **{f"{r}_{k}": 0 for r in ("cores", "memory", "disk") for k in ("total", "inuse", "largest", "smallest")}}
    accepted = {k: v for k, v in accepted.items() if not k.startswith("current_task_")}
    handshaken = {**accepted, "hostname": "vm"}  # hello sent, resources not yet
    assert [w.address for w in parse_worker_status([real, accepted, handshaken])] == ["127.0.0.1:51424"]


def test_observation_from_real_master():
    snap = captured_snapshot()
    epoch = 1795315968.0
    builder = ObservationBuilder(epoch=epoch, worker_shape=Resources(cores=2, memory_mb=1000, disk_mb=1000),
                                 min_workers=0, max_workers=3)
    obs = builder.build(snap, categories={}, worker_ids={"127.0.0.1:51424": "w1"}, pending=[],
                        latency=LatencyStats())
    assert abs(obs.time - 3.9) < 1e-6
    assert [(g.category, g.count) for g in obs.waiting] == [("align", 1)]
    assert obs.waiting[0].request == Resources(cores=1, memory_mb=200, disk_mb=100)
    assert sorted(t.task_id for t in obs.running) == [2, 3]
    assert all(t.worker == "w1" and 1.7 < t.started_at < 1.9 for t in obs.running)
    (w,) = obs.workers
    assert w.id == "w1" and w.running == 2 and w.free.cores == 0
    assert obs.supply_cores() == 2 and obs.in_use_cores() == 2 and obs.waiting_cores() == 1
    assert not any(t.whole_worker for t in obs.running)  # they declared their cores


def test_a_task_that_declares_nothing_uses_its_categorys_measured_cores_of_its_whole_worker():
    # the captured read with one running task that declares nothing: the 2-core worker is
    # all allocated to it, and it uses what its category measured (one core), if measured
    undeclared = {"cores": -1, "memory": -1, "disk": -1}
    tasks = [{**t, **undeclared} for t in load("task_status_running.json") if t["taskid"] != 2]
    (worker,) = load("worker_status_running.json")
    worker = {**worker, "total_tasks_running": 1}
    snap = MasterSnapshot(taken_at=1795315971.9, queue=parse_queue_status(load("queue_status_running.json")),
                          tasks=parse_task_status(tasks), workers=parse_worker_status([worker]))
    builder = ObservationBuilder(epoch=1795315968.0, worker_shape=Resources(cores=2, memory_mb=1000, disk_mb=1000),
                                 min_workers=0, max_workers=3)
    build = lambda cats: builder.build(snap, categories=cats, worker_ids={"127.0.0.1:51424": "w1"}, pending=[],
                                       latency=LatencyStats())
    obs = build({})
    (t,) = obs.running
    assert t.whole_worker and t.allocation.cores == 2
    assert (obs.in_use_cores(), obs.waiting_cores()) == (2, 2)  # never measured: the whole worker
    align = CategoryModel(name="align", samples=3, peak=Resources(cores=0.9, memory_mb=40, disk_mb=1))
    obs = build({"align": align})
    assert (obs.in_use_cores(), obs.waiting_cores()) == (1, 1)  # measured: one (whole) core


def test_a_task_and_a_worker_started_at_the_epoch_itself_age_from_it():
    # the simulator's epoch is 0: a task started at t = 0 reports started_at 0.0, which is
    # a time, not "unknown" (None). Read as unknown it looked just started at every read,
    # so a straggler started at t = 0 was forever "about to end" and held the workers
    # its dependents were expected to need
    snap = captured_snapshot()
    at_zero = [t.model_copy(update={"started_at": 0.0}) for t in snap.tasks]
    w0 = [w.model_copy(update={"started_at": 0.0, "tasks_running": 0, "cores_in_use": 0}) for w in snap.workers]
    later = snap.model_copy(update={"taken_at": 500.0, "tasks": at_zero, "workers": w0})
    builder = ObservationBuilder(epoch=0.0, worker_shape=Resources(cores=2), min_workers=0, max_workers=3)
    obs = builder.build(later, categories={}, worker_ids={}, pending=[], latency=LatencyStats())
    assert obs.running and all(t.started_at == 0.0 for t in obs.running)
    assert [w.idle_since for w in obs.workers] == [0.0]  # idle since it connected, at t = 0
    unknown = [t.model_copy(update={"started_at": None}) for t in snap.tasks]
    obs = builder.build(later.model_copy(update={"tasks": unknown}), categories={}, worker_ids={}, pending=[],
                        latency=LatencyStats())
    assert all(t.started_at == 500.0 for t in obs.running)  # not reported: as of this read


@pytest.mark.parametrize("auto", [True, False])
def test_an_observation_says_whether_the_master_allocates_measured_tasks_their_peak(auto):
    # a policy sizes pods by it: without it, a measured task taking a whole worker reads as
    # one retried after going over its peak (which needs a node) where the master never
    # allocates peaks at all (makeflow without --allocation)
    builder = ObservationBuilder(epoch=0.0, worker_shape=Resources(cores=2), min_workers=0, max_workers=3,
                                 auto_allocation=auto)
    obs = builder.build(captured_snapshot(), categories={}, worker_ids={}, pending=[], latency=LatencyStats())
    assert obs.auto_allocation is auto


def test_waiting_groups_keep_fifo_order_and_merge_runs():
    from workqueue_bridge.status_json import TaskStatus

    ts = [TaskStatus(task_id=i, state="waiting", category=c, cores=1)
          for i, c in enumerate(["a", "a", "b", "a", "a"], start=1)]
    ts.append(TaskStatus(task_id=9, state="waiting", category="c"))  # nothing declared → whole worker
    groups = group_waiting(ts)
    assert [(g.category, g.count) for g in groups] == [("a", 2), ("b", 1), ("a", 2), ("c", 1)]
    assert groups[-1].whole_worker and not groups[0].whole_worker


def test_makeflow_log_from_real_run():
    log = MakeflowLog(DATA / "Makeflow.makeflowlog")
    events = log.poll()
    assert log.started_at and log.completed_at and log.completed_at > log.started_at
    assert len(events) == 8
    assert [e.state for e in events[:3]] == [NodeState.RUNNING] * 3
    assert events[-1].complete == 4 and events[-1].total == 4 and events[-1].failed == 0
    assert log.retried == 0
    assert log.poll() == []  # incremental: nothing new


def test_makeflow_log_is_read_incrementally(tmp_path):
    lines = (DATA / "Makeflow.makeflowlog").read_text().splitlines(keepends=True)
    p = tmp_path / "x.makeflowlog"
    log = MakeflowLog(p)
    p.write_text("".join(lines[:10]) + lines[10][:5])  # a half-written line is not read
    first = log.poll()
    with open(p, "a") as fh:
        fh.write(lines[10][5:] + "".join(lines[11:]))
    second = log.poll()
    assert len(first) + len(second) == 8


def test_monitor_summary_from_real_run():
    s = parse_summary((DATA / "monitor" / "resource-rule-0.summary").read_text())
    assert s.category == "align" and s.succeeded
    assert 4.0 <= s.wall_time_s < 4.1 and s.memory_mb == 3 and s.disk_mb == 1


def test_monitor_summary_with_bad_escape_is_repaired():
    text = (DATA / "monitor" / "resource-rule-0.summary").read_text()
    broken = text.replace('"command":"sleep 4;', '"command":"echo \\\'hi\\\' \\d; sleep 4;')
    assert "\\'" in broken
    s = parse_summary(broken)
    assert "hi" in s.command and s.category == "align"


def test_cctools_json_reads_ccTools_escapes_and_leaves_valid_json_alone():
    from workqueue_bridge import cctools_json

    # how makeflow 8's master, makeflow_viz and resource_monitor write `sed 's/\./,/' | paste -sd' '`:
    # a backslash escaped as JSON does, a quote as \' (which JSON has not)
    raw = r'[{"taskid":1,"command":"sed \'s/\\./,/\' | paste -sd\' \'"}]'
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert cctools_json.loads(raw) == [{"taskid": 1, "command": r"sed 's/\./,/' | paste -sd' '"}]
    # a backslash before a letter JSON has no escape for is kept as itself; \u needs 4 hex digits
    assert cctools_json.loads(r'{"c":"grep \d \'x\' \ux \u00e9 \\\\host"}') == {"c": r"grep \d 'x' \ux é \\host"}
    good = r'{"command":"a \\ b \"q\" \u00e9 \t"}'
    assert cctools_json.loads(good) == json.loads(good) == {"command": 'a \\ b "q" é \t'}


def test_summary_directory_retries_a_partial_file(tmp_path):
    full = (DATA / "monitor" / "resource-rule-0.summary").read_text()
    (tmp_path / "a.summary").write_text(full[:50])
    d = SummaryDirectory(tmp_path)
    assert d.poll() == []
    (tmp_path / "a.summary").write_text(full)
    assert len(d.poll()) == 1
    assert d.poll() == []


def test_a_summary_rewritten_by_a_later_run_is_read_again(tmp_path):
    """A re-run of the workflow rewrites ``resource-rule-N.summary``: read once by name, the
    re-run learned only what the run before had measured (a user's trial found it)."""
    import os

    full = json.loads((DATA / "monitor" / "resource-rule-0.summary").read_text())
    path = tmp_path / "resource-rule-0.summary"
    path.write_text(json.dumps(full))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    d = SummaryDirectory(tmp_path)
    (first,) = d.poll()
    assert d.poll() == []
    full["wall_time"] = [first.wall_time_s + 4.0, "s"]
    path.write_text(json.dumps(full))
    (again,) = d.poll()
    assert again.wall_time_s == pytest.approx(first.wall_time_s + 4.0)
    assert d.poll() == []


def test_workers_the_backend_retired_are_left_out():
    snap = captured_snapshot()
    builder = ObservationBuilder(epoch=1795315968.0, worker_shape=Resources(cores=2), min_workers=0, max_workers=3)
    obs = builder.build(snap, categories={}, worker_ids={}, pending=[], latency=LatencyStats(),
                        retired={"127.0.0.1:51424"})
    assert obs.workers == [] and obs.supply_cores() == 0


def test_idle_since_is_kept_across_reads_and_restarts_when_the_worker_works_again():
    """work_queue_factory's idle timeout counts from here (production never filled it before)."""
    snap = captured_snapshot()
    (w,) = snap.workers
    epoch = 1795315968.0
    builder = ObservationBuilder(epoch=epoch, worker_shape=Resources(cores=2), min_workers=0, max_workers=3)

    def read(at: float, running: int):
        worker = w.model_copy(update={"tasks_running": running, "cores_in_use": running})
        s = snap.model_copy(update={"taken_at": epoch + at, "workers": [worker]})
        (info,) = builder.build(s, categories={}, worker_ids={}, pending=[], latency=LatencyStats()).workers
        return info.idle_since

    connected = w.started_at - epoch
    assert read(10, 0) == pytest.approx(connected)  # idle since it connected
    assert read(20, 0) == pytest.approx(connected)  # still the same idle spell
    assert read(30, 1) is None                       # busy
    assert read(40, 0) == pytest.approx(40)          # a new idle spell starts at this read
    assert read(50, 0) == pytest.approx(40)


def test_rules_rebuilt_after_a_restart_are_not_re_runs(tmp_path):
    """makeflow's recovery puts rules whose outputs were deleted back to WAITING before its
    # STARTED line: rebuilding them is no re-run; a rule a killed run left RUNNING is resumed."""
    from workqueue_bridge.makeflow_log import MakeflowLog

    t = 1_795_000_000_000_000
    lines = [f"# STARTED {t}",
             f"{t + 1} 0 1 1 2 1 0 0 0 3", f"{t + 2} 0 2 1 2 0 1 0 0 3",  # 0 runs, completes
             f"{t + 3} 1 1 2 1 1 1 0 0 3", f"{t + 4} 1 2 2 1 0 2 0 0 3",  # 1 runs, completes
             f"{t + 5} 2 1 3 0 1 2 0 0 3",  # 2 runs ... and makeflow is killed
             # the next makeflow: 1's output was deleted (COMPLETE → WAITING), 2 was left running
             f"{t + 10} 1 0 2 1 0 2 0 0 3", f"{t + 11} 2 0 3 2 0 1 0 0 3",
             f"# STARTED {t + 12}",
             f"{t + 13} 1 1 4 1 1 1 0 0 3", f"{t + 14} 1 2 4 1 0 2 0 0 3",
             f"{t + 15} 2 1 5 0 1 2 0 0 3", f"{t + 16} 2 2 5 0 0 3 0 0 3"]
    (tmp_path / "W.makeflowlog").write_text("\n".join(lines) + "\n")
    log = MakeflowLog(tmp_path / "W.makeflowlog")
    log.poll()
    assert (log.resumed, log.retried) == (1, 0)  # rule 2 the killed run left running, not the rebuilt rule 1
    # the progress line counts 3 complete; this run completed 1 and 2, so one was done before it
    assert (log.latest.complete, log.completed_this_run) == (3, 2)
