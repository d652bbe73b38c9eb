"""List, then watch from that resourceVersion — the informer pattern, once.

After a watch ends normally (its ``timeout_seconds``) it watches again from the
last resourceVersion. After anything else — a 410 Gone (the resourceVersion is
too old; a restarted API server), an ERROR event, a dropped connection, an
API server that does not answer — it relists at once and then watches from the
new list: what changed while it was not watching comes from the list (``on_sync``
sees every pod, and which ones are gone). While the API server stays away it
tries again every ``RETRY_MAX_S`` at most, so it is back within about that long
after the API server is: pods scheduled or started meanwhile are seen promptly
(their times come from their status, see :mod:`k8s.informer`).

Every request has a client-side timeout: an API server that stops answering
(a hung process, a network partition) cannot hold the informer forever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from k8s.api import CallCounter

log = logging.getLogger("hta.k8s.watch")
#: seconds between attempts while the API server is away (from 0.2 s, doubling)
RETRY_MIN_S, RETRY_MAX_S = 0.2, 1.0
#: the server ends a watch after this long; the client gives up on a silent one a little later
WATCH_S = 30
LIST_TIMEOUT = (3.0, 10.0)  # connect, read
WATCH_TIMEOUT = (3.0, WATCH_S + 15.0)


def list_and_watch(
    list_fn: Callable[..., Any],
    *args: Any,
    selector: str,
    on_sync: Callable[[list], None],
    on_event: Callable[[str, Any], None],
    stop: threading.Event,
    counter: CallCounter | None = None,
) -> None:
    rv: str | None = None
    backoff = RETRY_MIN_S
    failing = False
    while not stop.is_set():
        try:
            if rv is None:
                if counter:
                    counter.add()
                listed = list_fn(*args, label_selector=selector, _request_timeout=LIST_TIMEOUT)
                on_sync(listed.items)
                rv = listed.metadata.resource_version
                if failing:
                    log.warning("watch: back, relisted %d pods", len(listed.items))
                    failing = False
            if counter:
                counter.add()
            w = watch.Watch()
            for ev in w.stream(list_fn, *args, label_selector=selector, resource_version=rv, timeout_seconds=WATCH_S,
                               allow_watch_bookmarks=True, _request_timeout=WATCH_TIMEOUT):
                if stop.is_set():
                    w.stop()
                    break
                if ev["type"] == "BOOKMARK":
                    rv = ((ev.get("raw_object") or {}).get("metadata") or {}).get("resourceVersion", rv)
                    continue
                obj = ev["object"]
                if ev["type"] == "ERROR":  # the client raises these itself; kept for older clients
                    raw = ev.get("raw_object") or {}
                    raise client.exceptions.ApiException(status=raw.get("code", 500) or 500,
                                                         reason=raw.get("message", ""))
                rv = obj.metadata.resource_version
                on_event(ev["type"], obj)
            backoff = RETRY_MIN_S
        except Exception as exc:  # noqa: BLE001 — 410 Gone, connection reset, timeout, 5xx...
            if stop.is_set():
                break
            rv = None  # relist: whatever happened while we were not watching comes from the list
            what = f"{exc.status} {exc.reason or ''}".strip() if isinstance(exc, client.exceptions.ApiException) \
                else type(exc).__name__
            if isinstance(exc, client.exceptions.ApiException) and exc.status == 410:
                log.info("watch expired (410 Gone): relisting")
                continue  # at once
            if not failing:
                log.warning("watch failed (%s): relisting, and retrying every %gs at most while it fails",
                            what, RETRY_MAX_S)
                failing = True
            stop.wait(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)
