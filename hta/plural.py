"""Counts and amounts in the words people read: ``1 task``, ``3 tasks``, ``1h24m``, ``12.3 node·h``."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1 (the noun's plural takes an s)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def span(s: float) -> str:
    """A duration as a user reads it in a line: ``45s``, ``12m``, ``1h24m``, ``2d3h``."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    m = int(round(s / 60))
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def node_hours(node_s: float) -> str:
    """Node-seconds as node-hours, three figures: ``12.3 node·h`` (a budget's unit)."""
    return f"{node_s / 3600:.3g} node·h"
