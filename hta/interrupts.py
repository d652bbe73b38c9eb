"""SIGINT/SIGTERM while ``hta makeflow`` starts, kept where no handler can lose them.

Until the run installs the event loop's own handlers, a signal must end HTA with a line
and 128 + N, so :func:`raise_on_signals` installs a handler that raises
:class:`Interrupted`. Python runs a signal's handler wherever the main thread happens to
be, and some places swallow what it raises: a ``__del__`` or a weakref callback ("Exception
ignored in …"), or asyncio's ``Handle._run`` around a callback ("Exception in callback
…"). A signal swallowed there was lost, and the run went on to the workflow's end with
exit 0 (CI saw it once in about 5,000 runs). So the handler also writes the signal down
before it raises, and the run, once its own handlers are in place, asks
:func:`take_received` whether one came (and stops as if it had come just then). Where it was
swallowed Python would have printed a traceback; :func:`raise_on_signals` and
:func:`quiet_in_loop` keep those two places quiet about it (and only about it).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterable
from typing import Any

#: signals the raising handler took and nobody has acted on yet (first first)
_received: list[int] = []


class Interrupted(BaseException):
    """A signal came while HTA was starting (a BaseException, like KeyboardInterrupt:
    nothing that catches ``Exception`` may keep it from ending HTA)."""

    @property
    def signum(self) -> int:
        return self.args[0]


def _raise(signum: int, _frame: object) -> None:
    _received.append(signum)
    raise Interrupted(signum)


def raise_on_signals(signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """From now on each of ``signals`` raises :class:`Interrupted` (and is written down); one
    raised where Python can only ignore it ("Exception ignored in …") is not printed."""
    _received.clear()
    if not getattr(sys.unraisablehook, "_hta_quiet", False):
        sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)
    for s in signals:
        signal.signal(s, _raise)


def _quiet_unraisable(previous: Any) -> Any:
    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous(unraisable)

    hook._hta_quiet = True  # type: ignore[attr-defined]
    return hook


def quiet_in_loop(loop: asyncio.AbstractEventLoop) -> None:
    """``loop`` says nothing of an :class:`Interrupted` that a callback swallowed (it logged
    "Exception in callback Task.__step()" and the exception's traceback)."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), Interrupted):
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def take_received() -> int | None:
    """The first signal the raising handler took since :func:`raise_on_signals`, or None;
    forgotten once taken (whoever takes it acts on it)."""
    if not _received:
        return None
    first = _received[0]
    _received.clear()
    return first
