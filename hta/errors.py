"""Errors a user can fix: one line that names the problem and the fix."""

from __future__ import annotations

#: exit code for bad input (as argparse uses)
EXIT_USAGE = 2


class UsageError(ValueError):
    """Bad input: the CLI prints ``hta: error: <message>`` and exits with :data:`EXIT_USAGE`."""
