"""A SIGINT/SIGTERM whose handler ran where Python swallows what it raises is still acted on,
and nothing is printed about the swallowing."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

import pytest

from hta import interrupts


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    sys.unraisablehook = hook
    interrupts.take_received()


class RaisesSigtermWhenCollected:
    def __del__(self):
        signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside __del__


def test_a_signal_swallowed_by_a_finaliser_is_kept_and_not_printed(handlers, monkeypatch):
    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    interrupts.raise_on_signals()
    obj = RaisesSigtermWhenCollected()
    del obj  # "Exception ignored in …": the Interrupted goes no further
    gc.collect()
    assert printed == []
    assert interrupts.take_received() == signal.SIGTERM
    assert interrupts.take_received() is None  # taken once


def test_other_unraisable_exceptions_are_still_printed(handlers, monkeypatch):
    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    interrupts.raise_on_signals()

    class Fails:
        def __del__(self):
            raise RuntimeError("boom")

    Fails()
    gc.collect()
    assert [type(u.exc_value) for u in printed] == [RuntimeError]


def test_a_signal_swallowed_by_an_event_loop_callback_is_kept_and_not_logged(handlers, caplog):
    interrupts.raise_on_signals()
    with asyncio.Runner() as runner:
        interrupts.quiet_in_loop(runner.get_loop())

        async def main():
            asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)
            await asyncio.sleep(0.05)
            return "ran on"

        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            assert runner.run(main()) == "ran on"
    assert not [r for r in caplog.records if r.name == "asyncio"]
    assert interrupts.take_received() == signal.SIGINT


def test_other_callback_exceptions_are_still_logged(handlers, caplog):
    with asyncio.Runner() as runner:
        interrupts.quiet_in_loop(runner.get_loop())

        def fails():
            raise RuntimeError("boom")

        async def main():
            asyncio.get_running_loop().call_soon(fails)
            await asyncio.sleep(0.05)

        with caplog.at_level(logging.ERROR, logger="asyncio"):
            runner.run(main())
    assert any("Exception in callback" in r.getMessage() for r in caplog.records)


def test_a_raising_handler_that_is_not_swallowed_ends_the_code_it_interrupts(handlers):
    interrupts.raise_on_signals()
    with pytest.raises(interrupts.Interrupted) as exc:
        signal.raise_signal(signal.SIGTERM)
    assert exc.value.signum == signal.SIGTERM


def test_once_held_a_signal_does_nothing_and_what_came_before_is_forgotten(handlers):
    interrupts.raise_on_signals()
    with pytest.raises(interrupts.Interrupted):
        signal.raise_signal(signal.SIGTERM)
    assert interrupts.raising(signal.getsignal(signal.SIGTERM))
    interrupts.hold_signals()
    signal.raise_signal(signal.SIGTERM)  # taken, and nothing more
    signal.raise_signal(signal.SIGINT)
    assert interrupts.take_received() is None  # the one acted on above is not there to stop a later run
    assert not interrupts.raising(signal.getsignal(signal.SIGTERM))
