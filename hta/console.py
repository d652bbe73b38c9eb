"""The terminal console every command prints through."""

from __future__ import annotations

from rich.console import Console


class PipeConsole(Console):
    """A rich console for which a reader that leaves (``hta report … | head``) is a
    :class:`BrokenPipeError`, not rich's ``SystemExit(1)``: ``hta`` then ends as shell tools
    do (141), and ``hta makeflow`` still exits with its workflow's result."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError()
