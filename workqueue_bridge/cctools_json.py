"""JSON as CCTools writes it, which is not always JSON.

CCTools writes a task's command into its JSON (the master's ``/task_status``,
``makeflow_viz -D json``, the resource monitor's ``*.summary``) without escaping it
properly: a command holding a quote comes out as ``\\'`` and a lone backslash as
itself, and strict JSON refuses both. :func:`loads` parses the text as it is, and
only when that fails repairs those escapes (a stray backslash is kept as a
backslash, ``\\'`` becomes the quote it stood for) and parses again."""

from __future__ import annotations

import json
import re
from typing import Any

#: a backslash that starts no JSON escape
_BAD_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')


def loads(text: str) -> Any:
    """``json.loads``, forgiving CCTools' unescaped commands (see the module)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_BAD_ESCAPE.sub(r"\\\\", text).replace("\\\\'", "'"))
