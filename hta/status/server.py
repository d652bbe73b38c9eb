"""The status server inside the HTA process: ``/status``, ``/metrics`` and the live page.

It runs on the controller's own event loop (aiohttp), so every request reads
the controller between two steps and never sees it half-updated. It binds to
127.0.0.1 on a free port by default (a run on a shared machine must not
collide with another's), and :meth:`StatusServer.start` returns the URL to
print. Only ``POST /control`` changes the run, and only at its next step.

- ``GET /status``  — the :class:`~hta.status.snapshot.StatusSnapshot` as JSON;
- ``GET /metrics`` — Prometheus' text format (:mod:`hta.status.metrics`);
- ``GET /``        — the live page (:mod:`hta.status.page`), which polls ``/status``;
- ``POST /control`` — ``hta set``: a new cap or dial (:mod:`hta.status.control`).

Reading: with a ``token`` every read must carry it, as ``Authorization: Bearer TOKEN``
(what a Prometheus scrape config or ``hta status --token`` sends) or as ``?token=TOKEN``
(what a browser can: the page passes it on to its own requests); any other is refused
(401). A token that may write may read too. A server reachable beyond this host without a
token is said to be open (:func:`open_to`).

Writing needs a token of its own, in the header only (a URL's query ends up in logs and
shell histories): the ``control_token`` (``--control-token``), from anywhere; or the
``local_token`` HTA wrote for the run into its folder (mode 0600), from this host only
(the peer is loopback, or the very address it reached the server on). No token is
refused with 401, the read token or any other with 403, each in one line.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from hta.errors import UsageError
from hta.live import Refused
from hta.status.metrics import make_registry
from hta.status.page import PAGE
from hta.status.snapshot import RunInfo, StatusSnapshot, build_snapshot

if TYPE_CHECKING:
    from hta.controller import Controller
    from hta.status.control import ControlAnswer, ControlRequest

SnapshotSource = Callable[[], StatusSnapshot]
#: applies a change (:func:`hta.status.control.apply_request`)
ControlHandler = Callable[["ControlRequest"], "ControlAnswer"]


def loopback(host: str) -> bool:
    """Whether only this host can reach an address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_host(peer: str | None, reached: str | None) -> bool:
    """Whether a connection from ``peer`` comes from this host: loopback (an IPv4 one
    mapped into IPv6 too), or the very address it reached the server on (``reached``: a
    client on this host that dialled the host's own address comes from it)."""
    if not peer:
        return False
    try:
        ip = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    if ip.is_loopback or (mapped is not None and mapped.is_loopback):
        return True
    return reached is not None and peer == reached


def open_to(host: str, token: str | None) -> str | None:
    """A warning for a status server anyone on the network may read: bound beyond loopback
    with no token. None when it is not."""
    if token or loopback(host):
        return None
    return (f"the status server listens on {host} with no token: anyone who can reach it may read the run's "
            f"status; set --status-token (HTA_STATUS_TOKEN), or --status-host 127.0.0.1")


def _is(given: str, token: str | None) -> bool:
    """``given`` is ``token`` (in constant time: a timing must not spell it out)."""
    return token is not None and hmac.compare_digest(given.encode(), token.encode())


def _refusal(status: int, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="hta"'} if status == 401 else {}
    return web.json_response({"error": message}, status=status, headers=headers)


class StatusServer:
    """Serves what ``source()`` returns and hands changes to ``control``; ``port=0`` picks a
    free port; the tokens: see the module."""

    def __init__(self, source: SnapshotSource, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 *, control: ControlHandler | None = None, control_token: str | None = None,
                 local_token: str | None = None):
        self.source = source
        self.host = host
        self.port = port
        self.token = token or None
        self.control = control
        self.control_token = control_token or None
        self.local_token = local_token or None
        self.url: str | None = None
        self.registry = make_registry(source)
        self._runner: web.AppRunner | None = None

    @classmethod
    def for_controller(cls, controller: Controller, info: RunInfo, host: str = "127.0.0.1",
                       port: int = 0, token: str | None = None, *, control_token: str | None = None,
                       local_token: str | None = None) -> StatusServer:
        """The run's server: reads the controller; ``POST /control`` changes it at its next step."""
        from hta.status.control import apply_request

        return cls(lambda: build_snapshot(controller, info), host=host, port=port, token=token,
                   control=lambda request: apply_request(controller, request),
                   control_token=control_token, local_token=local_token)

    @staticmethod
    def _bearer(request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _may_write(self, request: web.Request) -> web.Response | None:
        """None if ``request`` may change the run, else its refusal (see the module)."""
        given = self._bearer(request)
        if not given:
            return _refusal(401, "changing the run needs its control token (Authorization: Bearer TOKEN): on the "
                                 "run's host, hta set WORKFLOW reads it from the run's folder; elsewhere give "
                                 "hta set URL --token CONTROL_TOKEN (the run's --control-token)")
        if _is(given, self.control_token):
            return None
        if _is(given, self.local_token):
            sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
            if same_host(request.remote, sock[0] if sock else None):
                return None
            return _refusal(403, "the run's local control token is taken only from the run's own host: from "
                                 "elsewhere, give the run's --control-token")
        if _is(given, self.token):
            return _refusal(403, "that is the run's status token, which only reads: changing the run needs its "
                                 "control token (--control-token), or hta set WORKFLOW on the run's host")
        return _refusal(403, "not the run's control token: give the run's --control-token, or use hta set "
                             "WORKFLOW on the run's host")

    def _may_read(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        given = self._bearer(request)
        if given is None:
            given = request.query.get("token", "")
        # (whoever may write may read: hta set's user sees the run it changes)
        return _is(given, self.token) or _is(given, self.control_token) or _is(given, self.local_token)

    @web.middleware
    async def _authorize(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            refused = self._may_write(request)
            if refused is not None:
                return refused
        elif not self._may_read(request):
            return web.Response(status=401, text="401: this HTA status server needs its token "
                                "(Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
                                headers={"WWW-Authenticate": 'Bearer realm="hta"'})
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorize], client_max_size=64 * 1024)
        app.router.add_get("/", self._page)
        app.router.add_get("/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/control", self._control)
        return app

    async def start(self) -> str:
        """Listen; returns the base URL (``http://HOST:PORT/``). Raises ``OSError`` if the
        port is taken or the host cannot be bound."""
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(text=self.source().model_dump_json(), content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    async def _metrics(self, request: web.Request) -> web.Response:
        # the client library's own negotiation: the classic text format unless OpenMetrics is asked for
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(self.registry), headers={"Content-Type": content_type})

    async def _control(self, request: web.Request) -> web.Response:
        """``hta set``: validate the body at the boundary, hand it to the run (applied at its
        next step), answer what changes; 400 a bad value, 409 a change the run refuses."""
        from pydantic import ValidationError

        from hta.status.control import ControlRequest, first_error

        if self.control is None:
            return _refusal(404, "this status server takes no changes")
        try:
            body = await request.json()
        except ValueError:
            return _refusal(400, 'the body must be JSON, e.g. {"max_workers": 8}')
        try:
            asked = ControlRequest.model_validate(body)
        except ValidationError as exc:
            return _refusal(400, first_error(exc))
        try:
            answer = self.control(asked)
        except UsageError as exc:
            return _refusal(400, str(exc))
        except Refused as exc:
            return _refusal(409, str(exc))
        return web.json_response(answer.model_dump(), headers={"Cache-Control": "no-store"})
