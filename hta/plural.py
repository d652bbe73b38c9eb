"""Counts in the words people read: ``1 task``, ``3 tasks``."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1 (the noun's plural takes an s)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
