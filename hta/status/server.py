"""The status server inside the HTA process: ``/status``, ``/metrics`` and the live page.

It runs on the controller's own event loop (aiohttp), so every request reads
the controller between two steps and never sees it half-updated. It binds to
127.0.0.1 on a free port by default (a run on a shared machine must not
collide with another's), and :meth:`StatusServer.start` returns the URL to
print. It only reads: nothing a request does changes the run.

- ``GET /status``  — the :class:`~hta.status.snapshot.StatusSnapshot` as JSON;
- ``GET /metrics`` — Prometheus' text format (:mod:`hta.status.metrics`);
- ``GET /``        — the live page (:mod:`hta.status.page`), which polls ``/status``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from hta.status.metrics import make_registry
from hta.status.page import PAGE
from hta.status.snapshot import RunInfo, StatusSnapshot, build_snapshot

if TYPE_CHECKING:
    from hta.controller import Controller

SnapshotSource = Callable[[], StatusSnapshot]


class StatusServer:
    """Serves what ``source()`` returns; ``port=0`` picks a free port."""

    def __init__(self, source: SnapshotSource, host: str = "127.0.0.1", port: int = 0):
        self.source = source
        self.host = host
        self.port = port
        self.url: str | None = None
        self.registry = make_registry(source)
        self._runner: web.AppRunner | None = None

    @classmethod
    def for_controller(cls, controller: Controller, info: RunInfo, host: str = "127.0.0.1",
                       port: int = 0) -> StatusServer:
        return cls(lambda: build_snapshot(controller, info), host=host, port=port)

    def app(self) -> web.Application:
        app = web.Application()
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
