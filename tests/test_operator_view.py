"""What the operator sees: the cap named where it binds (decisions, /status, /metrics, the
report), help through ``makeflow -T hta``, no internal error text, words that say what
happened, and a status server that asks for its token."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from conftest import HTA, ROOT

from hta.accounting import CoreSample, integrate
from hta.model import LatencyStats, Resources, ScaleDecision
from hta.policies.registry import make_policy
from hta.scaling_log import DecisionRecord, EndRecord, RunRecord, ScalingLogWriter, WorkerRecord
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload
from hta.status.panel import LiveView, decision_line
from hta.status.server import StatusServer, open_to
from hta.status.snapshot import RunInfo, build_snapshot
from hta.summary import summarize
from hta.summary_view import core_s, summary_rows
from workqueue_bridge import cctools_json

INFO = RunInfo(workflow="w/Makeflow", policy="hta", backend="simulated", started_at=0.0)


def held_at_the_cap() -> Simulation:
    """Twelve 1-core tasks of 60 s, one 3-core node at most: the cap binds from the start."""
    tasks = [SimTask(f"t{i}", "a", 60, cores=1) for i in range(12)]
    sim = Simulation(Workload("w", tasks), make_policy("hta"),
                     ClusterModel(max_nodes=1, start_nodes=0, latency_mean_s=20, latency_sd_s=0, teardown_s=0),
                     log=ScalingLogWriter())
    sim.run()
    return sim


# -- the cap --------------------------------------------------------------------------------------

def test_a_decision_held_by_the_cap_says_so_with_the_tasks_waiting():
    sim = held_at_the_cap()
    held = [d for d in sim.controller.decisions if d.held_back]
    assert held and all(d.held_by == "--max-workers 1" for d in held)
    first = sim.controller.decisions[0]
    # three pods of a third of the node (the tasks' measured size) fill the cap; nine more are wanted
    assert (first.add, first.held_back) == (3, 9)
    hold = next(d for d in held if not d.add)
    assert decision_line(hold, "normal", newly_held=True) == \
        f"hta: t={hold.t:.1f}s hold at the cap (--max-workers 1): {hold.waiting} tasks waiting"
    assert decision_line(hold, "normal") is None  # said when it starts, not at every decision
    assert "add 3 workers, 9 more held at the cap (--max-workers 1)" in (decision_line(first) or "")


def test_a_backend_that_starts_fewer_workers_than_asked_is_named_as_holding_them_back():
    class Stingy:
        name = "stingy"

        async def request(self, n, shape, now):
            return ["w1"]

        async def refresh(self, snap, now):
            return []

        def holding_back(self):
            return "the namespace's ResourceQuota: limited: pods=1"

    class Wants:
        name = "wants"

        def decide(self, obs):
            return ScaleDecision(add=3, next_decision_s=10)

    sim = held_at_the_cap()
    c = sim.controller
    c.backend, c.policy = Stingy(), Wants()
    obs = c.last_observation.model_copy(update={"workers": [], "pending": [], "max_workers": 10})
    asyncio.run(c.act(Wants().decide(obs), obs, c.last_snapshot, obs.time))
    d = c.decisions[-1]
    assert (d.add, d.held_back, d.held_by) == (1, 2, "the namespace's ResourceQuota: limited: pods=1")
    assert "add 1 worker, 2 more held by the namespace's ResourceQuota" in decision_line(d)


def test_status_and_metrics_show_the_cap():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from hta.status.metrics import make_registry

    tasks = [SimTask(f"t{i}", "a", 600, cores=1) for i in range(12)]
    sim = Simulation(Workload("w", tasks), make_policy("hta"),
                     ClusterModel(max_nodes=1, start_nodes=0, latency_mean_s=20, latency_sd_s=0, horizon_s=100,
                                  teardown_s=0), log=ScalingLogWriter())
    sim.run()
    s = build_snapshot(sim.controller, INFO)
    assert s.cap is not None and (s.cap.max_workers, s.cap.cores, s.cap.at_cap) == (1, 3.0, True)
    text = generate_latest(make_registry(lambda: build_snapshot(sim.controller, INFO))).decode()
    values = {x.name: x.value for f in text_string_to_metric_families(text) for x in f.samples}
    assert (values["hta_max_workers"], values["hta_at_cap"]) == (1, 1)


def test_the_shortage_beyond_the_cap_is_counted_apart():
    # demand 10 cores, the cap 4, in use 2 for 10 s: 80 core·s short, 60 of them beyond the cap
    t = integrate([CoreSample(0, 2, 2, 10), CoreSample(10, 2, 2, 2)], end=20, cap_cores=4)
    assert (t.shortage_core_s, t.shortage_beyond_cap_core_s) == (80, 60)
    sim = held_at_the_cap()
    s = summarize(sim.log.records)
    assert s.cap_cores == 3 and 0 < s.shortage_beyond_cap_core_s < s.shortage_core_s
    assert "of it beyond the cap, --max-workers 1" in dict(summary_rows(s))["shortage"]


def test_the_report_draws_the_cap_and_splits_the_shortage(tmp_path: Path):
    sim = held_at_the_cap()
    log = tmp_path / "run.scaling.jsonl"
    log.write_text("".join(r.model_dump_json() + "\n" for r in sim.log.records))
    r = subprocess.run([*HTA, "report", str(log), "--plot", str(tmp_path / "fig")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "beyond the cap (the user's)" in r.stdout and "under the cap (the policy's)" in r.stdout
    assert (tmp_path / "fig" / "run1-hta.png").stat().st_size > 10_000


def test_a_reader_that_leaves_early_still_gets_the_figures(tmp_path: Path):
    sim = held_at_the_cap()
    log = tmp_path / "run.scaling.jsonl"
    log.write_text("".join(r.model_dump_json() + "\n" for r in sim.log.records))
    p = subprocess.Popen([*HTA, "report", str(log), "--plot", str(tmp_path / "fig")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.stdout.readline()  # `| head -1`: the reader takes a line and leaves
    p.stdout.close()
    p.wait(timeout=60)
    assert (tmp_path / "fig" / "run1-hta.png").exists(), p.stderr.read() if p.stderr else ""


# -- help through the makeflow form ---------------------------------------------------------------------

def makeflow_shim(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hta.makeflow_shim", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_makeflow_dash_t_hta_help_prints_makeflows_help_and_htas_options_and_runs_nothing(tmp_path: Path, flag):
    (tmp_path / "Makeflow").write_text("out.txt:\n\techo hi > out.txt\n")
    r = makeflow_shim("-T", "hta", flag, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--batch-type" in r.stdout  # makeflow's own help
    assert "HTA_MAX_WORKERS" in r.stdout and "max-workers:" in r.stdout and "HTA_VERBOSE=1" in r.stdout
    assert "HTA_CONFIG" in r.stdout and not r.stderr.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makeflow"]  # no run, no log


def test_an_hta_option_given_to_makeflow_names_its_variable(tmp_path: Path):
    r = makeflow_shim("-T", "hta", "--max-workers", "4", "Makeflow", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "--max-workers is an HTA option" in r.stderr and "HTA_MAX_WORKERS=..." in r.stderr


# -- no internal text ---------------------------------------------------------------------------------

def test_a_sub_workflow_rule_keeps_the_lookahead(tmp_path: Path):
    """makeflow_viz writes ``"args":,`` for a MAKEFLOW rule: not JSON, and the whole
    lookahead was lost ("no DAG lookahead: Expecting value")."""
    from workqueue_bridge.dag import load_dag

    (tmp_path / "sub.mf").write_text("x.txt:\n\techo x > x.txt\n")
    (tmp_path / "Makeflow").write_text("x.txt: sub.mf\n\tMAKEFLOW sub.mf\n\nfinal.txt: x.txt\n\tcat x.txt > final.txt\n")
    dag = load_dag(tmp_path / "Makeflow")
    assert [r.parents for r in dag.rules] == [[], [0]]
    assert cctools_json.loads('{"a": "quote \\":,", "args":, "b":}') == {"a": 'quote ":,', "args": None, "b": None}


async def test_a_master_gone_as_makeflow_ends_is_no_step_failure():
    """The step that finds the master gone just as makeflow exits says nothing: no
    ``step failed (ClientConnectorError …)`` line before the run's own outcome."""
    sim = held_at_the_cap()
    c = sim.controller
    finished = asyncio.Event()

    class Gone:
        async def snapshot(self, now):
            finished.set()  # (makeflow exits while this read fails)
            raise ConnectionError("Cannot connect to host 127.0.0.1:1025")

    c.master = Gone()
    c.config.poll_interval_s = 0.01
    await c.run(finished)
    assert c.last_error is None and c.step_failures == 1


def test_worker_lines_follow_the_decision_that_caused_them():
    class Controller:
        decisions = [DecisionRecord(t=12.346, drain=["w2"], next_decision_s=5, reason="idle")]
        worker_events = [WorkerRecord(t=12.34567, worker="w2", event="drained", cores=1)]
        last_error = None

        def now(self):
            return 13.0

    view = LiveView(Controller(), INFO, mode="lines")  # type: ignore[arg-type]
    lines = view.new_lines()
    assert lines[0].startswith("hta: t=12.3s drain w2") and lines[1] == "hta: t=12.3s worker w2 drained"


# -- words -------------------------------------------------------------------------------------------------

def test_the_summary_and_the_report_round_alike():
    assert core_s(1.6) == "1.6 core·s" and core_s(1.6, "") == "1.6" and core_s(1234.4) == "1,234 core·s"


def test_a_worker_that_came_and_went_between_two_looks_counts_in_the_peak():
    records = [RunRecord(started_at=0, workflow="W", policy="hta", backend="local",
                         worker_shape=Resources(cores=1, memory_mb=100, disk_mb=100), max_workers=4),
               WorkerRecord(t=0, worker="w1", event="requested", cores=1),
               WorkerRecord(t=1, worker="w1", event="connected", cores=1, latency_s=1.0),
               WorkerRecord(t=2, worker="w1", event="stopped", cores=1),
               EndRecord(t=2, exit_code=0, runtime_s=2, tasks_done=1)]
    s = summarize(records)
    assert s.peak_workers == 1
    assert dict(summary_rows(s))["preparation latency"].startswith("median 1.0 s")
    no_wait = records[:2] + [WorkerRecord(t=1, worker="w1", event="connected", cores=1)] + records[3:]
    assert dict(summary_rows(summarize(no_wait)))["preparation latency"].startswith("not measured")


# -- the status port ---------------------------------------------------------------------------------

async def test_the_status_token_is_asked_of_every_reader():
    sim = held_at_the_cap()
    srv = StatusServer.for_controller(sim.controller, INFO, token="s3cret")
    url = await srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            for path in ("", "status", "metrics"):
                async with s.get(url + path) as r:
                    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
                async with s.get(url + path, headers={"Authorization": "Bearer wrong"}) as r:
                    assert r.status == 401
                async with s.get(url + path, headers={"Authorization": "Bearer s3cret"}) as r:
                    assert r.status == 200
            async with s.get(url + "status?token=s3cret") as r:  # (the page passes it on this way)
                assert r.status == 200 and json.loads(await r.text())["cap"]["max_workers"] == 1
    finally:
        await srv.stop()


def test_a_status_server_open_beyond_this_host_is_said_to_be():
    assert open_to("127.0.0.1", None) is None and open_to("::1", None) is None
    assert open_to("0.0.0.0", "t") is None
    assert "listens on 0.0.0.0 with no token" in (open_to("0.0.0.0", None) or "")


def test_hta_status_sends_the_token(tmp_path: Path):
    sim = held_at_the_cap()

    async def main() -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
        srv = StatusServer.for_controller(sim.controller, INFO, token="s3cret")
        url = await srv.start()
        try:
            run = [*HTA, "status", url, "--format", "json"]
            without = await asyncio.to_thread(subprocess.run, run, capture_output=True, text=True)
            with_it = await asyncio.to_thread(subprocess.run, [*run, "--token", "s3cret"], capture_output=True,
                                              text=True)
            return without, with_it
        finally:
            await srv.stop()

    without, with_it = asyncio.run(main())
    assert without.returncode != 0 and "needs the run's status token" in without.stderr
    assert with_it.returncode == 0 and json.loads(with_it.stdout)["cap"]["max_workers"] == 1


def test_the_live_page_passes_its_token_on():
    from hta.status.page import PAGE

    assert 'fetch("status" + location.search' in PAGE
    assert (ROOT / "k8s" / "manifests" / "networkpolicy.yaml").is_file()
    assert LatencyStats().estimate() == 60.0
