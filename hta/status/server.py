"""The status server inside the HTA process: ``/status``, ``/metrics`` and the live page.

It runs on the controller's own event loop (aiohttp), so every request reads
the controller between two steps and never sees it half-updated. It binds to
127.0.0.1 on a free port by default (a run on a shared machine must not
collide with another's), and :meth:`StatusServer.start` returns the URL to
print. It only reads: nothing a request does changes the run.

- ``GET /status``  — the :class:`~hta.status.snapshot.StatusSnapshot` as JSON;
- ``GET /metrics`` — Prometheus' text format (:mod:`hta.status.metrics`);
- ``GET /``        — the live page (:mod:`hta.status.page`), which polls ``/status``.

With a ``token`` every request must carry it, as ``Authorization: Bearer TOKEN`` (what a
Prometheus scrape config or ``hta status --token`` sends) or as ``?token=TOKEN`` (what a
browser can: the page passes it on to its own requests); any other is refused (401).
A server reachable beyond this host without a token is said to be open (:func:`open_to`).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from hta.status.metrics import make_registry
from hta.status.page import PAGE
from hta.status.snapshot import RunInfo, StatusSnapshot, build_snapshot

if TYPE_CHECKING:
    from hta.controller import Controller

SnapshotSource = Callable[[], StatusSnapshot]


def loopback(host: str) -> bool:
    """Whether only this host can reach an address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_to(host: str, token: str | None) -> str | None:
    """A warning for a status server anyone on the network may read: bound beyond loopback
    with no token. None when it is not."""
    if token or loopback(host):
        return None
    return (f"the status server listens on {host} with no token: anyone who can reach it may read the run's "
            f"status; set --status-token (HTA_STATUS_TOKEN), or --status-host 127.0.0.1")


class StatusServer:
    """Serves what ``source()`` returns; ``port=0`` picks a free port; ``token``: see the module."""

    def __init__(self, source: SnapshotSource, host: str = "127.0.0.1", port: int = 0, token: str | None = None):
        self.source = source
        self.host = host
        self.port = port
        self.token = token or None
        self.url: str | None = None
        self.registry = make_registry(source)
        self._runner: web.AppRunner | None = None

    @classmethod
    def for_controller(cls, controller: Controller, info: RunInfo, host: str = "127.0.0.1",
                       port: int = 0, token: str | None = None) -> StatusServer:
        return cls(lambda: build_snapshot(controller, info), host=host, port=port, token=token)

    @web.middleware
    async def _authorize(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if self.token is not None:
            given = request.query.get("token", "")
            auth = request.headers.get("Authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.Response(status=401, text="401: this HTA status server needs its token "
                                    "(Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
                                    headers={"WWW-Authenticate": 'Bearer realm="hta"'})
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/", self._page)
        app.router.add_get("/status", self._status)
        app.router.add_get("/metrics", self._metrics)
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
