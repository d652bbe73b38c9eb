"""The run's folder beside the workflow (``WORKFLOW.hta``): its lock, its numbered scaling
logs and the link to the latest one.

Two runs of one workflow in one folder would run every task twice and write one log
together: the lock refuses the second.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import psutil

from hta.errors import UsageError
from hta.scaling_log import ScalingLogWriter


class RunLock:
    """One run of a workflow at a time in its folder: ``flock`` on ``WORKFLOW.hta/lock``
    (released by the kernel when the holder dies, even by SIGKILL; not inherited by children)."""

    def __init__(self, run_dir: Path, workflow: Path):
        self.path = run_dir / "lock"
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot create the run directory {run_dir} ({exc.strerror or exc}): run the workflow "
                             f"from a folder you can write to") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(self.fd, 64, 0).decode(errors="replace").split()
            except OSError:
                holder = []
            os.close(self.fd)
            self.fd = None
            who = f" (pid {holder[0]})" if holder and holder[0].isdigit() else ""
            raise UsageError(f"another hta run{who} is already running {workflow} in this folder: wait for it to "
                             f"end or stop it (two runs would run every task twice)") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the lock
            self.fd = None


def open_scaling_log(path: Path) -> ScalingLogWriter:
    """The scaling log, or one line that says why it cannot be written and what to do."""
    try:
        return ScalingLogWriter(path)
    except OSError as exc:
        raise UsageError(f"cannot write the scaling log {path} ({exc.strerror or exc}): "
                         f"choose another file with --log") from None


def set_aside(log: Path) -> Path | None:
    """A ``--log`` file that holds an earlier run's log is renamed ``LOG.1`` (``.2``, … the
    first free), so the new run starts a log of its own and the earlier one is kept (a log
    holds one run: ``hta report`` reads it so). Returns where it went, or None."""
    try:
        if not log.is_file() or log.stat().st_size == 0:
            return None
        n = 1
        while log.with_name(f"{log.name}.{n}").exists():
            n += 1
        kept = log.with_name(f"{log.name}.{n}")
        log.rename(kept)
    except OSError:
        return None  # (then opening it says what is wrong)
    return kept


def point_latest_at(latest: Path, log: Path) -> None:
    """Make ``latest`` a link to ``log`` (atomically: a reader sees one run or the other)."""
    try:
        tmp = latest.with_name(latest.name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(os.path.relpath(log, latest.parent))
        tmp.replace(latest)
    except OSError:
        pass  # the numbered log is what matters; the link is a convenience


def new_run_log(run_dir: Path, latest: Path) -> Path:
    """A fresh, numbered scaling log for this run (a second run never overwrites the first's),
    with ``latest`` pointing at it. Called under the run's lock."""
    runs = run_dir / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        if latest.is_file() and not latest.is_symlink():  # a log from before runs were numbered: keep it
            latest.rename(runs / "run-000.scaling.jsonl")
    except OSError as exc:
        raise UsageError(f"cannot keep the run's logs in {runs} ({exc.strerror or exc}): run the workflow from a "
                         f"folder you can write to, or give --log FILE") from None
    numbers = [int(p.name[4:7]) for p in runs.glob("run-[0-9][0-9][0-9]*.scaling.jsonl") if p.name[4:7].isdigit()]
    path = runs / f"run-{max(numbers, default=0) + 1:03d}.scaling.jsonl"
    point_latest_at(latest, path)
    return path


def other_makeflows(workdir: Path, workflow: Path) -> list[int]:
    """makeflow processes running ``workflow`` in ``workdir`` now (not HTA's own, which has not
    started yet when this is asked): makeflow 8.0 takes no lock, and a second makeflow on the
    same workflow writes the same log and outputs."""
    me = psutil.Process()
    ours = {me.pid, *(p.pid for p in me.parents())}  # (`makeflow -T hta` is named makeflow too)
    out = []
    for p in psutil.process_iter(["name", "cwd", "cmdline"]):
        try:
            if p.pid in ours or p.info["name"] != "makeflow" or p.info["cwd"] != str(workdir):
                continue
            args = p.info["cmdline"] or []
            if any(a == workflow.name or (a.endswith(workflow.name) and (workdir / a).resolve() == workflow)
                   for a in args[1:]):
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out
