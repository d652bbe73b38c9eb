"""The live view: the status server's /status and /metrics agree with the
controller, the plain lines and their verbosity, the terminal panel, and ``hta status``'s
client. The controller is production's, driven by the simulator (no makeflow needed)."""

from __future__ import annotations

import asyncio
import io
import re
import socket

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from hta.accounting import CoreSample, integrate
from hta.controller import Controller
from hta.model import LatencyStats
from hta.policies.registry import make_policy
from hta.scaling_log import DecisionRecord, ScalingLogWriter, WorkerRecord
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation, run_now
from hta.sim.workload import SimTask, Workload
from hta.status.metrics import DIAL_METRICS, METRICS, latency_buckets
from hta.status.panel import (
    LiveView,
    StatusError,
    decision_line,
    fetch_status,
    render,
    short_name,
    status_url,
    verbosity_from_flags,
    worker_line,
)
from hta.status.server import StatusServer
from hta.status.snapshot import RunInfo, build_snapshot, decision_kind, thin_series
from hta.summary import summarize

INFO = RunInfo(workflow="workflows/blast/Makeflow", policy="hta", backend="simulated", started_at=1_700_000_000.0)


def simulated_controller(until_s: float) -> Controller:
    """Production's controller after ``until_s`` simulated seconds of a two-stage workflow
    (latency 20 s, up to 6 workers): at 10 s workers are on their way; at 100 s it has
    measured latencies, scaled up and drained."""
    tasks = ([SimTask(f"s{i}", "split", 30 + 2 * i, cores=1) for i in range(24)]
             + [SimTask(f"a{i}", "align", 15 + i, cores=1, parents=[f"s{i}"]) for i in range(12)])
    cluster = ClusterModel(max_nodes=6, latency_mean_s=20, latency_sd_s=3, horizon_s=until_s, teardown_s=0)
    sim = Simulation(Workload("w", tasks), make_policy("hta"), cluster, log=ScalingLogWriter())
    sim.run()
    return sim.controller


@pytest.fixture(params=[10.0, 100.0], ids=["workers-on-their-way", "scaled-and-drained"])
def controller(request) -> Controller:
    return simulated_controller(request.param)


@pytest.fixture
async def server(controller: Controller):
    srv = StatusServer.for_controller(controller, INFO)
    await srv.start()
    yield srv
    await srv.stop()


async def get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, r.headers["Content-Type"], await r.text()


# -- /status -------------------------------------------------------------------------------------

async def test_status_is_the_controllers_state(server: StatusServer, controller: Controller):
    status, ctype, body = await get(server.url + "status")
    assert status == 200 and ctype.startswith("application/json")
    s = build_snapshot(controller, INFO).model_validate_json(body)
    obs = controller.last_observation
    assert s.run == INFO and s.elapsed_s == pytest.approx(controller.now())
    assert (s.tasks.waiting, s.tasks.running, s.tasks.done) == (obs.waiting_count, len(obs.running), obs.tasks_done)
    per = {c.name: (c.waiting, c.running) for c in s.tasks.categories}
    assert sum(w for w, _ in per.values()) == obs.waiting_count and sum(r for _, r in per.values()) == len(obs.running)
    assert set(per) == {"split", "align"} or set(per) == {"split"}
    assert s.connected == len(obs.workers) and s.pending == len(obs.pending)
    assert {w.id for w in s.workers} == {w.id for w in obs.workers} | {p.id for p in obs.pending}
    assert (s.cores.supply, s.cores.in_use) == (obs.supply_cores(), obs.in_use_cores())
    assert sum(w.in_use_cores for w in s.workers) == s.cores.in_use  # each worker's share adds up
    assert s.cores.demand == obs.in_use_cores() + obs.waiting_cores()
    assert s.latency.count == len(controller.latency.samples)
    assert s.latency.estimate_s == controller.latency.estimate()
    # the last actions (holds left out but the newest decision), oldest first
    acted = [d for d in controller.decisions if d.add or d.drain or d.remove][-19:]
    expected = acted + [controller.decisions[-1]] if acted[-1:] != controller.decisions[-1:] else acted[-20:]
    assert [d.reason for d in s.decisions] == [d.reason for d in expected]
    assert sum(s.decision_counts.values()) == len(controller.decisions) > 0
    assert set(s.categories) == set(controller.learner.models())
    totals = integrate(controller.samples, end=controller.now())
    assert s.accounting.waste_core_s == pytest.approx(totals.waste_core_s, abs=1e-3)
    assert s.accounting.shortage_core_s == pytest.approx(totals.shortage_core_s, abs=1e-3)
    assert s.series[-1][0] == pytest.approx(controller.now()) and s.series[0][0] == controller.samples[0].t
    assert s.last_error is None


async def test_status_shows_the_last_error(server: StatusServer, controller: Controller):
    controller.last_error = "ClientConnectorError: cannot reach the master"
    s = await fetch_status(server.url)
    assert s.last_error == controller.last_error


def test_series_is_bounded_and_reaches_now():
    samples = [CoreSample(float(t), t % 7, t % 5, t % 11) for t in range(5000)]
    pts = thin_series(samples, now=6000.0, max_points=600)
    assert len(pts) <= 600 and pts[0][0] == 0.0 and pts[-2][0] == 4999.0 and pts[-1] == (6000.0, *pts[-2][1:])
    assert [p[0] for p in pts] == sorted(p[0] for p in pts)


# -- /metrics ------------------------------------------------------------------------------------

def parse(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families: dict, sample: str, **labels: str) -> float:
    (v,) = [s.value for samples in families.values() for s in samples
            if s.name == sample and all(s.labels.get(k) == x for k, x in labels.items())]
    return v


async def test_metrics_are_the_controllers_state(server: StatusServer, controller: Controller):
    status, ctype, body = await get(server.url + "metrics")
    assert status == 200 and ctype.startswith("text/plain")
    m = parse(body)
    # (no --deadline or --budget: no plan to show; tests/test_dial_display.py has them)
    assert set(m) == set(METRICS) - set(DIAL_METRICS) and all(name.startswith("hta_") for name in METRICS)
    obs = controller.last_observation
    assert value(m, "hta_run_info", policy="hta", backend="simulated", workflow=INFO.workflow) == 1
    waiting = {s.labels["category"]: s.value for s in m["hta_tasks"] if s.labels["state"] == "waiting"}
    running = {s.labels["category"]: s.value for s in m["hta_tasks"] if s.labels["state"] == "running"}
    assert sum(waiting.values()) == obs.waiting_count and sum(running.values()) == len(obs.running)
    assert value(m, "hta_tasks_done_total") == obs.tasks_done
    busy = sum(1 for w in obs.workers if not w.idle)
    assert value(m, "hta_workers", state="busy") == busy
    assert value(m, "hta_workers", state="idle") == len(obs.workers) - busy
    assert value(m, "hta_workers", state="pending") == len(obs.pending)
    assert value(m, "hta_cores", kind="supply") == obs.supply_cores()
    assert value(m, "hta_cores", kind="in_use") == obs.in_use_cores()
    assert value(m, "hta_cores", kind="demand") == obs.in_use_cores() + obs.waiting_cores()
    totals = integrate(controller.samples, end=controller.now())
    assert value(m, "hta_waste_core_seconds_total") == pytest.approx(totals.waste_core_s, abs=1e-3)
    assert value(m, "hta_shortage_core_seconds_total") == pytest.approx(totals.shortage_core_s, abs=1e-3)
    samples = controller.latency.samples
    assert value(m, "hta_preparation_latency_seconds_count") == len(samples)
    assert value(m, "hta_preparation_latency_seconds_sum") == pytest.approx(sum(samples))
    buckets = {s.labels["le"]: s.value for s in m["hta_preparation_latency_seconds"] if s.name.endswith("_bucket")}
    assert len(buckets) > 5 and buckets["+Inf"] == len(samples)
    assert buckets == {le: sum(1 for s in samples if s <= float(le)) for le in buckets}
    assert value(m, "hta_preparation_latency_estimate_seconds") == controller.latency.estimate()
    up = sum(1 for d in controller.decisions if d.add)
    down = sum(1 for d in controller.decisions if not d.add and (d.drain or d.remove))
    assert value(m, "hta_decisions_total", kind="up") == up
    assert value(m, "hta_decisions_total", kind="down") == down
    assert value(m, "hta_decisions_total", kind="none") == len(controller.decisions) - up - down
    connected = sum(1 for e in controller.worker_events if e.event == "connected")
    assert value(m, "hta_worker_events_total", event="connected") == connected
    assert value(m, "hta_step_failures_total") == 0 and value(m, "hta_step_failing") == 0


def test_latency_histogram_buckets_are_cumulative():
    b = dict(latency_buckets([0.5, 1.0, 4.9, 5.0, 5.1, 700.0]))
    assert (b["1.0"], b["2.0"], b["5.0"], b["10.0"], b["600.0"], b["+Inf"]) == (2, 2, 4, 5, 5, 6)


def metrics_of(controller: Controller) -> dict[str, list]:
    from prometheus_client import generate_latest

    from hta.status.metrics import make_registry

    return parse(generate_latest(make_registry(lambda: build_snapshot(controller, INFO))).decode())


def test_every_counter_counts_what_the_run_logged():
    """Each counter /metrics exposes, against a record kept apart from the controller's own
    lists: the scaling log the run wrote as it went, and the simulated world's truth."""
    tasks = ([SimTask(f"s{i}", "split", 30 + 2 * i, cores=1) for i in range(24)]
             + [SimTask(f"a{i}", "align", 15 + i, cores=1, parents=[f"s{i}"]) for i in range(12)])
    cluster = ClusterModel(max_nodes=6, latency_mean_s=20, latency_sd_s=3, horizon_s=100.0, teardown_s=0)
    # (a worker per never-measured task at once, so that some are drained within the 100 s)
    sim = Simulation(Workload("w", tasks), make_policy("hta:first_finish_latencies=0"), cluster,
                     log=ScalingLogWriter())
    sim.run()
    m = metrics_of(sim.controller)
    records = sim.log.records
    decisions = [r for r in records if isinstance(r, DecisionRecord)]
    for kind in ("up", "down", "none"):
        want = sum(1 for d in decisions if decision_kind(d) == kind)
        assert value(m, "hta_decisions_total", kind=kind) == want, kind
    assert {e for e in ("up", "down")} <= {decision_kind(d) for d in decisions}
    events = [r for r in records if isinstance(r, WorkerRecord)]
    stopped = sum(1 for e in events if e.event == "stopped")  # (written at the end, after the last step)
    for event in {e.event for e in events} - {"stopped"}:
        assert value(m, "hta_worker_events_total", event=event) == sum(1 for e in events if e.event == event), event
    assert stopped and len(events) - stopped > 0
    waited = [e for e in events if e.event == "connected" and e.latency_s is not None
              and LatencyStats.waited_for_node(e.phases)]
    assert value(m, "hta_preparation_latency_seconds_count") == len(waited) > 0
    assert value(m, "hta_tasks_done_total") == len(sim.world.makeflow.done) > 0
    summary = summarize(records)
    assert value(m, "hta_waste_core_seconds_total") == pytest.approx(summary.waste_core_s, abs=0.01)
    assert value(m, "hta_idle_waste_core_seconds_total") == pytest.approx(summary.idle_waste_core_s, abs=0.01)
    assert value(m, "hta_shortage_core_seconds_total") == pytest.approx(summary.shortage_core_s, abs=0.01)
    assert summary.waste_core_s > 0 and summary.idle_waste_core_s > 0 and summary.shortage_core_s > 0


def test_metrics_count_failed_tasks_as_the_master_does():
    controller = simulated_controller(10.0)
    real = controller.master

    class FailedTwo:
        async def snapshot(self, now):
            s = await real.snapshot(now)
            return s.model_copy(update={"queue": s.queue.model_copy(update={"tasks_failed": 2})})

    controller.master = FailedTwo()
    run_now(controller.step())
    assert value(metrics_of(controller), "hta_tasks_failed_total") == 2


async def test_metrics_count_step_failures(controller: Controller):
    """Controller.run counts each step that failed: the master unreachable three times."""
    finished = asyncio.Event()
    calls = []

    class Unreachable:
        async def snapshot(self, now):
            calls.append(now)
            if len(calls) == 3:
                finished.set()
            raise ConnectionError("ClientConnectorError: cannot reach the master")

    controller.master = Unreachable()
    controller.config.poll_interval_s = 0.01
    await controller.run(finished)
    m = metrics_of(controller)
    assert value(m, "hta_step_failures_total") == 3 and value(m, "hta_step_failing") == 1


async def test_metrics_are_read_at_scrape_time(server: StatusServer, controller: Controller):
    before = value(parse((await get(server.url + "metrics"))[2]), "hta_decisions_total", kind="up")
    controller.decisions.append(DecisionRecord(t=controller.now(), add=2, next_decision_s=5, reason="test"))
    after = value(parse((await get(server.url + "metrics"))[2]), "hta_decisions_total", kind="up")
    assert after == before + 1


# -- the page and the server itself --------------------------------------------------------------

async def test_page_is_self_contained(server: StatusServer):
    status, ctype, page = await get(server.url)
    assert status == 200 and ctype.startswith("text/html")
    assert "<svg" in page and 'fetch("status"' in page
    # the machine is offline: nothing may load from elsewhere
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|@import|https?://(?!www\.w3\.org/2000/svg)", page)


async def test_free_ports_and_stop(controller: Controller):
    a, b = StatusServer.for_controller(controller, INFO), StatusServer.for_controller(controller, INFO)
    ua, ub = await a.start(), await b.start()
    assert ua != ub and ua.startswith("http://127.0.0.1:") and a.port > 0
    await a.stop()
    with pytest.raises(StatusError, match="cannot reach"):
        await fetch_status(ua)
    assert (await fetch_status(ub)).run == INFO
    await b.stop()


# -- plain lines -----------------------------------------------------------------------------------

ADD = DecisionRecord(t=12.34, add=2, target=4, latency_s=9.8, next_decision_s=9.8, reason="L=9.8s: 14 tasks waiting")
HOLD = DecisionRecord(t=20.0, target=4, latency_s=9.8, next_decision_s=9.8, reason="L=9.8s: enough")
DRAIN = DecisionRecord(t=30.0, drain=["w2"], target=3, latency_s=9.8, next_decision_s=5, reason="1 idle unneeded")
CONNECTED = WorkerRecord(t=15.1, worker="w3", event="connected", latency_s=9.83, phases={"starting": 9.0})
REQUESTED = WorkerRecord(t=12.34, worker="w3", event="requested", cores=2)
LOST = WorkerRecord(t=40.0, worker="w1", event="lost", tasks_lost=1, lost_work_core_s=12.0, reason="killed by SIGKILL")


def test_plain_lines():
    assert decision_line(ADD) == "hta: t=12.3s add 2 workers (target 4): L=9.8s: 14 tasks waiting"
    assert decision_line(DRAIN) == "hta: t=30.0s drain w2 (target 3): 1 idle unneeded"
    assert worker_line(CONNECTED) == "hta: t=15.1s worker w3 connected (latency 9.8s)"
    assert worker_line(LOST) == ("hta: t=40.0s worker w1 lost (1 task(s) run again, 12.0 core·s lost): "
                                 "killed by SIGKILL")


def test_verbosity_levels():
    records = [(decision_line, ADD), (decision_line, HOLD), (worker_line, REQUESTED), (worker_line, CONNECTED)]
    shown = {v: [f(r, v) for f, r in records] for v in ("quiet", "normal", "verbose")}
    assert shown["quiet"] == [None] * 4
    assert [line is not None for line in shown["normal"]] == [True, False, False, True]
    assert all(shown["verbose"])
    assert shown["verbose"][0].endswith("[L=9.8s, next decision in 9.8s]")
    assert shown["verbose"][1].startswith("hta: t=20.0s hold (target 4): L=9.8s: enough")
    assert shown["verbose"][3] == "hta: t=15.1s worker w3 connected (latency 9.8s; starting 9.0s)"
    assert verbosity_from_flags(0, False) == "normal" and verbosity_from_flags(1, False) == "verbose"
    assert verbosity_from_flags(1, True) == "quiet"


async def wait_for(cond, timeout: float = 5.0):
    """Await until ``cond()`` is true (checked on every turn of the event loop)."""
    async def poll():
        while not cond():
            await asyncio.sleep(0)
    await asyncio.wait_for(poll(), timeout)


@pytest.mark.parametrize("verbosity", ["quiet", "normal", "verbose"])
async def test_live_view_prints_new_decisions_and_events_as_they_happen(verbosity: str):
    controller = simulated_controller(10.0)
    out = io.StringIO()
    view = LiveView(controller, INFO, Console(file=io.StringIO()), verbosity=verbosity, stream=out, refresh_s=0.01)
    assert view.mode == "lines"  # not a terminal
    finished = asyncio.Event()
    task = asyncio.create_task(view.run(finished))
    # what happened before the view started is printed too, once
    await wait_for(lambda: view._decisions == len(controller.decisions))
    before = out.getvalue()
    controller.decisions.append(ADD.model_copy(update={"t": 9.0}))
    controller.worker_events.append(CONNECTED.model_copy(update={"t": 9.5}))
    controller.decisions.append(HOLD.model_copy(update={"t": 9.8}))
    controller.last_error = "ClientConnectorError: master gone"
    await wait_for(lambda: "step failed" in out.getvalue())
    finished.set()
    await asyncio.wait_for(task, 10)
    new = out.getvalue()[len(before):].splitlines()
    error = "hta: t=10.0s step failed: ClientConnectorError: master gone (retrying)"
    if verbosity == "quiet":
        assert before == "" and new == [error]
        return
    assert new[:2] == ["hta: t=9.0s add 2 workers (target 4): L=9.8s: 14 tasks waiting" +
                       (" [L=9.8s, next decision in 9.8s]" if verbosity == "verbose" else ""),
                       "hta: t=9.5s worker w3 connected (latency 9.8s" +
                       ("; starting 9.0s)" if verbosity == "verbose" else ")")]
    assert new[-1] == error
    assert any(" hold " in line for line in new) == (verbosity == "verbose")
    assert any(" requested" in line for line in before.splitlines()) == (verbosity == "verbose")
    assert "add" in before and all(line.startswith("hta: t=") for line in before.splitlines())


async def test_live_view_on_a_terminal_is_a_transient_panel():
    controller = simulated_controller(100.0)
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, height=40, color_system=None)
    view = LiveView(controller, INFO, console, refresh_s=0.01)
    assert view.mode == "panel"
    finished = asyncio.Event()
    task = asyncio.create_task(view.run(finished))
    await wait_for(lambda: "last decision" in screen.getvalue())
    finished.set()
    await asyncio.wait_for(task, 10)
    out = screen.getvalue()
    assert "hta: t=" not in out  # no lines on a terminal at normal verbosity: the panel says it
    # transient: the last thing written erases the panel, line by line, back to where it began
    last_panel = out.rsplit("╭", 1)[1]
    height = last_panel.count("\n")
    assert height > 5 and out.endswith("\r" + "\x1b[1A\x1b[2K" * height)


def test_panel_shows_the_run():
    controller = simulated_controller(100.0)
    s = build_snapshot(controller, INFO)
    console = Console(record=True, width=120, file=io.StringIO())
    console.print(render(s))
    text = console.export_text()
    assert short_name(INFO.workflow) in text and "policy hta" in text and "elapsed 1 min 40 s" in text
    assert re.search(r"split\s+\d+\s+\d+", text) and re.search(r"all\s+\d+\s+\d+\s+\d+", text)
    assert f"{s.connected} connected" in text and f"{s.pending} on their way" in text
    assert re.search(rf"latency L +{s.latency.estimate_s:.1f} s \(median of", text)
    assert f"{s.cores.supply:g} supplied, {s.cores.in_use:g} in use" in text
    assert f"t={s.decisions[-1].t:.1f}s" in text and s.decisions[-1].reason[:40] in text


# -- hta status URL ----------------------------------------------------------------------------------

def test_status_url_forms(tmp_path, monkeypatch):
    from hta.status.panel import BadURL

    assert status_url("127.0.0.1:8080") == "http://127.0.0.1:8080/status"
    # a workflow given for the URL: it said "cannot reach http://Makeflow/status (Name or service not known)"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Makeflow").write_text("a:\n\ttouch a\n")
    with pytest.raises(BadURL, match=r"'Makeflow' is a file here, not a URL: give the http://HOST:PORT/ hta "
                                     r"makeflow printed \(the run's report: hta report Makeflow\)"):
        status_url("Makeflow")
    assert status_url("localhost") == "http://localhost/status"  # (a host with no file of its name here)
    assert status_url("http://h:1/") == "http://h:1/status"
    assert status_url("http://h:1/status") == "http://h:1/status"


async def test_fetch_status_round_trips(server: StatusServer, controller: Controller):
    s = await fetch_status(server.url.removeprefix("http://"))
    assert s == build_snapshot(controller, INFO).model_copy(update={"run": s.run})
    assert s.run == INFO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/"


@pytest.mark.parametrize("answer, says", [
    (lambda r: web.Response(status=404, text="nope"), "answered HTTP 404: not an HTA status server"),
    (lambda r: web.json_response({"hello": "world"}), "is not an HTA status server"),
    (lambda r: web.Response(text="<html>a router</html>", content_type="text/html"), "is not an HTA status server"),
])
async def test_fetch_status_names_a_server_that_is_not_hta(answer, says):
    async def handler(request):
        return answer(request)
    runner, url = await serve(handler)
    try:
        with pytest.raises(StatusError, match=re.escape(says)) as e:
            await fetch_status(url)
    finally:
        await runner.cleanup()
    assert "\n" not in str(e.value)


async def test_fetch_status_unreachable_is_one_line():
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(StatusError) as e:
        await fetch_status(url)
    msg = str(e.value)
    assert msg.startswith(f"cannot reach {url}status (") and "\n" not in msg
    with pytest.raises(StatusError, match="is not a URL"):
        await fetch_status("http://[::1")


async def test_fetch_status_slow_server_times_out():
    never = asyncio.Event()

    async def handler(request):
        await never.wait()
    runner, url = await serve(handler)
    try:
        with pytest.raises(StatusError, match=r"did not answer within 0\.2 s"):
            await fetch_status(url, timeout_s=0.2)
    finally:
        never.set()
        await runner.cleanup()
