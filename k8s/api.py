"""Talking to the API server: configuration and calls that retry when that is right.

Configuration: an explicit kubeconfig, else in-cluster (when HTA runs in a
pod), else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``). A
missing or invalid one is a :class:`K8sError` with one line saying how to fix it.

Calls: 429 (with its Retry-After), 500/502/503/504 and timeouts/connection
errors are retried with exponential backoff; 403 (RBAC), 404, 409, 422 are
not — they are reported with the API server's reason.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

log = logging.getLogger("hta.k8s")
RETRY_STATUS = {429, 500, 502, 503, 504}


class K8sError(RuntimeError):
    """A Kubernetes problem, one line for the user."""


class CallCounter:
    """Counts API calls (benchmarks report calls per decision)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.count += 1


def _check_kubeconfig_file(path: str, named_by: str) -> None:
    """A kubeconfig named by ``--kubeconfig`` or ``$KUBECONFIG`` (or the default) must be a file."""
    if os.path.isdir(path):
        raise K8sError(f"kubeconfig {path!r} ({named_by}) is a folder: pass --kubeconfig FILE of a reachable "
                       f"cluster")
    if not os.path.isfile(path):
        raise K8sError(f"kubeconfig {path!r} ({named_by}) not found: pass --kubeconfig FILE of a reachable cluster")


def load_client(kubeconfig: str | None = None) -> client.ApiClient:
    try:
        if kubeconfig:
            _check_kubeconfig_file(kubeconfig, "--kubeconfig")
            cfg = client.Configuration()
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
        else:
            env = os.environ.get("KUBECONFIG", "")
            if os.pathsep not in env:  # (a list of files is the client library's to merge)
                _check_kubeconfig_file(os.path.expanduser(env or "~/.kube/config"),
                                       "$KUBECONFIG" if env else "the default; KUBECONFIG is not set")
            cfg = client.Configuration()
            config.load_kube_config(client_configuration=cfg)
    except ConfigException as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise K8sError(f"invalid kubeconfig {where}: {first} (pass --kubeconfig FILE, or set KUBECONFIG)") from None
    except K8sError:
        raise
    except Exception as exc:  # noqa: BLE001 — yaml errors and the like
        raise K8sError(f"invalid kubeconfig {kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}: "
                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} (pass --kubeconfig "
                       f"FILE, or set KUBECONFIG)") from None
    cfg.retries = 0  # retries are ours (below), with backoff
    return client.ApiClient(cfg)


def describe(exc: client.exceptions.ApiException) -> str:
    import json

    msg = exc.reason or ""
    try:
        body = json.loads(exc.body or "{}")
        msg = body.get("message") or msg
    except (ValueError, TypeError):
        pass
    hint = ""
    if exc.status == 403:
        hint = " (HTA's service account needs the Role in k8s/manifests: kubectl apply -k k8s/manifests)"
    return f"{exc.status} {msg}{hint}"


def unreachable(exc: BaseException) -> str:
    """One line for a connection error: where, and why in a few words (urllib3's own message
    holds the pool, the URL and the exception's repr)."""
    pool = getattr(exc, "pool", None)
    where = f" at {pool.host}:{pool.port}" if pool is not None and getattr(pool, "host", None) else ""
    text = str(getattr(exc, "reason", None) or exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", text) or re.search(r"(timed out|Name or service not known)", text)
    why = m.group(1).strip() if m else type(getattr(exc, "reason", None) or exc).__name__
    return (f"cannot reach the API server{where} ({why}): is the cluster up? check the server in the "
            f"kubeconfig")


#: how long one step of the control loop waits for one API operation (all its retries) before
#: giving up; the next step tries again, so the loop keeps observing meanwhile
STEP_BUDGET_S = 5.0


def call(fn: Callable[..., Any], *args: Any, counter: CallCounter | None = None, attempts: int = 6,
         timeout_s: float = 15.0, what: str = "", budget_s: float | None = None,
         deadline: float | None = None, **kwargs: Any) -> Any:
    """Call a kubernetes client method with retries where they are right.

    ``budget_s`` (or an absolute ``deadline`` on :func:`time.monotonic`) bounds the whole call,
    retries and waits included: each request's timeout is cut to what is left, and a retry that
    could not finish in time is not tried. The :class:`K8sError` then says it gave up."""
    if deadline is None and budget_s is not None:
        deadline = time.monotonic() + budget_s
    delay = 0.5
    last = ""
    for attempt in range(1, attempts + 1):
        per = timeout_s
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < 0.1:
                break
            per = min(timeout_s, left)
        if counter is not None:
            counter.add()
        try:
            return fn(*args, _request_timeout=per, **kwargs)
        except client.exceptions.ApiException as exc:
            if exc.status not in RETRY_STATUS or attempt == attempts:
                raise K8sError(f"{what or fn.__name__}: {describe(exc)}") from None
            last = describe(exc)
            retry_after = (exc.headers or {}).get("Retry-After") if exc.status == 429 else None
            wait = float(retry_after) if retry_after and retry_after.isdigit() else delay
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if attempt == attempts:
                raise K8sError(f"{what or fn.__name__}: {unreachable(exc)}") from None
            last = unreachable(exc)
            wait = delay
        if deadline is not None and time.monotonic() + wait >= deadline:
            break
        log.info("%s: retrying in %.1fs (attempt %d)", what or fn.__name__, wait, attempt)
        time.sleep(wait)
        delay = min(delay * 2, 10.0)
    raise K8sError(f"{what or fn.__name__}: {last or 'no answer'} (gave up for now; tried for "
                   f"{budget_s if budget_s is not None else timeout_s:g}s)")


async def acall(fn: Callable[..., Any], *args: Any, budget_s: float = STEP_BUDGET_S,
                deadline: float | None = None, **kwargs: Any) -> Any:
    """:func:`call` in a thread, bounded: the event loop never blocks on the API server, and the
    caller is back within ``budget_s`` (or by ``deadline``) whatever the API server does."""
    import asyncio

    if deadline is None:
        deadline = time.monotonic() + budget_s
    left = max(0.1, deadline - time.monotonic())
    kwargs.setdefault("what", getattr(fn, "__name__", "call"))
    fut = asyncio.ensure_future(asyncio.to_thread(call, fn, *args, deadline=deadline, budget_s=budget_s,
                                                  **kwargs))
    try:  # the thread ends by the deadline too (its timeouts are cut to it); this is a safety net
        return await asyncio.wait_for(asyncio.shield(fut), left + 2.0)
    except TimeoutError:
        raise K8sError(f"{kwargs['what']}: no answer within {budget_s:g}s (gave up for now)") from None
