"""The CCTools processes HTA starts (makeflow, work_queue_worker and the ``hta worker``
wrapping it): how they die with HTA, and how they are stopped."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when its parent dies, even by SIGKILL.

    The parent's pid is taken now, in the parent: if the parent died between
    ``fork`` and ``prctl`` the signal would never come, so the child checks and
    sends it to itself."""
    parent = os.getpid()

    def preexec() -> None:  # pragma: no cover - runs in the child
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
        except OSError:
            pass
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


async def stop(proc: asyncio.subprocess.Process, grace_s: float, signals: int = 1) -> int | None:
    """Send SIGTERM ``signals`` times; SIGKILL the process group after ``grace_s``."""
    if proc.returncode is None:
        try:
            for i in range(signals):
                if i:
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), grace_s)
        except ProcessLookupError:
            pass
        except TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
    return proc.returncode
