"""What CCTools tools print when they fail."""

from __future__ import annotations

import re

_FATAL = re.compile(r"^(?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+ )?\S+\[\d+\] fatal: (?:\S+: )?(.*)$")


def one_line_error(text: str) -> str | None:
    """A cctools tool's ``fatal:`` message (the last one, with the lines that continue it) on
    one line, without its timestamp and process prefix; None if there is none."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        m = _FATAL.match(lines[i])
        if m:
            return " ".join([m.group(1).strip(), *lines[i + 1:i + 3]]).strip()
    return None
