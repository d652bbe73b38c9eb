"""Child processes HTA starts: how they die with HTA, and how they are stopped."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:  # pragma: no cover - runs in the child
    """``preexec_fn``: the child gets ``sig`` when HTA dies, even by SIGKILL."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


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
        except asyncio.TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
    return proc.returncode
