"""The live page in a real browser: Debian's headless Chromium opens the
status server's ``/`` as a person would, over the DevTools protocol (CDP, on aiohttp's
websocket client). The page must load with no console error or exception, poll
``/status``, and draw supply / in use / demand with one point per sample of the series
and list the decisions. The screenshot goes to docs/img/live-page.png (the README's
picture of the page).

Chromium comes from Debian (``apt-get install chromium``); without it the test is
skipped and says so."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import aiohttp
import psutil
import pytest
from conftest import ROOT
from test_status import INFO, simulated_controller

from hta.status.server import StatusServer
from hta.status.snapshot import build_snapshot

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: the README's figure, rewritten only when asked (HTA_UPDATE_SCREENSHOT=1): a test run leaves the tree clean
SCREENSHOT = ROOT / "docs" / "img" / "live-page.png"

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium): "
                                                "the live page cannot be opened in a browser here"),
    pytest.mark.slow,  # a cold Chromium start takes several seconds on a loaded 2-core machine
]


async def until(cond, timeout: float, what: str):
    """Await ``cond()`` (checked every 50 ms) or fail naming ``what``."""
    async def poll():
        while not (v := cond()):
            await asyncio.sleep(0.05)
        return v
    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


class CDP:
    """A DevTools session on one websocket: commands get their answer; events are kept."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}
        self.events: list[dict] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.waiting:
                self.waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, timeout: float = 30.0, **params) -> dict:
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[i] = fut
        await self.ws.send_json({"id": i, "method": method, "params": params})
        answer = await asyncio.wait_for(fut, timeout)
        assert "error" not in answer, f"{method}: {answer['error']}"
        return answer["result"]

    async def evaluate(self, expression: str, timeout: float = 30.0):
        r = await self.send("Runtime.evaluate", timeout=timeout, expression=expression, awaitPromise=True,
                            returnByValue=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, and the browser's own error log entries."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description")))
                                                            for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"exception: {d.get('exception', {}).get('description') or d['text']}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    async def close(self) -> None:
        self.reader.cancel()
        await self.ws.close()


@pytest.fixture
async def chromium(tmp_path: Path):
    """A headless Chromium of this test's own (its own profile, its own process group),
    stopped by its process id at the end; yields its DevTools HTTP base URL."""
    profile = tmp_path / "profile"
    log = open(tmp_path / "chromium.log", "w")
    # its temporary folders (they outlive it) in one of its own, short: its socket's path
    # under tmp_path would pass the 108 characters a Unix socket's may have
    scratch = Path(tempfile.mkdtemp(prefix="hta-chromium-"))
    proc = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
         f"--user-data-dir={profile}", "--no-sandbox", "--no-first-run", "--no-default-browser-check",
         "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--window-size=1280,900", "about:blank"],
        stdout=log, stderr=log, start_new_session=True,
        env={**os.environ, "TMPDIR": str(scratch)})
    try:
        port_file = profile / "DevToolsActivePort"
        await until(lambda: port_file.exists() and port_file.read_text().strip() or proc.poll() is not None, 60,
                    "Chromium to open its DevTools port")
        assert proc.poll() is None, (tmp_path / "chromium.log").read_text()[-2000:]
        port = port_file.read_text().split()[0]
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its group: the browser and its zygote/renderer children
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)
        left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(profile) in " ".join(p.info["cmdline"] or [])]
        assert not left, f"Chromium processes left behind: {left}"


async def new_tab(http: aiohttp.ClientSession, chromium: str) -> CDP:
    """A blank tab of the headless browser, its Runtime, Log and Page events on."""
    async with http.put(f"{chromium}/json/new?about:blank") as r:
        target = await r.json()
    cdp = CDP(await http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0))
    for domain in ("Runtime", "Log", "Page"):
        await cdp.send(f"{domain}.enable")
    return cdp


async def test_live_page_draws_the_run_without_console_errors(chromium: str):
    controller = simulated_controller(130.0)
    snapshot = build_snapshot(controller, INFO)
    assert len(snapshot.series) > 10 and snapshot.decision_counts["up"] and snapshot.decision_counts["down"]
    server = StatusServer.for_controller(controller, INFO)
    url = await server.start()
    async with aiohttp.ClientSession() as http:
        try:
            cdp = await new_tab(http, chromium)
            await cdp.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1,
                           mobile=False)
            await cdp.send("Page.navigate", url=url)
            # the page has polled /status twice (so it redrew from a second answer too)
            try:
                await cdp.evaluate("new Promise(ok => { const f = () => (window.htaPage && htaPage.updates >= 2) "
                                   "? ok(true) : setTimeout(f, 50); f(); })", timeout=30)
            except TimeoutError:
                pytest.fail(f"the page never showed a status; console: {cdp.problems()[:3]}")
            page = await cdp.evaluate("""(() => {
                const paths = [...document.querySelectorAll('#chart path.series')];
                return {
                  points: htaPage.points, failures: htaPage.failures,
                  series: paths.map(p => [p.classList[1], p.getAttribute('d').split('H').length]),
                  rows: document.querySelectorAll('#decisions tr').length,
                  firstReason: document.querySelector('#decisions td.reason').textContent,
                  tasks: document.getElementById('tasks').textContent,
                  workers: document.getElementById('workers').textContent,
                  run: document.getElementById('run').textContent,
                  error: getComputedStyle(document.getElementById('error')).display,
                  plan: getComputedStyle(document.getElementById('plan')).display,
                };
            })()""")
            assert page["points"] == len(snapshot.series) and page["failures"] == 0
            # three step lines, each through every point of the series (M, then one H…V per point)
            assert sorted(name for name, _ in page["series"]) == ["demand", "in-use", "supply"]
            assert all(n == len(snapshot.series) for _, n in page["series"])
            assert page["rows"] == len(snapshot.decisions)
            assert page["firstReason"] == snapshot.decisions[-1].reason  # newest first
            assert page["tasks"] == f"{snapshot.tasks.done} done"
            assert page["workers"] == f"{snapshot.connected} connected"
            assert INFO.workflow in page["run"] and page["error"] == "none"
            assert page["plan"] == "none"  # (no --deadline or --budget: no plan line)

            height = (await cdp.send("Page.getLayoutMetrics"))["cssContentSize"]["height"]
            await cdp.send("Emulation.setDeviceMetricsOverride", width=1280, height=int(height), deviceScaleFactor=1,
                           mobile=False)
            shot = await cdp.send("Page.captureScreenshot", format="png")
            png = base64.b64decode(shot["data"])
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
            if os.environ.get("HTA_UPDATE_SCREENSHOT"):
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                SCREENSHOT.write_bytes(png)
            assert cdp.problems() == []
            try:
                await cdp.send("Browser.close", timeout=5)
            except (TimeoutError, ConnectionError):
                pass  # the fixture stops it by its pid anyway
            await cdp.close()
        finally:
            await server.stop()


async def test_live_page_shows_the_plan_and_marks_one_that_cannot_be_kept(chromium: str):
    """--deadline or --budget: the plan's one line (the snapshot's, as the panel has it) under
    the cards, marked once the forecast says the ask cannot be kept."""
    from hta.model import DialPlan

    controller = simulated_controller(10.0)
    controller.plan = DialPlan(deadline_s=6000, nodes=12, projected_end_s=4860, spent_node_s=11520)
    server = StatusServer.for_controller(controller, INFO)
    url = await server.start()
    shown = """(() => { const p = document.getElementById('plan');
                        return [getComputedStyle(p).display, p.className, p.textContent]; })()"""
    async with aiohttp.ClientSession() as http:
        try:
            cdp = await new_tab(http, chromium)
            await cdp.send("Page.navigate", url=url)
            await cdp.evaluate("new Promise(ok => { const f = () => (window.htaPage && htaPage.updates >= 1) "
                               "? ok(true) : setTimeout(f, 50); f(); })", timeout=30)
            assert await cdp.evaluate(shown) == ["block", "plan", "plandeadline 1h40m · projected end 1h21m (12 workers)"]
            controller.plan = controller.plan.model_copy(update={"feasible": False, "nodes": 20,
                                                                 "projected_end_s": 7500})
            late = await cdp.evaluate("new Promise(ok => { const f = () => document.getElementById('plan').className"
                                      ".includes('late') ? ok(true) : setTimeout(f, 50); f(); })", timeout=30)
            assert late and (await cdp.evaluate(shown))[2] == (
                "plandeadline 1h40m · cannot be kept: projected end 2h05m (20 workers), going as fast as it can")
            assert cdp.problems() == []
            try:
                await cdp.send("Browser.close", timeout=5)
            except (TimeoutError, ConnectionError):
                pass
            await cdp.close()
        finally:
            await server.stop()
