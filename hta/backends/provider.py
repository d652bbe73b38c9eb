"""What a place where workers run must say: how to launch, poll and cancel them.

A provider is as thin as Parsl's (``submit``, ``status``, ``cancel`` over one ``JobState``).
The :class:`~hta.backends.pool.WorkerPool` above it owns everything a worker's life has
in common wherever it runs: matching a launch to the worker that connects to the master,
the latency's phases, drops, lost work, start failures, drain-only-idle, the records::

    pool  ── launch(shape, n) ──►  provider  ──►  processes │ pods │ batch jobs │ yours
          ◄─ poll() → {handle: JobStatus} ──
          ── cancel(handles, force) ──►

A handle is the worker's id in every record (``w3``, ``hta-<run>-7``). ``poll`` reports
the provider's own view only: whether the job runs, and what it knows of its worker (the
address or host name the master will list it under, the node it sits on, when it must
end). Whether the worker is connected, idle or lost is the pool's to tell, from the master.

A handle ``poll`` reports that the pool never launched (a restarted HTA's pod or job) is
adopted. A handle missing from ``poll`` means no news this time; a provider says ENDED
when it knows a job is gone.

Built-in and user providers are found by name through the ``hta.backends`` entry point
group (:mod:`hta.backends`); docs/providers.md has a worked example.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hta.model import Resources
from workqueue_bridge.snapshot import MasterSnapshot

log = logging.getLogger("hta.backends")


class JobState(enum.Enum):
    """A launched worker's job, as its provider sees it."""

    #: asked for; not running yet (queued, being scheduled, its node provisioning)
    PENDING = "pending"
    #: its process, pod or job runs (its worker may or may not have reached the master)
    RUNNING = "running"
    #: ending: its final state (why it ended) comes next; the pool waits for it
    ENDING = "ending"
    #: gone, for whatever reason (:attr:`JobStatus.why`)
    ENDED = "ended"


@dataclass
class JobStatus:
    state: JobState
    #: the worker's connection as the master names it (``ip:port``), where the provider knows it
    address: str | None = None
    #: else the host names the master may list the worker under (a pod's name; on the host
    #: network, its node's)
    hostnames: tuple[str, ...] = ()
    #: the node it runs on (node-seconds are paid once per node)
    node: str | None = None
    #: since when (Unix) it runs: a job that runs this long without its worker connecting is stuck
    running_since: float | None = None
    #: (kind, why) it cannot start by itself (an unschedulable pod, an image not pulled), and since when
    stuck: tuple[str, str] | None = None
    stuck_since: float | None = None
    #: False while the provider has yet to learn when its latency's phases passed (a watch's lag)
    settled: bool = True
    #: ENDED: why, in the user's words; ``failed``: it failed by itself (counts as a start failure
    #: before it connects; a job deleted from outside does not)
    why: str = ""
    failed: bool = True
    #: ENDED while its worker was connected: what ended it, as lost work is reported by
    #: (``time limit``, ``preemption``, ``node failure``; None: anything else)
    cause: str | None = None
    #: ENDED: its worker left by itself with nothing to lose (its last call before its job's
    #: end, :mod:`hta.node.last_call`): a drain, not a loss; but for the tasks it held back,
    #: how many, and how long their slots were held (task·s)
    left: bool = False
    held_back: int = 0
    held_s: float = 0.0
    #: the job's time limit in seconds, where it has one
    limit_s: float | None = None
    #: RUNNING: when its job must end (Unix; a batch job's start plus its time limit)
    ends_at: float | None = None
    #: for a handle the pool adopts: when it was asked for (Unix) and its shape, where known
    created_at: float | None = None
    shape: Resources | None = None


class Provider(ABC):
    """Launch, poll and cancel workers; see the module. Only the first four methods are
    required; the rest have defaults that say "this provider cannot"."""

    name: str = "provider"
    #: how lines name one of its workers, what runs it, and what its launch is called
    noun: str = "worker"
    job: str = "process"
    launched: str = "launched"
    #: who must reach the master (for the line that says they cannot)
    reached_from: str = "the workers"
    #: the optional observation fields it fills (:data:`hta.backends.base.CPU_UTILIZATION`)
    signals: frozenset[str] = frozenset()
    signals_why: str = ""
    #: the master's port when the user names none (0: any free port)
    default_port: int = 0
    #: with no worker connected, a run whose every worker has been stuck this long ends (None: never)
    start_timeout_s: float | None = None
    #: a job that runs this long without its worker connecting is stuck
    stuck_after_s: float = 30.0
    #: set once no worker can ever start (a partition that does not exist): the run ends with it
    fatal: str | None = None
    #: the master's address, once :meth:`start` was called
    master: str = ""

    async def start(self, master_host: str, master_port: int) -> None:
        self.master = f"{master_host}:{master_port}"

    @abstractmethod
    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        """Ask for ``n`` workers of ``shape`` (``delay_s``: back off before starting them, after
        start failures); returns their handles at once. Raises with one line if none can be asked."""

    @abstractmethod
    async def poll(self, snap: MasterSnapshot | None) -> dict[str, JobStatus]:
        """What the provider knows of its jobs now (``snap``: the master's latest read, if any)."""

    @abstractmethod
    async def cancel(self, handles: list[str], force: bool = False) -> dict[str, str]:
        """Stop these workers (``force``: at once, tasks and all; else let an idle worker leave).
        Returns the handles it could not stop, with why; unknown or ended handles are no error."""

    async def kill(self, handles: list[str]) -> dict[str, str]:
        """Stop workers the master has given up on (stalled, or their node gone): no grace to give."""
        return await self.cancel(handles, force=True)

    @abstractmethod
    async def stop_all(self) -> None:
        """Stop every worker of the run, adopted ones and any not known yet; leave nothing running.
        Never raises: what it cannot stop, it names in one line with the command that would."""

    def phases(self, handle: str, requested: float, connected: float) -> dict[str, float]:
        """Where a worker's latency went (Unix times in, seconds out; :func:`in_order` helps)."""
        return {}

    def cannot_start(self, n: int, handle: str, why: str) -> str:
        """The line that ends the run after ``n`` workers in a row ended before connecting."""
        return f"{self.noun}s cannot start: {n} in a row ended before their worker connected; the last ({handle}): {why}"

    def stuck_line(self, kind: str, why: str, fatal: bool) -> str:
        """A stuck worker's warning (``fatal``: the line that ends the run); ``kind`` is the
        provider's own, or ``unreachable`` (it runs, its worker does not connect)."""
        if kind == "unreachable" and fatal:
            port = self.master.rsplit(":", 1)[-1]
            return (f"{self.noun}s run but no worker reached the master at {self.master} for "
                    f"{self.start_timeout_s:.0f}s; pass --master-host an address of this host {self.reached_from} "
                    f"can reach, and let port {port} through")
        if kind == "unreachable":
            return f"is {why} to the master at {self.master} (the run ends if no worker can start within " \
                   f"{self.start_timeout_s:.0f}s)"
        return f"cannot start: {why}"

    def seen_connected(self, handle: str) -> bool:
        """Whether a worker not yet seen connected did connect (a run that ended between two looks)."""
        return False

    async def cpu_utilization(self, cores: dict[str, float]) -> dict[str, float] | None:
        """Busy fraction of each connected worker's ``cores``, by handle; None if it cannot tell."""
        return None

    def node_hold_s(self) -> float | None:
        """How long a node stays once the run's last worker on it left, where the provider
        watches nodes (:meth:`hta.backends.base.WorkerBackend.node_hold_s`); None if it does not."""
        return None

    def holding_back(self) -> str | None:
        """Why the last launch gave fewer workers than asked (a quota), in a few words."""
        return None

    def job_ceiling(self) -> tuple[float, str] | None:
        """The longest a worker's job may live, and who says so in a user's words (``--time-limit
        1:00``, ``partition hta's MaxTime 3:00``); None where workers have no time limit."""
        return None

    #: the longest a task is expected to run, from what the controller learned (0: not known);
    #: a provider whose workers end at a time limit tells them (``hta worker --last-call``)
    expected_task_s: float = 0.0
    #: how long the next jobs should live, as the policy chose it (None: the provider's default)
    job_time_s: float | None = None
    #: the workers' shape as the user configured it (--worker-cores, --worker-memory), of which
    #: a launch may ask a part (HTA's learned worker shape); None: not told
    worker_shape: Resources | None = None

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        """The most memory the master's task ``task_id`` was seen using, if the provider samples tasks."""
        return None


def shape_words(cores: float, memory_mb: float, asked: Resources, configured: Resources | None) -> str:
    """The ``cores`` and ``memory_mb`` a job asks for a worker of ``asked``, and where they came
    from in the user's words: their --worker-cores and --worker-memory, or the part of them the
    policy cut (``21 cores, 341 MB (1/3 of --worker-cores 64 --worker-memory 1024, rounded down
    to whole cores and MB: …)``). Numbers a user never gave are not left unexplained."""
    said = f"{_number(cores)} core{'' if cores == 1 else 's'}, {_number(memory_mb)} MB"
    if configured is None:
        return said
    given = f"--worker-cores {_number(configured.cores)} --worker-memory {_number(configured.memory_mb)}"
    if abs(asked.cores - configured.cores) < 1e-9 and abs(asked.memory_mb - configured.memory_mb) < 1e-6:
        return f"{said} ({given})"
    share = asked.share_of(configured)
    if share >= 1.0:  # not an equal part: a shape of the policy's own
        return f"{said} (the policy's shape; {given} configured)"
    k = round(1 / share)
    part = configured.split(k)
    rounded = [(unit, told > exact) for unit, exact, told in (("cores", part.cores, cores),
                                                              ("MB", part.memory_mb, memory_mb))
               if abs(exact - told) > 1e-6]  # (a worker has at least 1 core: 2/3 of one is asked as 1)
    ups = {up for _, up in rounded}
    way = "" if len(ups) != 1 else " up" if True in ups else " down"
    whole = f", rounded{way} to whole {' and '.join(unit for unit, _ in rounded)}" if rounded else ""
    return f"{said} (1/{k} of {given}{whole}: the policy cut that shape in {k} for the tasks that wait)"


def _number(x: float) -> str:
    """``64.0`` → ``64``, ``2.5`` → ``2.5``: a setting as a person writes it."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def in_order(requested: float, connected: float, milestones: list[tuple[str, float | None]], last: str) -> dict:
    """Phases of a latency from the times its milestones passed: ``(phase, when it ended)`` in
    order, then ``last`` up to the connection. Clocks of another host, or of one-second
    resolution, may read a milestone early or late: each is clamped between the request and
    the next, so the phases never go negative and add up to the latency. A milestone not known
    (None) ends the list there, and ``last`` is left out."""
    known: list[tuple[str, float]] = []
    for name, t in milestones:
        if t is None:
            break
        known.append((name, t))
    complete = len(known) == len(milestones)
    bound, times = connected, []
    for _, t in reversed(known):
        bound = min(max(t, requested), bound)
        times.append(bound)
    times.reverse()
    out, prev = {}, requested
    for (name, _), t in zip(known, times):
        out[name] = round(max(0.0, t - prev), 3)
        prev = t
    if complete:
        out[last] = round(max(0.0, connected - prev), 3)
    return out


def launched(done: Sequence[object], noun: str) -> list[str]:
    """The handles of launches made at once (``asyncio.gather(..., return_exceptions=True)``;
    None: skipped). None launched and an error: it is raised, and the pool counts the launch
    as failing; some launched: the others' first error is said in one line."""
    handles = [d for d in done if isinstance(d, str)]
    errors = [d for d in done if isinstance(d, BaseException)]
    if errors and not handles:
        raise errors[0]
    if errors:
        log.warning("%d of %d %s(s) could not be launched: %s", len(errors), len(done), noun, errors[0])
    return handles


def run_id_for(workflow: Path) -> str:
    """A stable id for a workflow's runs: a restarted HTA finds (adopts) its pods or jobs."""
    return hashlib.sha1(str(Path(workflow).resolve()).encode()).hexdigest()[:10]


async def end_all(noun: str, live: Callable[[], Awaitable[list[str]]],
                  end: Callable[[list[str], bool], Awaitable[object]], stop_command: Callable[[list[str]], str], *,
                  timeout_s: float, force_after_s: float, force_words: str = "by force") -> None:
    """Stop every job of a run and wait until the system lists none (``live``: their ids as the
    system names them, adopted and unknown ones included), at most ``timeout_s``. What it waits
    for is said after 5 s; what is still there after ``force_after_s`` (its node may be gone) is
    stopped by force. A system that does not answer is asked again until the time is up; it,
    or jobs still there at the end, is then one line naming the command that stops them
    (``stop_command``); never an exception."""
    t0 = time.monotonic()
    said = forced = False
    left: list[str] = []

    async def listed() -> list[str]:
        nonlocal said
        while True:  # (a blip of the system, a restarted API server: asked again until the time is up)
            try:
                return await live()
            except Exception as exc:
                waited = time.monotonic() - t0
                if waited >= timeout_s:
                    raise
                if not said and waited >= 5.0:
                    said = True
                    log.warning("cannot list this run's %ss (%s): asking again for up to %.0fs", noun, exc, timeout_s)
                await asyncio.sleep(0.5)

    try:
        left = await listed()
        if left:
            await end(left, False)
        while left:
            waited = time.monotonic() - t0
            if waited >= timeout_s:
                log.warning("%d %s(s) still there after %.0fs: %s; stop them with: %s", len(left), noun, timeout_s,
                            " ".join(left[:8]) + (" ..." if len(left) > 8 else ""), stop_command(left))
                return
            if not said and waited >= 5.0:
                said = True
                log.warning("waiting for %d %s(s) to end: %s", len(left), noun,
                            " ".join(left[:8]) + (" ..." if len(left) > 8 else ""))
            if not forced and waited >= force_after_s:
                forced = True
                log.warning("%d %s(s) still ending after %.0fs (their node may be gone): stopping them %s", len(left),
                            noun, waited, force_words)
                await end(left, True)
            await asyncio.sleep(0.5)
            left = await listed()
    except Exception as exc:  # noqa: BLE001 — the system does not answer: say how to finish by hand
        log.warning("could not stop this run's %ss (%s): stop them with: %s", noun, exc, stop_command(left))
