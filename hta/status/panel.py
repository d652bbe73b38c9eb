"""What a person sees of a run in progress: a live panel on a terminal, plain lines elsewhere.

On a terminal, :class:`LiveView` keeps a rich ``Live`` panel (refreshed ~2/s,
rendered by :func:`render` from a :class:`~hta.status.snapshot.StatusSnapshot`)
and clears it when the run ends (transient), so only the end-of-run summary
stays on the screen. Anywhere else (a pipe, a CI log, a file) a redrawn panel
would be noise, so it writes one plain line per decision and per worker event
to stderr, which reads well in a log and greps well::

    hta: t=12.3s add 2 workers (target 4): L=5.0s: 14 tasks still waiting ...
    hta: t=15.1s worker w3 connected (latency 9.8s)

Verbosity: ``quiet`` shows nothing but errors (the summary is the caller's);
``normal`` shows decisions that act and the worker events that matter;
``verbose`` every decision, holds included, with its estimate (L, next
decision), and every worker event. On a terminal, ``verbose`` also keeps those
lines above the panel.

:func:`render` is also ``hta status URL``'s view (after :func:`fetch_status`),
so the panel looks the same from inside and outside the process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import aiohttp
from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from hta.plural import counted
from hta.scaling_log import DecisionRecord, WorkerRecord
from hta.status.snapshot import FORMAT, RunInfo, StatusSnapshot, build_snapshot

if TYPE_CHECKING:
    from hta.controller import Controller

Verbosity = Literal["quiet", "normal", "verbose"]
Mode = Literal["panel", "lines"]

#: worker events a ``normal`` run prints (``requested`` is said by the decision's line, ``stopped`` by the summary)
NORMAL_EVENTS = frozenset({"connected", "drained", "removed", "lost", "failed"})


def verbosity_from_flags(verbose: int | bool = 0, quiet: bool = False) -> Verbosity:
    """``-q`` wins over ``-v`` (asking for silence is the stronger wish)."""
    if quiet:
        return "quiet"
    return "verbose" if verbose else "normal"


def duration(s: float | None) -> str:
    if s is None:
        return "—"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f} s"
    m, r = divmod(int(s), 60)
    return f"{m} min {r:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


# -- plain lines -------------------------------------------------------------------------------

def held_words(d: DecisionRecord) -> str:
    """What held workers back, as a decision's line says it: ``at the cap (--max-workers 4)``."""
    by = d.held_by or "the backend"
    return f"at the cap ({by})" if by.startswith("--max-workers") else f"by {by}"


def decision_line(d: DecisionRecord, verbosity: Verbosity = "normal", newly_held: bool = False) -> str | None:
    """One line for a decision; None where this verbosity does not show it: a hold, unless
    verbose or it is the first the cap (or the backend) makes (``newly_held``)."""
    acts = []
    if d.add:
        acts.append(f"add {counted(d.add, 'worker')}")
        if d.held_back:
            acts[0] += f", {d.held_back} more held {held_words(d)}"
    if d.drain:
        acts.append(f"drain {', '.join(d.drain)}")
    if d.remove:
        acts.append(f"remove {', '.join(d.remove)}")
    shown = acts or verbosity == "verbose" or (newly_held and d.held_back)
    if verbosity == "quiet" or not shown:
        return None
    what = "; ".join(acts) or (f"hold {held_words(d)}" if d.held_back else "hold")
    target = f" (target {d.target})" if d.target is not None else ""
    if d.held_back and not d.add and d.waiting is not None:
        # (nothing waits yet where the workers are wanted for what the workflow releases next)
        why = f"{counted(d.waiting, 'task')} waiting" if d.waiting else "the workflow's next tasks are about to wait"
        if verbosity == "verbose":
            why += f"; {d.reason}"
        line = f"hta: t={d.t:.1f}s {what}: {why}"
    else:
        line = f"hta: t={d.t:.1f}s {what}{target}: {d.reason}"
    if verbosity == "verbose":
        lat = f"L={d.latency_s:.1f}s" if d.latency_s is not None else "L=?"
        line += f" [{lat}, next decision in {d.next_decision_s:.1f}s]"
    return line


def worker_line(e: WorkerRecord, verbosity: Verbosity = "normal") -> str | None:
    """One line for a worker event; None where this verbosity does not show it."""
    if verbosity == "quiet" or (verbosity == "normal" and e.event not in NORMAL_EVENTS):
        return None
    details = []
    if e.event == "connected" and e.latency_s is not None:
        details.append(f"latency {e.latency_s:.1f}s")
        if verbosity == "verbose" and e.phases:
            details.append(", ".join(f"{k} {v:.1f}s" for k, v in e.phases.items()))
    if e.tasks_lost:
        details.append(f"{e.tasks_lost} task(s) run again, {e.lost_work_core_s:.1f} core·s lost")
    if verbosity == "verbose" and e.cores is not None and e.event == "requested":
        details.append(f"{e.cores:g} cores")
    line = f"hta: t={e.t:.1f}s worker {e.worker} {e.event}"
    if details:
        line += f" ({'; '.join(details)})"
    if e.reason:
        line += f": {e.reason}"
    return line


def error_line(t: float, message: str) -> str:
    return f"hta: t={t:.1f}s step failed: {message} (retrying)"


#: what a changed setting's line says, after its time (how the panel tells it from the others)
CHANGE_MARK = " changed: "


def change_line(t: float, words: str, verbosity: Verbosity = "normal") -> str | None:
    """``hta: t=31.0s changed: cap 4 → 8 workers (hta set)``: a setting changed while the
    run goes (:mod:`hta.live`), said at every verbosity but quiet."""
    return None if verbosity == "quiet" else f"hta: t={t:.1f}s{CHANGE_MARK}{words}"


# -- the panel -----------------------------------------------------------------------------------

def short_name(workflow: str | None) -> str:
    """``folder/Makeflow``: enough to tell runs apart, short enough for a title."""
    if not workflow:
        return "—"
    p = Path(workflow)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def render(s: StatusSnapshot) -> RenderableType:
    """The panel: one picture of a run, for the live view and for ``hta status``."""
    title = Text.assemble(("HTA ", "bold"), (short_name(s.run.workflow), "bold cyan"),
                          f" · policy {s.run.policy} · backend {s.run.backend} · ",
                          (f"elapsed {duration(s.elapsed_s)}", "bold"), " ")

    tasks = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
    tasks.add_column("category")
    for col in ("waiting", "running", "done"):
        tasks.add_column(col, justify="right")
    for c in s.tasks.categories:
        tasks.add_row(c.name, str(c.waiting), str(c.running), "—" if c.done is None else str(c.done))
    failed = f", {s.tasks.failed} failed" if s.tasks.failed else ""
    tasks.add_row(Text("all", style="bold"), str(s.tasks.waiting), str(s.tasks.running), f"{s.tasks.done}{failed}",
                  style="bold")

    idle = sum(1 for w in s.workers if w.state == "idle")
    lat = s.latency
    measured = f"median of {min(lat.count, 10)}, {lat.count} measured" if lat.count else "prior, none measured yet"
    acc = s.accounting
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    workers = Text(f"{s.connected} connected ({idle} idle), {s.pending} on their way")
    if s.cap is not None:
        workers.append(f"; at most {s.cap.max_workers} ({s.cap.set_by or '--max-workers'})")
        if s.cap.at_cap:
            workers.append(" — at the cap, tasks wait for it", style="bold yellow")
    facts.add_row("workers", workers)
    facts.add_row("latency L", f"{lat.estimate_s:.1f} s ({measured})")
    facts.add_row("cores", f"{s.cores.supply:g} supplied, {s.cores.in_use:g} in use, {s.cores.demand:g} demand")
    facts.add_row("waste / shortage", f"{acc.waste_core_s:,.1f} / {acc.shortage_core_s:,.1f} core·s so far")
    if s.plan is not None:  # (--deadline or --budget: what the forecast sees; bold where it cannot be kept)
        facts.add_row("plan", Text(s.plan.line, style="bold yellow" if not s.plan.feasible else ""))
    if s.changes:  # (hta set, SIGHUP: the last setting changed while the run goes)
        facts.add_row("changed", Text(f"t={s.changes[-1].t:.1f}s {s.changes[-1].line}", style="bold"))
    d = s.last_decision
    if d is None:
        facts.add_row("last decision", "none yet")
    else:
        acts = [f"add {d.add}"] if d.add else []
        acts += [f"drain {', '.join(d.drain)}"] if d.drain else []
        acts += [f"remove {', '.join(d.remove)}"] if d.remove else []
        counts = s.decision_counts
        facts.add_row("last decision", Text.assemble((f"t={d.t:.1f}s {'; '.join(acts) or 'hold'}", "bold"),
                                                     f" — {counts['up']} up, {counts['down']} down so far"))
        facts.add_row("reason", Text(d.reason, style="italic"))
    parts: list[RenderableType] = [tasks, Text(""), facts]
    if s.last_error:
        parts.append(Text(f"last step failed: {s.last_error} ({s.step_failures} failures so far)", style="bold red"))
    return Panel(Group(*parts), title=title, title_align="left", border_style="blue")


# -- the live view inside hta makeflow --------------------------------------------------------------

class LiveView:
    """Shows a run while the controller runs it; start ``run(finished)`` as a task beside it.

    ``mode``: ``"panel"`` or ``"lines"``; None picks ``panel`` when ``console`` is a
    terminal. Plain lines go to ``stream`` (stderr by default). ``quiet`` shows no
    panel and prints errors only."""

    def __init__(self, controller: Controller, info: RunInfo, console: Console | None = None,
                 mode: Mode | None = None, verbosity: Verbosity = "normal", *, stream: IO[str] | None = None,
                 refresh_s: float = 0.5):
        self.controller = controller
        self.info = info
        self.console = console or Console(stderr=True)
        self.mode: Mode = mode or ("panel" if self.console.is_terminal else "lines")
        self.verbosity = verbosity
        self.stream = stream
        self.refresh_s = refresh_s
        self._decisions = 0
        #: the last decision shown was held back by the cap (a hold is said when it starts)
        self._held = False
        self._events = 0
        self._changes = 0
        self._error: str | None = None

    def snapshot(self) -> StatusSnapshot:
        return build_snapshot(self.controller, self.info)

    def new_lines(self) -> list[str]:
        """Lines for what happened since the last call, in time order."""
        c = self.controller
        items: list[tuple[float, int, str | None]] = []
        for d in c.decisions[self._decisions:]:
            newly_held = bool(d.held_back) and not self._held
            self._held = bool(d.held_back)
            items.append((round(d.t, 3), 0, decision_line(d, self.verbosity, newly_held)))
        for e in c.worker_events[self._events:]:  # (at the decision's time, after its line)
            items.append((round(e.t, 3), 1, worker_line(e, self.verbosity)))
        changes = getattr(c, "changes", [])  # (a stand-in controller may have none)
        for t, change in changes[self._changes:]:  # (a person asked for it: said unless quiet)
            items.append((round(t, 3), -1, change_line(t, change.words(), self.verbosity)))
        self._decisions, self._events, self._changes = len(c.decisions), len(c.worker_events), len(changes)
        if c.last_error != self._error:
            self._error = c.last_error
            if c.last_error:
                items.append((c.now(), 2, error_line(c.now(), c.last_error)))
        items.sort(key=lambda i: (i[0], i[1]))
        return [line for _, _, line in items if line]

    def _emit(self, lines: list[str], live: Live | None = None) -> None:
        for line in lines:
            if live is not None:
                live.console.print(line, markup=False, highlight=False, soft_wrap=True)
            else:
                print(line, file=self.stream or sys.stderr, flush=True)

    async def _tick(self, finished: asyncio.Event) -> bool:
        """Wait one refresh; True once ``finished`` is set."""
        try:
            await asyncio.wait_for(finished.wait(), self.refresh_s)
        except TimeoutError:
            return False
        return True

    async def run(self, finished: asyncio.Event) -> None:
        """Until ``finished`` is set (then one last update, and the panel is cleared)."""
        if self.mode == "lines" or self.verbosity == "quiet":
            done = False
            while not done:
                done = await self._tick(finished)
                self._emit(self.new_lines())
            return
        with Live(render(self.snapshot()), console=self.console, auto_refresh=False, transient=True,
                  redirect_stdout=False, redirect_stderr=False) as live:
            done = False
            while not done:
                done = await self._tick(finished)
                lines = self.new_lines()
                # on a terminal the panel says it all; verbose (and any error, and a setting changed)
                # also keeps the lines above it
                self._emit([ln for ln in lines if self.verbosity == "verbose" or "step failed" in ln
                            or CHANGE_MARK in ln], live)
                live.update(render(self.snapshot()), refresh=True)


# -- hta status URL --------------------------------------------------------------------------------

class StatusError(Exception):
    """One line for the person who ran ``hta status``."""


class BadURL(StatusError):
    """The URL given is not one ``hta status`` can read: bad input."""


class RunGone(StatusError):
    """Nothing listens at the URL (any more): no run, or the run ended."""


class Dropped(StatusError):
    """The connection broke mid-answer: the run ending, or the network between."""


def status_url(url: str) -> str:
    """``HOST:PORT``, ``http://HOST:PORT/`` or ``…/status`` → the ``/status`` URL."""
    url = given = url.strip()
    if "://" not in url and ":" not in url and Path(url).exists():  # (a workflow given for the run's URL)
        raise BadURL(f"{url!r} is a {'folder' if Path(url).is_dir() else 'file'} here, not a URL: give the "
                     f"http://HOST:PORT/ hta makeflow printed (the run's report: hta report {url})")
    if "://" not in url:
        url = "http://" + url
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise BadURL(f"{url!r} is not an http:// URL: give http://HOST:PORT/ as hta makeflow printed it "
                     f"(or HOST:PORT)")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise BadURL(f"{given!r} is not a URL (give http://HOST:PORT/ as hta makeflow printed it)") from None
    try:
        port = parts.port
    except ValueError:  # (out of range, or not a number)
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise BadURL(f"{given!r}: the port must be a number from 1 to 65535: give http://HOST:PORT/ as hta "
                     f"makeflow printed it")
    if url.rstrip("/").endswith("/status"):
        return url.rstrip("/")
    return url.rstrip("/") + "/status"


async def fetch_status(url: str, timeout_s: float = 5.0, token: str | None = None) -> StatusSnapshot:
    """GET the snapshot; :class:`StatusError` with one line if it cannot be had."""
    target = status_url(url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            async with session.get(target, headers=headers) as r:
                if r.status == 401:
                    raise StatusError(f"{target} needs the run's status token: give --token TOKEN "
                                      f"(or set HTA_STATUS_TOKEN)")
                if r.status != 200:
                    raise StatusError(f"{target} answered HTTP {r.status}: not an HTA status server "
                                      "(give the URL hta makeflow printed)")
                body = await r.read()
    except StatusError:
        raise
    except TimeoutError:
        raise StatusError(f"{target} did not answer within {timeout_s:g} s") from None
    except aiohttp.InvalidURL:
        raise BadURL(f"{url!r} is not a URL (give http://HOST:PORT/ as hta makeflow printed it)") from None
    except aiohttp.ClientConnectorError as exc:
        why = exc.os_error.strerror if exc.os_error and exc.os_error.strerror else str(exc)
        refused = isinstance(exc.os_error, ConnectionRefusedError)  # nothing listens: no run (any more)
        raise (RunGone if refused else StatusError)(f"cannot reach {target} ({why}): is the hta run still going?") \
            from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:  # it closed as we asked
        raise Dropped(f"cannot read {target} ({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}):"
                      f" is the hta run still going?") from None
    except aiohttp.ClientError as exc:
        raise StatusError(f"cannot read {target} ({type(exc).__name__}: {exc})") from None
    try:
        snapshot = StatusSnapshot.model_validate_json(body)
    except ValidationError:
        raise StatusError(f"{target} is not an HTA status server (its answer is not an HTA status)") from None
    if snapshot.format != FORMAT:
        raise StatusError(f"{target} speaks {snapshot.format}, this hta reads {FORMAT}: use the same version")
    return snapshot


async def watch(url: str, console: Console, interval_s: float = 1.0, stop: asyncio.Event | None = None,
                token: str | None = None) -> bool:
    """``hta status --watch``: redraw the panel until ``stop`` is set (or Ctrl-C), or until the
    run goes away. Returns True when the run went away (its server stopped listening: the
    normal end of a run once it was reached), False when ``stop`` was set. A first fetch
    that fails, or a server that answers wrongly, is a :class:`StatusError`."""
    stop = stop or asyncio.Event()
    snapshot = await fetch_status(url, token=token)
    with Live(render(snapshot), console=console, auto_refresh=False) as live:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass
            if stop.is_set():
                break
            try:
                try:
                    snapshot = await fetch_status(url, token=token)
                except Dropped:  # the run closing its server, or a blip: asking again tells which
                    snapshot = await fetch_status(url, token=token)
                live.update(render(snapshot), refresh=True)
            except RunGone:
                return True
            except StatusError as exc:
                raise StatusError(f"{exc} (the run may have ended)") from None
    return False
