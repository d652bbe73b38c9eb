"""Changing a running run: the controller puts a new cap or dial in force at its next step
and says so in that decision; the status server takes a change only with a token that may
write; ``hta set`` end to end against a real server in this process; SIGHUP reads the
config file again and changes what the file changed, not what a flag gave. The controller
runs on the simulator's world, whose clock the test moves (no makeflow needed)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import stat
import subprocess
from pathlib import Path

import aiohttp
import pytest
from conftest import HTA
from test_controller import controller_on_world

from hta import interrupts
from hta.cli import option_layers, parse
from hta.controller import Controller
from hta.live import LiveSettings, Refused
from hta.model import ScaleDecision
from hta.policies.registry import make_policy
from hta.sim.run import run_now
from hta.sim.world import World
from hta.status.control import CONTROL_FILE, ControlRequest, apply_request, write_control_file
from hta.status.panel import render
from hta.status.server import StatusServer, same_host
from hta.status.snapshot import RunInfo, build_snapshot
from hta.submit.reload import ConfigReread

INFO = RunInfo(workflow="w/Makeflow", policy="hta", backend="simulated", started_at=0.0)


class Asks:
    """A test policy: the same decision every time."""

    name = "asks"

    def __init__(self, decision: ScaleDecision):
        self.decision = decision

    def decide(self, obs):
        return self.decision


def on_world(policy, tasks: int = 50, runtime_s: float = 1000, **config) -> tuple[Controller, World]:
    return controller_on_world(policy, tasks_n=tasks, runtime_s=runtime_s, **{"max_workers": 4, **config})


def step_at(c: Controller, world: World, t: float) -> None:
    if t > world.env.now:
        world.env.run(until=t)
    run_now(c.step())


# -- the controller ---------------------------------------------------------------------------------

def test_a_new_cap_applies_at_the_next_step_which_decides_at_once_and_says_so(caplog):
    c, world = on_world(Asks(ScaleDecision(add=50, next_decision_s=60)))
    step_at(c, world, 0)
    assert c.decisions[-1].add == 4
    changes = c.change(LiveSettings(8), "hta set")
    assert [ch.words() for ch in changes] == ["cap 4 → 8 workers (hta set)"]
    assert c.config.max_workers == 4 and c.live_settings().max_workers == 8  # asked, not yet in force
    with caplog.at_level(logging.INFO, logger="hta.controller"):
        step_at(c, world, 1)  # (no decision is due before t=10: the change makes one)
    d = c.decisions[-1]
    assert len(c.decisions) == 2 and d.t == 1 and d.add == 4, "the raised cap bought at once"
    assert d.reason.startswith("cap 4 → 8 workers (hta set); ")
    assert [r.reason for r in c.log.records if r.kind == "decision"][-1] == d.reason  # the scaling log
    assert "cap 4 → 8 workers (hta set)" in caplog.text  # the -v log
    s = build_snapshot(c, INFO)
    assert s.cap is not None and (s.cap.max_workers, s.cap.set_by) == (8, "hta set")
    assert [x.line for x in s.changes] == ["cap 4 → 8 workers (hta set)"]
    assert "at most 8 (hta set)" in _text(s) and "cap 4 → 8 workers (hta set)" in _text(s)
    step_at(c, world, 2)  # said once: the next decision is the policy's own again
    assert len(c.decisions) == 2


def _text(snapshot) -> str:
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200).print(render(snapshot))
    return out.getvalue()


def test_a_raised_cap_lets_htas_policy_buy_what_it_held_back_at_once():
    c, world = on_world(make_policy("hta"), max_workers=1)
    step_at(c, world, 0)
    first = c.decisions[-1]
    assert first.add and first.held_back and first.held_by == "--max-workers 1"
    c.change(LiveSettings(3), "hta set")
    step_at(c, world, 1)  # (HTA waits a latency, 30 s, after buying; not for what the cap held back)
    d = c.decisions[-1]
    assert d.reason.startswith("cap 1 → 3 workers (hta set); ") and d.add > 0


def test_changes_before_a_step_are_one_change_and_an_undone_one_none():
    c, world = on_world(Asks(ScaleDecision(next_decision_s=60)))
    step_at(c, world, 0)
    c.change(LiveSettings(8), "hta set")
    c.change(LiveSettings(6), "SIGHUP")
    step_at(c, world, 1)
    assert c.decisions[-1].reason.startswith("cap 4 → 6 workers (SIGHUP); ")
    c.change(LiveSettings(9), "hta set")
    c.change(LiveSettings(6), "hta set")  # back before it applied: nothing changed
    step_at(c, world, 2)
    assert len(c.decisions) == 2 and c.config.max_workers == 6


def test_a_lowered_cap_drains_idle_workers_above_it_and_never_a_busy_one():
    c, world = on_world(Asks(ScaleDecision(add=5, next_decision_s=0)), tasks=2, max_workers=5)
    step_at(c, world, 0)
    step_at(c, world, 31)  # five connected, two busy
    obs = c.last_observation
    busy = {w.id for w in obs.workers if not w.idle}
    assert len(obs.workers) == 5 and len(busy) == 2
    c.change(LiveSettings(3), "hta set")
    step_at(c, world, 32)
    d = c.decisions[-1]
    assert len(d.drain) == 2 and not set(d.drain) & busy
    assert d.reason.startswith("cap 5 → 3 workers (hta set); drain 2 idle workers above the cap of 3")
    c.change(LiveSettings(1), "hta set")
    step_at(c, world, 33)
    assert len(c.decisions[-1].drain) == 1 and not set(c.decisions[-1].drain) & busy
    step_at(c, world, 60)
    assert not c.decisions[-1].drain, "only idle workers go: the two busy ones finish their tasks"
    assert {w.id for w in c.last_observation.workers} == busy


def test_what_the_run_cannot_do_is_refused_in_one_line():
    c, world = on_world(Asks(ScaleDecision()), min_workers=2)
    step_at(c, world, 0)
    with pytest.raises(Refused, match="below the run's --min-workers 2"):
        c.change(LiveSettings(1), "hta set")
    with pytest.raises(Refused, match=r"takes no deadline: the time–cost dial needs HTA's policy"):
        c.change(LiveSettings(4, deadline_s=3600), "hta set")
    assert c.live_settings() == LiveSettings(4) and not c.changes


def test_a_budget_set_while_the_run_goes_counts_what_was_spent_and_keeps_it_when_raised():
    c, world = on_world(make_policy("hta"), tasks=8, runtime_s=600, max_workers=4)
    for t in range(0, 300, 10):
        step_at(c, world, t)
    obs = c.last_observation
    nodes = set(obs.worker_nodes.values())
    assert c.plan is None and len(obs.workers) == 8 and len(nodes) == 3  # pods of a third, on 3 nodes
    assert {w.connected_at for w in obs.workers} == {30.0}
    c.change(LiveSettings(4, budget_node_s=100_000), "hta set")
    step_at(c, world, 301)
    assert c.decisions[-1].reason.startswith("budget none → 27.8 node·h (hta set); ")
    assert c.plan is not None and c.plan.budget_node_s == 100_000
    # as the cluster bills: each pod its third of a node while on its way, then the 3 nodes whole
    billed = 8 / 3 * 30 + 3 * (301 - 30)
    assert c.plan.spent_node_s == pytest.approx(billed, rel=0.01), "the spend before the budget counts"
    spent = c.plan.spent_node_s
    c.change(LiveSettings(4, budget_node_s=200_000), "hta set")
    step_at(c, world, 302)
    assert c.plan.budget_node_s == 200_000 and c.plan.spent_node_s >= spent, "a raised budget keeps the spend"
    c.change(LiveSettings(4), "hta set")  # no dial: no plan shown
    step_at(c, world, 303)
    assert c.plan is None and build_snapshot(c, INFO).plan is None


def test_a_deadline_counts_from_now_and_replaces_a_budget():
    import datetime as dt

    c, world = on_world(make_policy("hta:budget_node_s=90000"))
    step_at(c, world, 100)
    answer = apply_request(c, ControlRequest(deadline="2h"), now=dt.datetime(2026, 1, 1, 12, 0))
    assert c.live_settings() == LiveSettings(4, deadline_s=7300.0)
    assert [(x.setting, x.old, x.new) for x in answer.changes] == [("deadline", "none", "2h02m"),
                                                                     ("budget", "25 node·h", "none")]
    assert answer.line() == "deadline none → 2h02m; budget 25 node·h → none (at the run's next decision)"
    again = apply_request(c, ControlRequest(max_workers=4))
    assert again.line() == "max-workers 4 already: nothing changed"


# -- the status server's writes ------------------------------------------------------------------------

@pytest.fixture
async def served():
    c, world = on_world(make_policy("hta"), min_workers=2)
    step_at(c, world, 0)
    srv = StatusServer.for_controller(c, INFO, token="reads", control_token="writes", local_token="local")
    url = await srv.start()
    yield c, world, url
    await srv.stop()


async def post(url: str, body, token: str | None = None, raw: bool = False) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s:
        kwargs = {"data": body} if raw else {"json": body}
        async with s.post(url + "control", headers=headers, **kwargs) as r:
            return r.status, await r.json(content_type=None)


async def test_a_write_needs_the_control_token_not_the_read_token(served):
    c, _, url = served
    status, said = await post(url, {"max_workers": 8})
    assert status == 401 and "needs its control token" in said["error"]
    status, said = await post(url, {"max_workers": 8}, token="reads")
    assert status == 403 and "status token, which only reads" in said["error"]
    status, said = await post(url, {"max_workers": 8}, token="guess")
    assert status == 403 and "not the run's control token" in said["error"]
    async with aiohttp.ClientSession() as s, s.post(url + "control?token=writes", json={"max_workers": 8}) as r:
        assert r.status == 401  # (in the header only: a URL's query ends up in logs)
    assert c.live_settings().max_workers == 4, "nothing refused changed the run"
    status, said = await post(url, {"max_workers": 8}, token="writes")
    assert status == 200 and said["changes"][0]["words"] == "cap 4 → 8 workers (hta set)"
    assert c.live_settings().max_workers == 8
    status, said = await post(url, {"max_workers": 6}, token="local")  # (from this host)
    assert status == 200 and c.live_settings().max_workers == 6
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "status", headers={"Authorization": "Bearer writes"}) as r:
            assert r.status == 200  # who may write may read
        async with s.get(url + "status") as r:
            assert r.status == 401


@pytest.mark.parametrize("body, status, says", [
    ({"max_workers": 0}, 400, "--max-workers must be at least 1, not 0"),
    ({"max_workers": "8"}, 400, "--max-workers must be a whole number, not '8'"),
    ({"max_workers": True}, 400, "--max-workers must be a whole number"),
    ({"workers": 8}, 400, "unknown setting 'workers'"),
    ({}, 400, "nothing to change"),
    ({"deadline": "soon"}, 400, "--deadline soon: not a duration or a clock time"),
    ({"budget": "40"}, 400, "--budget 40: no unit"),
    ({"deadline": "2h", "budget": "4node-h"}, 400, "give --deadline or --budget, not both"),
    ({"max_workers": 1}, 409, "below the run's --min-workers 2"),
])
async def test_a_bad_change_is_one_line_and_changes_nothing(served, body, status, says):
    c, _, url = served
    got, said = await post(url, body, token="writes")
    assert got == status and says in said["error"] and "\n" not in said["error"]
    assert c.live_settings() == LiveSettings(4)


async def test_a_body_that_is_not_json_is_refused(served):
    _, _, url = served
    status, said = await post(url, "max_workers=8", token="writes", raw=True)
    assert status == 400 and "must be JSON" in said["error"]


async def test_with_no_control_token_only_the_runs_own_local_token_writes():
    c, world = on_world(make_policy("hta"))
    srv = StatusServer.for_controller(c, INFO, token="reads", local_token="local")
    url = await srv.start()
    try:
        assert (await post(url, {"max_workers": 8}, token="reads"))[0] == 403
        assert (await post(url, {"max_workers": 8}, token=""))[0] == 401
        assert (await post(url, {"max_workers": 8}, token="local"))[0] == 200
    finally:
        await srv.stop()


def test_the_local_token_from_another_host_is_refused_and_the_control_token_is_not():
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    srv = StatusServer(lambda: None, control=lambda r: None, control_token="writes", local_token="local")  # type: ignore

    def asked(token: str, peer: str, reached: str = "10.0.0.1"):
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda key, default=None: {
            "peername": (peer, 40000), "sockname": (reached, 8080)}.get(key, default)
        return make_mocked_request("POST", "/control", headers={"Authorization": f"Bearer {token}"},
                                   transport=transport)

    refused = srv._may_write(asked("local", "10.0.0.9"))
    assert refused is not None and refused.status == 403
    assert "only from the run's own host" in json.loads(refused.body)["error"]
    assert srv._may_write(asked("local", "10.0.0.1")) is None  # (this host, by its own address)
    assert srv._may_write(asked("local", "127.0.0.1", "127.0.0.1")) is None
    assert srv._may_write(asked("writes", "10.0.0.9")) is None  # the control token, from anywhere


def test_the_local_token_is_taken_from_this_host_only():
    assert same_host("127.0.0.1", "127.0.0.1") and same_host("::1", "::1") and same_host("127.3.2.1", None)
    assert same_host("::ffff:127.0.0.1", "::ffff:127.0.0.1")
    assert same_host("10.1.2.3", "10.1.2.3"), "a client on this host that dialled its own address"
    assert not same_host("10.1.2.4", "10.1.2.3") and not same_host(None, "10.1.2.3")
    assert not same_host("10.1.2.4", None) and not same_host("not an address", "10.1.2.3")


# -- hta set, the command ------------------------------------------------------------------------------

def hta_set(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "HTA_CONTROL_TOKEN"}
    return subprocess.run([*HTA, "set", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})


@pytest.mark.slow  # (5 s of subprocesses: the fast tier keeps the server's and the controller's own tests)
def test_hta_set_end_to_end(tmp_path: Path):
    (tmp_path / "Makeflow").write_text("a:\n\ttouch a\n")
    run_dir = tmp_path / "Makeflow.hta"
    run_dir.mkdir()

    async def main() -> dict[str, subprocess.CompletedProcess]:
        c, world = on_world(make_policy("hta"), min_workers=2)
        step_at(c, world, 0)
        srv = StatusServer.for_controller(c, INFO, token="reads", control_token="writes", local_token="local")
        url = await srv.start()
        write_control_file(run_dir, url, "local")
        out: dict[str, subprocess.CompletedProcess] = {}

        async def run(name: str, *args: str, env: dict | None = None) -> None:
            out[name] = await asyncio.to_thread(hta_set, *args, cwd=tmp_path, env=env)
        try:
            await run("workflow", "Makeflow", "--max-workers", "8")
            step_at(c, world, 1)
            out["status"] = await asyncio.to_thread(subprocess.run, [*HTA, "status", url, "--format", "json",
                                                                     "--token", "reads"],
                                                    capture_output=True, text=True, timeout=60)
            await run("url", url, "--max-workers", "6", "--token", "writes")
            await run("env", url, "--max-workers", "5", env={"HTA_CONTROL_TOKEN": "writes"})
            await run("again", "Makeflow", "--max-workers", "5")
            await run("no-token", url, "--max-workers", "7")
            await run("read-token", url, "--max-workers", "7", "--token", "reads")
            await run("refused", "Makeflow", "--max-workers", "1", "--deadline", "none", "--budget", "none")
            await run("refused-dial", "Makeflow", "--budget", "none", "--max-workers", "0")
            await run("below-min", "Makeflow", "--max-workers", "1")
            await run("dial", "Makeflow", "--deadline", "1h30m")
        finally:
            await srv.stop()
        await run("gone", "Makeflow", "--max-workers", "3")
        return out

    out = asyncio.run(main())
    assert stat.S_IMODE((tmp_path / "Makeflow.hta" / CONTROL_FILE).stat().st_mode) == 0o600
    ok = {k: r for k, r in out.items() if k in ("workflow", "url", "env", "again", "dial")}
    for name, r in ok.items():
        assert r.returncode == 0 and r.stderr == "" and r.stdout.count("\n") == 1, (name, r.stdout, r.stderr)
    assert out["workflow"].stdout == "max-workers 4 → 8 (at the run's next decision)\n"
    assert json.loads(out["status"].stdout)["cap"]["max_workers"] == 8, "/status shows the cap at the next step"
    assert out["url"].stdout == "max-workers 8 → 6 (at the run's next decision)\n"
    assert out["env"].stdout == "max-workers 6 → 5 (at the run's next decision)\n"
    assert out["again"].stdout == "max-workers 5 already: nothing changed\n"
    assert out["dial"].stdout.startswith("deadline none → 1h30m (at the run's next decision)")
    for name, code, says in (("no-token", 1, "needs its control token"),
                             ("read-token", 1, "status token, which only reads"),
                             ("refused", 2, "give --deadline or --budget, not both"),
                             ("refused-dial", 2, "--max-workers must be at least 1"),
                             ("below-min", 1, "below the run's --min-workers 2"),
                             ("gone", 1, "cannot reach")):
        r = out[name]
        assert r.returncode == code and r.stderr.startswith("hta: error: ") and says in r.stderr, (name, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and r.stdout == "", (name, r.stderr)


@pytest.mark.parametrize("args, says", [
    ([], "nothing to change: give --max-workers N"),
    (["--max-workers", "0"], "--max-workers must be at least 1, not 0"),
    (["--max-workers", "many"], "--max-workers must be a whole number"),
    (["--deadline", "soon"], "--deadline soon: not a duration or a clock time"),
    (["--budget", "40"], "--budget 40: no unit"),
])
def test_hta_set_with_a_bad_value_is_one_line_and_exit_2(tmp_path: Path, args, says):
    r = hta_set("http://127.0.0.1:1/", *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("hta: error: ") and says in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


def test_hta_set_on_a_workflow_with_no_run_or_no_workflow_says_so(tmp_path: Path):
    (tmp_path / "Makeflow").write_text("a:\n\ttouch a\n")
    r = hta_set("Makeflow", "--max-workers", "3", cwd=tmp_path)
    assert r.returncode == 1 and "no run of Makeflow is going" in r.stderr and r.stderr.count("\n") == 1
    r = hta_set("Makefloww", "--max-workers", "3", cwd=tmp_path)
    assert r.returncode == 2 and "neither a workflow file here nor a URL" in r.stderr


# -- SIGHUP: the config file read again ----------------------------------------------------------------

def test_sighup_changes_what_the_file_changed_but_not_what_a_flag_gave(tmp_path: Path, caplog):
    cfg = tmp_path / "hta.yaml"
    cfg.write_text("max-workers: 4\nbudget: 20node-h\n")
    wf = tmp_path / "Makeflow"
    wf.write_text("a:\n\ttouch a\n")

    def reread_for(argv: list[str]) -> ConfigReread:
        args = parse(["makeflow", "--config", str(cfg), *argv, str(wf)])
        layers = option_layers(args)
        return ConfigReread(read=lambda: option_layers(args, warn=False), last=layers, options=layers.build())

    cfg.write_text("max-workers: 4\nbudget: 20node-h\n")
    by_file, by_flag = reread_for([]), reread_for(["--max-workers", "3"])
    runs = {}
    for name, reread in (("file", by_file), ("flag", by_flag)):
        c, world = on_world(make_policy("hta:budget_node_s=72000"), max_workers=reread.options.max_workers)
        step_at(c, world, 0)
        runs[name] = (c, world, reread)

    cfg.write_text("max-workers: 8\nbudget: 30node-h\npolicy: hta-cost\n")
    with caplog.at_level(logging.WARNING, logger="hta"):
        for c, world, reread in runs.values():
            reread.apply(c)
            step_at(c, world, 1)
    c, _, _ = runs["file"]
    assert c.config.max_workers == 8 and c.live_settings().budget_node_s == 30 * 3600
    assert c.decisions[-1].reason.startswith("cap 4 → 8 workers (SIGHUP); budget 20 node·h → 30 node·h (SIGHUP); ")
    c, _, _ = runs["flag"]
    assert c.config.max_workers == 3, "a flag beats the file, as at the start"
    assert c.live_settings().budget_node_s == 30 * 3600, "what no flag gave still changes"
    said = [r.getMessage() for r in caplog.records]
    assert any("max-workers changed in" in m and "but --max-workers was given (a flag beats the file): it stays 3; "
               "hta set changes it" in m for m in said), said
    assert sum("policy changed in" in m and "only in a new run" in m for m in said) == 2, said

    # a value hta set gave stands until the file's own value for it changes
    c, world, reread = runs["file"]
    c.change(LiveSettings(10, budget_node_s=30 * 3600), "hta set")
    step_at(c, world, 2)
    cfg.write_text("max-workers: 8\nbudget: 30node-h\npolicy: hta-cost\n# a comment\n")
    reread.apply(c)
    step_at(c, world, 3)
    assert c.config.max_workers == 10
    cfg.write_text("max-workers: 9\nmin-workers: [\n")  # a file that does not read changes nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hta"):
        reread.apply(c)
    step_at(c, world, 4)
    assert c.config.max_workers == 10 and "nothing changed (the run goes on as it was)" in caplog.text
    cfg.write_text("max-workers: 9\nbudget: 30node-h\npolicy: hta-cost\n")
    reread.apply(c)
    step_at(c, world, 5)
    assert c.config.max_workers == 9


def test_a_sighup_while_hta_starts_is_written_down_not_hta_s_end():
    saved = signal.getsignal(signal.SIGHUP)
    try:
        interrupts.note_hangups()
        assert not interrupts.take_hangup()
        signal.raise_signal(signal.SIGHUP)  # (the default action would end this process)
        assert interrupts.noting(signal.getsignal(signal.SIGHUP))
        assert interrupts.take_hangup() and not interrupts.take_hangup()
    finally:
        signal.signal(signal.SIGHUP, saved)


def test_the_control_token_may_not_be_the_status_token(capsys):
    from hta.cli import main

    assert main(["config", "--status-token", "same", "--control-token", "same"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hta: error: --control-token is the same as --status-token") and err.count("\n") == 1


def test_sighup_with_no_config_file_says_there_is_none(tmp_path: Path, caplog, monkeypatch):
    monkeypatch.delenv("HTA_CONFIG", raising=False)
    wf = tmp_path / "Makeflow"
    wf.write_text("a:\n\ttouch a\n")
    args = parse(["makeflow", "--max-workers", "3", str(wf)])
    layers = option_layers(args)
    reread = ConfigReread(read=lambda: option_layers(args, warn=False), last=layers, options=layers.build())
    c, world = on_world(make_policy("hta"), max_workers=3)
    with caplog.at_level(logging.WARNING, logger="hta"):
        assert reread.apply(c) == []
    assert "SIGHUP: no config file to read again (--config or HTA_CONFIG): nothing changed" in caplog.text
