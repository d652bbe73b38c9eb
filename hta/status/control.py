"""``hta set``: change a running run's cap and dial through its status server.

The wire: ``POST /control`` with a JSON :class:`ControlRequest` (``{"max_workers": 8}``,
``{"deadline": "2h"}``, ``{"budget": "40node-h"}``, ``"none"`` clears the dial), and the
control token as ``Authorization: Bearer TOKEN``. The server validates the body with
:class:`ControlRequest` at the boundary, :func:`apply_request` resolves it against the run
(:func:`resolve`) and hands it to the controller, and the answer is a
:class:`ControlAnswer`: what changes, old → new. A value the run cannot take is 400, a
change it refuses 409; either carries one line, ``{"error": "..."}``.

Who may write (docs/decisions/0033-changing-a-running-run.md): the holder of the run's
control token (``--control-token``, ``HTA_CONTROL_TOKEN``), from anywhere that reaches
the server; and the user who started the run, on its host, by the token HTA writes for
the run into ``WORKFLOW.hta/control.json`` (mode 0600: only that user reads it) and
accepts only from this host. The read token (``--status-token``) never writes.
``hta set WORKFLOW`` reads that file for the URL and the token; ``hta set URL`` needs
``--token``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from hta.dial_input import parse_budget, parse_deadline
from hta.live import LiveSettings, SettingChange, budget_words, deadline_words

if TYPE_CHECKING:
    from hta.controller import Controller

#: the file in the run's folder that ``hta set WORKFLOW`` reads: the URL and the local token
CONTROL_FILE = "control.json"
#: what clears the dial (``hta set --deadline none``)
CLEAR = frozenset({"none", "off"})


class ControlError(Exception):
    """One line for the person who ran ``hta set``; ``bad_input`` when the value was the
    problem (exit 2), else the run refused or could not be reached (exit 1)."""

    def __init__(self, message: str, bad_input: bool = False):
        super().__init__(message)
        self.bad_input = bad_input


class ControlRequest(BaseModel):
    """What ``hta set`` asks: any of the three; the dial's values as ``hta makeflow
    --deadline``/``--budget`` take them, or ``none``."""

    model_config = ConfigDict(extra="forbid")

    max_workers: StrictInt | None = Field(None, ge=1)
    deadline: str | None = Field(None, min_length=1, max_length=200)
    budget: str | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_at_least(self) -> ControlRequest:
        if self.max_workers is None and self.deadline is None and self.budget is None:
            raise ValueError("nothing to change: give --max-workers N, --deadline WHEN or --budget AMOUNT")
        if self.deadline is not None and self.budget is not None:
            raise ValueError("give --deadline or --budget, not both (the dial takes one)")
        return self

    def check(self, now: dt.datetime | None = None) -> None:
        """Refuse a value that does not parse (:class:`UsageError`, one line), before any
        run is asked: the same parsers as ``hta makeflow`` (core-hours checked per core)."""
        if self.deadline is not None and self.deadline.strip().lower() not in CLEAR:
            parse_deadline(self.deadline, dt.datetime.now() if now is None else now)
        if self.budget is not None and self.budget.strip().lower() not in CLEAR:
            parse_budget(self.budget, 1)


def first_error(exc: ValidationError) -> str:
    """pydantic's first complaint as one line in ``hta set``'s words."""
    e = exc.errors()[0]
    where = ".".join(str(x) for x in e["loc"])
    flag = f"--{where.replace('_', '-')}" if where else ""
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        return f"unknown setting {where!r}: a run changes only max_workers, deadline and budget"
    if e["type"] == "greater_than_equal":
        return f"{flag} must be at least {e['ctx']['ge']}, not {e['input']!r}"
    if e["type"].startswith("int"):
        return f"{flag} must be a whole number, not {e['input']!r}"
    return f"{flag}: {msg}" if flag else msg


class ChangedSetting(BaseModel):
    setting: str
    old: str
    new: str
    source: str
    words: str

    @classmethod
    def of(cls, c: SettingChange) -> ChangedSetting:
        return cls(setting=c.setting, old=c.old, new=c.new, source=c.source, words=c.words())


class ControlAnswer(BaseModel):
    """What a change did: each setting changed (old → new), and those already so."""

    changes: list[ChangedSetting] = Field(default_factory=list)
    #: settings asked for that already had that value (``max-workers 8``)
    unchanged: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line for ``hta set`` to print."""
        said = [f"{c.setting} {c.old} → {c.new}" for c in self.changes]
        said += [f"{u} already" for u in self.unchanged]
        when = " (at the run's next decision)" if self.changes else ": nothing changed"
        return "; ".join(said) + when


def resolve(request: ControlRequest, current: LiveSettings, *, elapsed_s: float, now: dt.datetime,
            node_cores: int) -> LiveSettings:
    """The settings ``request`` asks for, from ``current``: a deadline counts from ``now``
    (``2h``: two hours from now; a clock time, the next one) and becomes seconds from the
    run's start (``elapsed_s`` in); a budget is node·s of the run's worker shape
    (``node_cores``); ``none`` clears the dial. :class:`UsageError` for a value that does
    not parse."""
    new = current
    if request.max_workers is not None:
        new = LiveSettings(request.max_workers, new.deadline_s, new.budget_node_s)
    if request.deadline is not None:
        text = request.deadline.strip()
        new = new.with_deadline(None if text.lower() in CLEAR else elapsed_s + parse_deadline(text, now))
    if request.budget is not None:
        text = request.budget.strip()
        new = new.with_budget(None if text.lower() in CLEAR else parse_budget(text, max(1, int(node_cores))))
    return new


def apply_request(controller: Controller, request: ControlRequest, source: str = "hta set",
                  now: dt.datetime | None = None) -> ControlAnswer:
    """Resolve ``request`` against the run and hand it to the controller (applied at its
    next step). Raises :class:`UsageError` (a value that does not parse) or
    :class:`~hta.live.Refused` (a change the run cannot make)."""
    current = controller.live_settings()
    new = resolve(request, current, elapsed_s=controller.now(), now=dt.datetime.now() if now is None else now,
                  node_cores=int(controller.config.worker_shape.cores))
    changes = controller.change(new, source)
    changed = {c.setting for c in changes}
    unchanged = []
    if request.max_workers is not None and "max-workers" not in changed:
        unchanged.append(f"max-workers {current.max_workers}")
    if request.deadline is not None and "deadline" not in changed:
        unchanged.append(f"deadline {deadline_words(current.deadline_s)}")
    if request.budget is not None and "budget" not in changed:
        unchanged.append(f"budget {budget_words(current.budget_node_s)}")
    return ControlAnswer(changes=[ChangedSetting.of(c) for c in changes], unchanged=unchanged)


# -- the run's control file ------------------------------------------------------------------

def new_token() -> str:
    return secrets.token_urlsafe(32)


def local_url(url: str) -> str:
    """The URL a client on this host connects to: a server bound to every address
    (0.0.0.0, ::) is reached on loopback."""
    for anywhere, here in (("//0.0.0.0:", "//127.0.0.1:"), ("//[::]:", "//[::1]:")):
        url = url.replace(anywhere, here)
    return url


def write_control_file(run_dir: Path, url: str, token: str) -> Path:
    """``run_dir/control.json``: the URL and the local token, readable by this user only
    (created 0600 under a temporary name, then renamed: never readable by others, never
    half written)."""
    path = run_dir / CONTROL_FILE
    tmp = run_dir / f".{CONTROL_FILE}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # (whatever the umask or an ACL default said)
        os.write(fd, json.dumps({"url": local_url(url), "token": token, "pid": os.getpid()}).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def remove_control_file(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / CONTROL_FILE).unlink()


def run_dir_of(target: str) -> Path | None:
    """The run folder ``target`` names, if it names one: a workflow file (``Makeflow`` →
    ``Makeflow.hta``) or the run folder itself. None: it is not a path here (a URL)."""
    p = Path(target)
    if p.is_dir() and p.name.endswith(".hta"):
        return p
    if p.is_file():
        return p.resolve().parent / f"{p.resolve().name}.hta"
    return None


def read_control_file(run_dir: Path, workflow: str) -> tuple[str, str]:
    """(URL, token) of the run going in ``run_dir``; :class:`ControlError` if none is, or
    this user may not read its file."""
    path = run_dir / CONTROL_FILE
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise ControlError(f"no run of {workflow} is going (no {path}): start one with hta makeflow, or give "
                           f"hta set the run's URL and --token") from None
    except PermissionError:
        raise ControlError(f"cannot read {path}: only the user who started the run may change it this way "
                           f"(others: hta set URL --token CONTROL_TOKEN)") from None
    except (OSError, ValueError) as exc:
        raise ControlError(f"cannot read {path} ({exc}): give hta set the run's URL and --token") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or not isinstance(data.get("token"), str):
        raise ControlError(f"{path} is not an HTA control file: give hta set the run's URL and --token")
    return data["url"], data["token"]


# -- the client --------------------------------------------------------------------------------

def control_url(url: str) -> str:
    """The ``/control`` URL of a run's status URL (as ``hta makeflow`` printed it)."""
    from hta.status.panel import status_url

    return status_url(url).removesuffix("/status") + "/control"


async def send_control(url: str, request: ControlRequest, token: str | None,
                       timeout_s: float = 10.0) -> ControlAnswer:
    """POST ``request``; :class:`ControlError` with one line if it did not change the run."""
    import aiohttp

    target = control_url(url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            async with session.post(target, json=request.model_dump(exclude_none=True), headers=headers) as r:
                body = await r.text()
                status = r.status
    except TimeoutError:
        raise ControlError(f"{target} did not answer within {timeout_s:g} s") from None
    except aiohttp.InvalidURL:
        raise ControlError(f"{url!r} is not a URL (give http://HOST:PORT/ as hta makeflow printed it)",
                           bad_input=True) from None
    except aiohttp.ClientConnectorError as exc:
        why = exc.os_error.strerror if exc.os_error and exc.os_error.strerror else str(exc)
        raise ControlError(f"cannot reach {target} ({why}): is the hta run still going?") from None
    except aiohttp.ClientError as exc:
        raise ControlError(f"cannot reach {target} ({type(exc).__name__}: {exc}): is the hta run still going?") \
            from None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    said = data.get("error") if isinstance(data, dict) else None
    if status == 200:
        try:
            return ControlAnswer.model_validate(data)
        except ValidationError:
            raise ControlError(f"{target} is not an HTA run's control (its answer is not HTA's)") from None
    if status == 404 or status == 405:
        raise ControlError(f"{target} answered HTTP {status}: not an HTA run that takes changes (an older hta, or "
                           f"not the URL hta makeflow printed)")
    if said is None:
        raise ControlError(f"{target} answered HTTP {status}: not an HTA run's control")
    raise ControlError(str(said), bad_input=status == 400)
