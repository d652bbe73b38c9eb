"""SIGINT/SIGTERM around an ``hta makeflow`` run, kept where no handler can lose them.

The contract, in three phases:

1. **Starting** (:func:`raise_on_signals`): a signal raises :class:`Interrupted`, which
   ends HTA with one line and 128 + N.
2. **Running** (the run's event loop handlers, :func:`hta.submit.run.submit`): a signal
   stops makeflow and the workers, and the run ends with 128 + N.
3. **Ended** (:func:`hold_signals`): the run's outcome is decided; a signal changes
   nothing, and HTA prints that outcome and exits with it.

Python runs a signal's handler wherever the main thread happens to be, and some places
swallow what it raises: a ``__del__`` or a weakref callback ("Exception ignored in …"),
or asyncio's ``Handle._run`` around a callback ("Exception in callback …"). A signal
swallowed there in phase 1 was lost, and the run went on to the workflow's end with exit
0 (CI saw it once in about 5,000 runs). So the raising handler also writes the signal
down, and the run, once its own handlers are in place, asks :func:`take_received` whether
one came (and stops as if it had come just then). Where it was swallowed Python would
have printed a traceback; :func:`raise_on_signals` and :func:`quiet_in_loop` keep those
two places quiet about it (and only about it).

SIGHUP does not stop a run: it asks it to read its config file again
(:mod:`hta.submit.reload`). Its default action would end HTA, so from the start
(:func:`note_hangups`) a handler writes it down and does nothing else; the run, once its own
handler is in place, asks :func:`take_hangup` whether one came meanwhile (and reads the file
again then: a SIGHUP sent while HTA starts is not lost). Once the run has ended, a SIGHUP is
written down and never acted on. None of these handlers passes the signal on: workers and
makeflow run in sessions of their own and see no SIGHUP of HTA's (the local backend's
workers take a SIGHUP as their parent's death).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: signals the raising handler took since :func:`raise_on_signals`, oldest first, until
#: :func:`take_received` or :func:`hold_signals` forgets them
_received: list[int] = []


class Interrupted(BaseException):
    """A signal came before the run's own handlers took over, or after they gave the
    signals back (a BaseException, like KeyboardInterrupt: nothing that catches
    ``Exception`` may keep it from ending HTA)."""

    @property
    def signum(self) -> int:
        return self.args[0]


def _raise(signum: int, _frame: object) -> None:
    _received.append(signum)
    raise Interrupted(signum)


#: a SIGHUP came since :func:`note_hangups` and was not taken yet
_hangup = False


def _note_hangup(_signum: int, _frame: object) -> None:
    global _hangup
    _hangup = True


def note_hangups() -> None:
    """From now on a SIGHUP is written down (for :func:`take_hangup`), not HTA's end."""
    global _hangup
    _hangup = False
    signal.signal(signal.SIGHUP, _note_hangup)


def noting(handler: object) -> bool:
    """Whether ``handler`` is :func:`note_hangups`' (only then is its record this run's)."""
    return handler is _note_hangup


def take_hangup() -> bool:
    """Whether a SIGHUP came since :func:`note_hangups` (or the last call); forgotten once taken."""
    global _hangup
    came, _hangup = _hangup, False
    return came


def _hold(_signum: int, _frame: object) -> None:
    """Phase 3: the outcome is decided; there is nothing left to stop."""


def raise_on_signals(signals: Iterable[int] = SIGNALS) -> None:
    """Phase 1: each of ``signals`` raises :class:`Interrupted` (and is written down); one
    raised where Python can only ignore it ("Exception ignored in …") is not printed."""
    _received.clear()
    if not getattr(sys.unraisablehook, "_hta_quiet", False):
        sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)
    for s in signals:
        signal.signal(s, _raise)


def raising(handler: object) -> bool:
    """Whether ``handler`` is phase 1's (only then is the record this run's to act on)."""
    return handler is _raise


def hold_signals(signals: Iterable[int] = SIGNALS) -> None:
    """Phase 3: each of ``signals`` is taken and does nothing (a handler, not SIG_IGN,
    which a child would inherit); what phase 1 wrote down is forgotten."""
    for s in signals:
        signal.signal(s, _hold)
    _received.clear()


def take_received() -> int | None:
    """The first signal the raising handler took since :func:`raise_on_signals`, or None;
    forgotten once taken (whoever takes it acts on it)."""
    if not _received:
        return None
    first = _received[0]
    _received.clear()
    return first


def _quiet_unraisable(previous: Any) -> Any:
    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous(unraisable)

    hook._hta_quiet = True  # type: ignore[attr-defined]
    return hook


def quiet_in_loop(loop: asyncio.AbstractEventLoop) -> None:
    """``loop`` says nothing of an :class:`Interrupted` that a callback swallowed (it would
    log "Exception in callback …" and the exception's traceback)."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), Interrupted):
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
