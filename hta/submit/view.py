"""What a person sees while a run goes: the status server and the terminal's live view."""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from hta.backends.base import WorkerBackend
from hta.controller import Controller
from hta.policies.base import Policy
from hta.status.panel import LiveView
from hta.status.server import StatusServer, open_to
from hta.status.snapshot import RunInfo

log = logging.getLogger("hta")


@dataclass
class ViewOptions:
    """What a person sees while the run goes: the status server and the terminal view."""

    status: bool = True
    status_port: int = 0
    status_host: str = "127.0.0.1"
    status_token: str | None = None
    #: a token that may change the run (``hta set URL --token``), from anywhere
    control_token: str | None = None
    #: quiet | normal | verbose
    verbosity: str = "normal"
    #: panel | lines (None: a panel on a terminal, lines elsewhere)
    mode: str | None = None


async def show(controller: Controller, view: ViewOptions, policy: Policy, backend: WorkerBackend, workflow: Path,
                epoch: float, finished: asyncio.Event, run_dir: Path | None = None) -> None:
    """The status server and the live view, until ``finished``; neither can end the run.

    With ``run_dir``, the server's URL and a token made for this run are written there
    (``control.json``, mode 0600) for ``hta set WORKFLOW`` (this user, this host), and
    removed when the run ends (docs/decisions/0033-changing-a-running-run.md)."""
    from hta.status.control import new_token, remove_control_file, write_control_file

    info = RunInfo(workflow=str(workflow), policy=policy.name, backend=backend.name, started_at=epoch)
    server = None
    control_file = None
    if view.status:
        server = StatusServer.for_controller(controller, info, host=view.status_host, port=view.status_port,
                                             token=view.status_token, control_token=view.control_token,
                                             local_token=new_token() if run_dir is not None else None)
        warning = open_to(view.status_host, view.status_token)
        if warning:
            log.warning("%s", warning)
        try:
            url = await server.start()
        except OSError as exc:
            log.warning("no status server: cannot listen on %s port %d (%s); the run goes on (choose another "
                        "--status-port, or --no-status)", view.status_host, view.status_port, exc.strerror or exc)
            server = None
        else:
            if run_dir is not None and server.local_token is not None:
                try:
                    control_file = write_control_file(run_dir, url, server.local_token)
                except OSError as exc:
                    log.warning("cannot write %s (%s): hta set WORKFLOW will not find this run; give hta set its "
                                "URL and --token (the run's --control-token)", run_dir / "control.json",
                                exc.strerror or exc)
            if view.verbosity != "quiet":
                needs = "; readers need the status token" if view.status_token else ""
                print(f"hta: live status at {url} (also /status, /metrics; or: hta status {url}){needs}",
                      file=sys.stderr, flush=True)
    # the view says decisions and step failures itself: the controller's own log lines would repeat them
    quiet = logging.getLogger("hta.controller")
    level = quiet.level
    if view.verbosity != "quiet":
        quiet.setLevel(logging.ERROR)
    try:
        await LiveView(controller, info, mode=view.mode, verbosity=view.verbosity).run(finished)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 — a broken view must not end the run
        log.warning("the live view stopped: %s", exc)
        await finished.wait()
    finally:
        quiet.setLevel(level)
        if control_file is not None and run_dir is not None:  # (first: no file names a server gone)
            remove_control_file(run_dir)
        if server is not None:
            await server.stop()
