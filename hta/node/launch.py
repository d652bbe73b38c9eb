"""``hta worker`` seen from outside: how to run it, which connection is its worker's, and
why it stopped. Every provider that starts workers as processes (locally, or inside a
batch job) reads them the same way."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil

#: words of a worker's log line that says what went wrong
_TROUBLE = re.compile(r"error|fatal|less than|cannot|can't|could not|couldn't|failed|no space|denied|not found|"
                      r"refused|invalid|unable|traceback|killed", re.I)


def hta_executable() -> list[str]:
    """How to run ``hta`` itself: the console script next to this Python, else the module."""
    exe = Path(sys.executable).with_name("hta")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hta.cli"]


def master_connection(pid: int, port: int) -> str | None:
    """The local end (``ip:port``, as the master names the worker) of the established TCP
    connection to ``port`` held by ``pid`` or a descendant (``hta worker`` → ``work_queue_worker``)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
        except psutil.Error:
            continue
        for c in conns:
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED:
                return f"{c.laddr.ip}:{c.laddr.port}"
    return None


def last_words(path: Path | None) -> str:
    """The line of a worker's log that says why it stopped (else its last line)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()] if path else []
    except OSError:
        return ""
    lines = [ln for ln in lines if not ln.startswith('{"hta_worker"')]
    for ln in reversed(lines):
        if _TROUBLE.search(re.sub(r"/\S+", "", ln)):  # words, not paths that happen to hold them
            return ln
    return lines[-1] if lines else ""
