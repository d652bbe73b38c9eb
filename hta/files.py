"""What kind of file a path is, before HTA reads one a user named.

A named pipe would be read until some writer comes and goes (forever, if none
does), and a device such as ``/dev/zero`` never ends: both are refused before
they are opened. A pipe a shell made (``<(zcat run.jsonl.gz)``, ``/dev/stdin``
fed by ``|``) has its writer already and is read as a file is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def unreadable_kind(path: Path) -> str | None:
    """What ``path`` is if HTA must not read it ("a named pipe", "a character device", …);
    None for a regular file, a shell's pipe, a folder or a path that is not there (the
    caller's own messages say what is wrong with those)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode) and "pipe:[" in os.path.realpath(path):  # (/dev/fd/N of an anonymous pipe)
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")
