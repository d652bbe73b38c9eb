"""JSON as CCTools writes it, which is not always JSON.

CCTools writes a task's command into its JSON (the master's ``/task_status``,
``makeflow_viz -D json``, the resource monitor's ``*.summary``) with its own
escaping: a backslash as ``\\\\`` (as JSON does), but a quote as ``\\'``, which
strict JSON refuses. :func:`loads` parses the text as it is, and only when that
fails reads each escape in turn (so the second backslash of ``\\\\`` is never
taken for the start of another): ``\\'`` becomes the quote it stood for, JSON's
own escapes stay, and any other backslash is kept as a backslash. ``makeflow_viz`` also
writes a key with no value for a sub-workflow rule's arguments (``"args":,``), read as null."""

from __future__ import annotations

import json
import re
from typing import Any

#: one escape: a backslash and the character after it (or ``u`` and four hex digits)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_JSON_ESCAPES = frozenset('"\\/bfnrt')


def _repaired(m: re.Match[str]) -> str:
    c = m.group(1)
    if c == "'":
        return "'"
    if len(c) == 5 or c in _JSON_ESCAPES:
        return m.group(0)
    return "\\\\" + c


#: a key written with no value: ``"args":,`` or ``"args":}`` (the quote before it not escaped)
_NO_VALUE = re.compile(r'(?<!\\)":(\s*)(?=[,}])')


def loads(text: str) -> Any:
    """``json.loads``, forgiving CCTools' escapes and empty values (see the module)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    repaired = _ESCAPE.sub(_repaired, text)
    try:
        return json.loads(repaired)
    except json.JSONDecodeError:
        return json.loads(_NO_VALUE.sub(r'":\1null', repaired))
