"""List, then watch from that resourceVersion — the informer pattern, once.

Relists on 410 Gone (the resourceVersion is too old), reconnects with
exponential backoff on any other failure, and skips bookmarks (which the
client leaves as plain dicts) after taking their resourceVersion.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kubernetes import client, watch

from k8s.api import CallCounter

log = logging.getLogger("hta.k8s.watch")


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
    backoff = 0.5
    while not stop.is_set():
        try:
            if rv is None:
                if counter:
                    counter.add()
                listed = list_fn(*args, label_selector=selector, _request_timeout=30)
                on_sync(listed.items)
                rv = listed.metadata.resource_version
            if counter:
                counter.add()
            w = watch.Watch()
            for ev in w.stream(list_fn, *args, label_selector=selector, resource_version=rv, timeout_seconds=30,
                               allow_watch_bookmarks=True):
                if stop.is_set():
                    w.stop()
                    break
                if ev["type"] == "BOOKMARK":
                    rv = ((ev.get("raw_object") or {}).get("metadata") or {}).get("resourceVersion", rv)
                    continue
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    raise client.exceptions.ApiException(status=getattr(obj, "code", 500) or 500)
                rv = obj.metadata.resource_version
                on_event(ev["type"], obj)
            backoff = 0.5
        except client.exceptions.ApiException as exc:
            if exc.status == 410:
                log.info("watch expired (410 Gone): relisting")
                rv = None
                continue
            log.warning("watch failed (%s); reconnecting in %.1fs", exc.status, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, 15)
        except Exception as exc:  # connection reset, timeout...
            if stop.is_set():
                break
            log.warning("watch failed (%s); reconnecting in %.1fs", type(exc).__name__, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, 15)
