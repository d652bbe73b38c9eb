"""One worker pool for every place workers run: the state machine behind the controller.

The controller speaks to a :class:`~hta.backends.base.WorkerBackend`; for real workers
that is a :class:`WorkerPool` over a :class:`~hta.backends.provider.Provider` (local
processes, Kubernetes pods, Slurm jobs, or a user's own). In Dask's words the pool keeps
*requested* (launched, not yet seen by the master) and *observed* (connected) workers; the
policy keeps the *plan*. Each worker goes::

    PENDING ──(the master lists it)──► CONNECTED ──(drained, removed)──► STOPPING ──► GONE
       │                                   │
       └──(its job ended: failed)──► GONE  └──(its job ended, or the master dropped it: lost)──► GONE

- **Matching.** A launch becomes a connected worker when the master lists the address
  (or host name) its provider reports for it.
- **Start failures.** A job that ends before its worker connects is ``failed``; launches
  back off (1, 2, 4… s) and after :data:`MAX_START_FAILURES` in a row the run ends with the
  provider's line (``fatal``) instead of launching forever. With a ``start_timeout_s``,
  the run also ends when no worker is connected and every worker asked for has been stuck
  (or every launch has failed) that long.
- **Drops and lost work.** A connected worker the master has not listed for
  :data:`DROPPED_AFTER_S` while its job runs was dropped by the master's keepalive (stalled,
  or its node went away): it is ``lost``, cancelled at once, and replaced if the policy
  still wants one. A worker lost or removed takes its running tasks with it; the master runs
  them again, and the work they had done is counted (``lost_work_core_s``).
- **Draining.** Only workers the master shows idle are stopped; busy ones are skipped.
- **Time limits.** A worker whose job ends at a time limit takes no task it cannot finish
  (:mod:`hta.node.last_call`); one that leaves so is ``drained``. A task cut at the limit
  although it started with its worker, on a job as long as any HTA may ask for, can never
  fit: that is said once, and after ``max_task_losses`` such cuts the run ends with one line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from hta.backends.base import WorkerBackend
from hta.backends.provider import JobState, JobStatus, Provider
from hta.model import PendingWorker, Resources
from hta.node.last_call import MARGIN, STOP_BEFORE_S
from hta.plural import span
from hta.scaling_log import WorkerRecord
from workqueue_bridge.snapshot import MasterSnapshot
from workqueue_bridge.status_json import WorkerStatus
from workqueue_bridge.task_table import snapshot_running

log = logging.getLogger("hta.pool")

#: workers in a row that ended before connecting, before the run is given up
MAX_START_FAILURES = 5
#: a connected worker the master has not listed for this long, while its job runs, was dropped
DROPPED_AFTER_S = 3.0
#: the longest back-off between launches after start failures
MAX_BACKOFF_S = 30.0
#: how long a connected record waits for its provider to learn its phases (a watch's lag)
PHASES_WAIT_S = 10.0

#: task id → (Unix time it started, cores it holds, its category), as the master last showed it
TaskClock = dict[int, tuple[float, float, str]]
#: tasks cut at a time limit this many times (each on a job as long as HTA may ask for)
#: end the run: they can never fit
MAX_TASK_LOSSES = 2
#: a task that started this long (or a tenth of the job) after its worker connected did not
#: have the whole job: a cut then says nothing of whether it can fit
WHOLE_JOB_GRACE_S = 30.0


class WorkerState(Enum):
    PENDING = "pending"
    CONNECTED = "connected"
    STOPPING = "stopping"
    GONE = "gone"


@dataclass
class Worker:
    """What the pool keeps of one worker it launched or adopted."""

    id: str
    shape: Resources
    #: controller time (seconds since the run's epoch)
    requested_at: float
    adopted: bool = False
    state: WorkerState = WorkerState.PENDING
    address: str | None = None
    node: str | None = None
    connected_at: float | None = None
    #: the tasks the master last showed running on it, and since when it has not listed it
    tasks: TaskClock = field(default_factory=dict)
    missing_since: float | None = None
    #: when its job must end (Unix), where it has a time limit
    ends_at: float | None = None
    #: while it cannot start by itself: (kind, why) and since when (Unix)
    stuck: tuple[str, str] | None = None
    stuck_since: float | None = None
    #: while pending: when its job began running (controller time; its worker still starting
    #: and connecting), where the provider tells
    started_at: float | None = None
    #: its "connected" record, held until its provider knows the phases, and until when (Unix)
    held: WorkerRecord | None = None
    hold_until: float = 0.0


def running_by_worker(snap: MasterSnapshot) -> dict[str, TaskClock]:
    """The running tasks of each worker the master lists, by its address. A task that
    declared nothing holds its whole worker's cores."""
    listed = {w.address: w for w in snap.workers}
    out: dict[str, TaskClock] = {}
    for t in snapshot_running(snap):  # not every task: a master may hold 100k waiting ones
        w = listed.get(t.worker or "")
        if w is not None:
            start = snap.taken_at if t.started_at is None else t.started_at
            out.setdefault(w.address, {})[t.task_id] = (start, t.cores or w.cores, t.category)
    return out


class WorkerPool(WorkerBackend):
    """The controller's backend over one provider; see the module."""

    def __init__(self, provider: Provider, epoch: float, max_start_failures: int = MAX_START_FAILURES,
                 dropped_after_s: float = DROPPED_AFTER_S, phases_wait_s: float = PHASES_WAIT_S,
                 max_task_losses: int = MAX_TASK_LOSSES):
        self.provider = provider
        self.name = provider.name
        self.epoch = epoch
        self.max_start_failures = max_start_failures
        self.dropped_after_s = dropped_after_s
        self.phases_wait_s = phases_wait_s
        self.max_task_losses = max_task_losses
        #: category → tasks of it cut at a time limit they could never fit in
        self.cut: dict[str, int] = {}
        #: a task was cut at a time limit shorter than the longest HTA may ask for: jobs ask
        #: for the longest from then on (:meth:`ask_job_time`)
        self.cut_short = False
        self.workers: dict[str, Worker] = {}
        #: workers in a row that ended before connecting (reset when one connects)
        self.start_failures = 0
        self._fatal: str | None = None
        self._events: list[WorkerRecord] = []
        self._said: set[str] = set()
        #: since when every launch has raised (None: the last one worked), and its error
        self._launch_failing_since: float | None = None
        self._launch_error = ""

    # -- what the controller reads -----------------------------------------------------
    @property
    def signals(self) -> frozenset[str]:  # type: ignore[override]
        return self.provider.signals

    @property
    def signals_why(self) -> str:  # type: ignore[override]
        return self.provider.signals_why

    @property
    def default_port(self) -> int:  # type: ignore[override]
        return self.provider.default_port

    @property
    def fatal(self) -> str | None:
        return self._fatal or self.provider.fatal

    def _in(self, *states: WorkerState) -> list[Worker]:
        return [w for w in self.workers.values() if w.state in states]

    def worker_ids(self) -> dict[str, str]:
        return {w.address: w.id for w in self._in(WorkerState.CONNECTED) if w.address}

    def retired(self) -> set[str]:
        return {w.address for w in self._in(WorkerState.STOPPING, WorkerState.GONE) if w.address}

    def pending(self) -> list[PendingWorker]:
        return [PendingWorker(id=w.id, requested_at=w.requested_at, shape=w.shape, started_at=w.started_at)
                for w in self._in(WorkerState.PENDING)]

    def worker_nodes(self) -> dict[str, str]:
        return {w.id: w.node for w in self.workers.values() if w.state is WorkerState.CONNECTED and w.node}

    def node_hold_s(self) -> float | None:
        return self.provider.node_hold_s()

    def holding_back(self) -> str | None:
        return self.provider.holding_back()

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        return self.provider.task_peak_memory_mb(task_id)

    def job_ceiling(self) -> tuple[float, str] | None:
        return self.provider.job_ceiling()

    def worker_ends(self) -> dict[str, float]:
        """Each worker's last call as the controller's learning puts it (the worker's own
        may come earlier, from a longer task it ran); none for a worker whose call would come
        before it connected: no task of the expected length fits its job, so it closes never."""
        expected = STOP_BEFORE_S + self.provider.expected_task_s * MARGIN
        out = {}
        for w in self._in(WorkerState.CONNECTED):
            if w.ends_at is not None and w.connected_at is not None:
                call = w.ends_at - self.epoch - expected
                if call > w.connected_at:
                    out[w.id] = call
        return out

    def configure_shape(self, shape: Resources) -> None:
        self.provider.worker_shape = shape

    def ask_job_time(self, seconds: float | None) -> None:
        ceiling = self.job_ceiling()
        if self.cut_short and ceiling is not None:  # a task outlived a shorter job: ask for the longest
            seconds = ceiling[0]
        self.provider.job_time_s = seconds

    def expect_tasks(self, runtimes_s: dict[str, float]) -> None:
        self.provider.expected_task_s = max(runtimes_s.values(), default=0.0)
        ceiling = self.job_ceiling()
        if ceiling is None:
            return
        for category, s in sorted(runtimes_s.items()):
            if s > ceiling[0]:
                self._say_once(f"tasks of category {category} have run {span(s)}, longer than the longest job HTA "
                               f"may ask for ({ceiling[1]}): they cannot fit, and the run ends after "
                               f"{self.max_task_losses} are cut at the limit")

    async def cpu_utilization(self) -> dict[str, float] | None:
        return await self.provider.cpu_utilization({w.id: w.shape.cores for w in self._in(WorkerState.CONNECTED)})

    def backoff_s(self) -> float:
        """Extra wait before a launch after workers failed to start: 1, 2, 4… s."""
        return min(MAX_BACKOFF_S, 2.0 ** (self.start_failures - 1)) if self.start_failures else 0.0

    # -- records ----------------------------------------------------------------------
    def _record(self, t: float, w: Worker, event: str, **extra) -> WorkerRecord:
        self._announce(w)
        rec = WorkerRecord(t=round(t, 3), worker=w.id, event=event, cores=w.shape.cores or None, **extra)
        self._events.append(rec)
        return rec

    def _flush(self) -> list[WorkerRecord]:
        out, self._events = self._events, []
        return out

    def _announce(self, w: Worker) -> None:
        """Emit ``w``'s held "connected" record, with the phases its provider knows by now."""
        rec, w.held = w.held, None
        if rec is None:
            return
        if not w.adopted and w.connected_at is not None:
            try:
                rec.phases = self.provider.phases(w.id, self.epoch + w.requested_at, self.epoch + w.connected_at)
            except Exception as exc:  # noqa: BLE001 — a provider's bug costs the phases, not the record
                log.warning("%s: the phases of %s: %s", self.name, w.id, exc)
        rec.node = w.node
        self._events.append(rec)

    def _give_up(self, line: str) -> None:
        if self._fatal is None:
            self._fatal = line
            log.info("%s", line)  # the run ends with this line

    def _say_once(self, line: str) -> None:
        key = re.sub(r"\d+", "N", line)  # "0/2 nodes" and "0/3 nodes" are one reason
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", line)

    # -- scale up -----------------------------------------------------------------------
    async def start(self, master_host: str, master_port: int) -> None:
        await self.provider.start(master_host, master_port)
        try:
            self._adopt(await self.provider.poll(None))
        except Exception as exc:  # noqa: BLE001 — a provider that cannot tell yet tells at the next refresh
            log.warning("%s: %s (adopting this run's workers later)", self.name, exc)
        adopted = [w.id for w in self.workers.values() if w.adopted]
        if adopted:
            log.info("adopted %d %ss of this run: %s", len(adopted), self.provider.noun, ", ".join(adopted))

    def _adopt(self, statuses: dict[str, JobStatus]) -> None:
        """Track the run's live workers this pool did not launch (a restarted HTA's): counted,
        never duplicated, stopped at the end."""
        for handle, st in statuses.items():
            if handle in self.workers or st.state is JobState.ENDED:
                continue
            requested = (st.created_at or time.time()) - self.epoch
            w = self.workers[handle] = Worker(handle, st.shape or Resources(), requested, adopted=True)
            self._record(max(requested, 0.0), w, "requested")

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        if self.fatal or n <= 0:
            return []
        try:
            handles = await self.provider.launch(shape, n, self.backoff_s())
        except Exception as exc:
            self._launch_error = str(exc)
            self._launch_failing_since = self._launch_failing_since or time.time()
            raise
        if handles:
            self._launch_failing_since = None
        for h in handles:
            self.workers[h] = w = Worker(h, shape, now)
            self._record(now, w, "requested")
        return handles

    # -- observation --------------------------------------------------------------------
    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        statuses = await self.provider.poll(snap)
        self._adopt(statuses)
        listed = {w.address: w for w in snap.workers}
        # found by hostname, a worker is one job's, not every job's on its host (pods on a node's
        # network share one): which of them is which job's cannot be told, but two jobs never
        # count one worker, so the cap still counts the job whose worker has not come yet
        taken = {w.address for w in self._in(WorkerState.CONNECTED, WorkerState.STOPPING) if w.address}
        by_host: dict[str, list[WorkerStatus]] = {}
        for ws in snap.workers:
            if ws.address not in taken:
                by_host.setdefault(ws.hostname, []).append(ws)
        running = running_by_worker(snap)
        unix = time.time()
        dropped: list[Worker] = []
        for w in list(self.workers.values()):
            st = statuses.get(w.id)
            if st is not None and st.state is JobState.ENDING:
                continue  # why it ended comes next
            if st is not None and w.state is WorkerState.PENDING:
                seen = listed.get(st.address or "") or next((by_host[h][0] for h in st.hostnames if by_host.get(h)),
                                                            None)
                if seen is not None and st.state is not JobState.ENDED:
                    self._connected(w, seen, st, now)
                    if seen in by_host.get(seen.hostname, ()):
                        by_host[seen.hostname].remove(seen)
                elif st.state is JobState.ENDED:
                    self._start_failed(w, st, now)
                else:
                    if st.state is JobState.RUNNING and st.running_since is not None:
                        w.started_at = st.running_since - self.epoch
                    self._check_stuck(w, st, unix)
            if w.state is WorkerState.CONNECTED:
                w.node = (st.node if st else None) or w.node  # (a watch that lagged may tell it only now)
                w.ends_at = (st.ends_at if st else None) or w.ends_at
                if st is not None and st.state is JobState.ENDED and st.left:
                    self._left(w, now, st)
                elif st is not None and st.state is JobState.ENDED:
                    self._lost(w, now, snap.taken_at, st.why, st.cause, st.limit_s)
                elif w.address in listed:
                    w.missing_since, w.tasks = None, running.get(w.address or "", {})
                elif st is not None and st.address and st.address in listed:
                    w.address = st.address  # its worker reconnected (a restarted master)
                elif st is not None and self._dropped(w, snap.taken_at):
                    self._lost(w, now, w.missing_since or snap.taken_at,
                               f"stopped answering the master while its {self.provider.job} still ran (stalled, "
                               f"or its node went away): stopped and replaced")
                    dropped.append(w)
            if w.held is not None and (st is None or st.settled or time.time() >= w.hold_until):
                self._announce(w)
        if dropped:
            await self._kill(dropped)
        self._check_blocked(unix)
        return self._flush()

    def _connected(self, w: Worker, seen: WorkerStatus, st: JobStatus, now: float) -> None:
        w.state, w.address, w.connected_at, w.node = WorkerState.CONNECTED, seen.address, now, st.node
        self.start_failures, w.stuck, w.stuck_since = 0, None, None
        if not w.shape.cores or not w.shape.disk_mb:  # adopted: what its worker advertises
            w.shape = Resources(cores=seen.cores, memory_mb=seen.memory_mb, disk_mb=seen.disk_mb)
        w.held = WorkerRecord(t=round(now, 3), worker=w.id, event="connected", cores=seen.cores,
                              latency_s=None if w.adopted else round(now - w.requested_at, 3))
        w.hold_until = time.time() + self.phases_wait_s
        if st.settled or w.adopted:
            self._announce(w)

    async def _kill(self, workers: list[Worker]) -> None:
        """Stop workers the master gave up on; what cannot be stopped now is stopped at the end."""
        try:
            failed = await self.provider.kill([w.id for w in workers])
        except Exception as exc:  # noqa: BLE001
            failed = {w.id: str(exc) for w in workers}
        for handle, why in failed.items():
            log.warning("could not stop %s %s: %s (stopped at the end)", self.provider.noun, handle, why)

    def _dropped(self, w: Worker, taken_at: float) -> bool:
        if w.missing_since is None:
            w.missing_since = taken_at
        return taken_at - w.missing_since >= self.dropped_after_s

    def _ended(self, w: Worker, now: float, event: str, at: float, why: str = "",
               cause: str | None = None) -> WorkerRecord:
        """``w`` went away while connected (``lost``, ``removed``): its last known tasks go with
        it, and the work they had done by ``at`` (Unix). The tasks come from the last task table
        read, which on a large moving queue may be a read budget old: a report's estimate."""
        tasks = w.tasks
        core_s = sum(max(0.0, at - started) * c for started, c, _ in tasks.values())
        rec = self._record(now, w, event, tasks_lost=len(tasks), lost_work_core_s=round(core_s, 3), reason=why,
                           cause=cause if tasks else None)
        w.tasks, w.state = {}, WorkerState.GONE
        return rec

    def _left(self, w: Worker, now: float, st: JobStatus) -> None:
        """``w`` left at its last call: a drain; the tasks it held back run again elsewhere,
        and their slots' time is lost work (at the cores the master showed its tasks holding)."""
        cores = [c for _, c, _ in w.tasks.values()] or [w.shape.cores or 1.0]
        self._record(now, w, "drained", reason=st.why, tasks_lost=st.held_back,
                     lost_work_core_s=round(st.held_s * sum(cores) / len(cores), 3),
                     cause="held at a last call" if st.held_back else None)
        w.tasks, w.state = {}, WorkerState.GONE

    def _lost(self, w: Worker, now: float, at: float, why: str, cause: str | None = None,
              limit_s: float | None = None) -> None:
        tasks = dict(w.tasks)
        rec = self._ended(w, now, "lost", at, why, cause)
        if rec.tasks_lost:
            log.warning("%s %s went away with %d running task(s) (%s): the master runs them again",
                        self.provider.noun, w.id, rec.tasks_lost, why)
        if cause == "time limit" and w.connected_at is not None:
            self._cut_at_limit(tasks, self.epoch + w.connected_at, at, limit_s)

    def _cut_at_limit(self, tasks: TaskClock, began: float, at: float, limit_s: float | None) -> None:
        """Tasks cut at their job's time limit: those that had the whole of a job as long as
        HTA may ask for can never fit (see the module)."""
        ceiling = self.job_ceiling()
        if ceiling is None:
            return
        if limit_s is not None and limit_s < ceiling[0] - 1.0:
            self.cut_short |= bool(tasks)  # a longer job may fit them (a --time below the ceiling, or lowered)
            return
        grace = max(WHOLE_JOB_GRACE_S, 0.1 * ceiling[0])
        whole: dict[str, float] = {}  # category → the longest its task ran (one loss per worker and category)
        for started, _, category in tasks.values():
            if started - began <= grace:
                whole[category] = max(whole.get(category, 0.0), at - started)
        for category, seconds in sorted(whole.items()):
            n = self.cut[category] = self.cut.get(category, 0) + 1
            ran = span(max(0.0, seconds))
            if n >= self.max_task_losses:
                self._give_up(f"tasks of category {category} cannot fit in the longest job HTA may ask for "
                              f"({ceiling[1]}): {n} ran from their worker's start until the limit cut them (the "
                              f"last after {ran}); raise the limit (--time-limit, or a partition or QOS that allows "
                              f"more), or split the rule's work (--max-task-losses {self.max_task_losses} ended the "
                              f"run: raise it to try more)")
            else:
                self._say_once(f"a task of category {category} ran {ran}, from its worker's start until the time "
                               f"limit ({ceiling[1]}) cut it: it may not fit in any job HTA may ask for; the run "
                               f"ends once {self.max_task_losses} of its tasks are cut this way")

    def _start_failed(self, w: Worker, st: JobStatus, now: float) -> None:
        w.state = WorkerState.GONE
        self._record(now, w, "failed", reason=st.why)
        if not st.failed:  # deleted from outside: no fault of the workers'
            return
        self.start_failures += 1
        if self.start_failures >= self.max_start_failures:
            self._give_up(self.provider.cannot_start(self.start_failures, w.id, st.why))
        elif self.start_failures in (1, self.max_start_failures - 1):
            log.warning("%s %s ended before its worker connected: %s; next launches back off", self.provider.noun,
                        w.id, st.why)

    # -- workers that cannot start ------------------------------------------------------------
    def _check_stuck(self, w: Worker, st: JobStatus, unix: float) -> None:
        stuck, since = st.stuck, st.stuck_since
        if stuck is None and st.state is JobState.RUNNING and st.running_since is not None \
                and self.provider.start_timeout_s is not None and unix - st.running_since >= self.provider.stuck_after_s:
            stuck, since = ("unreachable", f"running for {unix - st.running_since:.0f}s without its worker "
                                           f"connecting"), st.running_since
        if stuck is None:
            w.stuck, w.stuck_since = None, None
            return
        self._say_once(f"{self.provider.noun} {w.id} {self.provider.stuck_line(*stuck, fatal=False)}")
        w.stuck, w.stuck_since = stuck, w.stuck_since or since or unix

    def _check_blocked(self, unix: float) -> None:
        """``fatal`` when no worker is connected and, for the provider's ``start_timeout_s``,
        every launch has failed or every worker asked for has been stuck."""
        timeout = self.provider.start_timeout_s
        if self.fatal or timeout is None or self._in(WorkerState.CONNECTED):
            return
        failing = self._launch_failing_since
        if failing is not None and unix - failing >= timeout:
            self._give_up(f"no {self.provider.noun} could be {self.provider.launched} for {unix - failing:.0f}s and "
                          f"no worker is connected; the last error: {self._launch_error}")
            return
        live = self._in(WorkerState.PENDING)
        if not live or any(w.stuck_since is None for w in live):
            return
        w = max(live, key=lambda x: x.stuck_since or 0.0)
        if w.stuck is not None and unix - (w.stuck_since or unix) >= timeout:
            self._give_up(self.provider.stuck_line(*w.stuck, fatal=True))

    # -- scale down -----------------------------------------------------------------------
    async def _stop(self, picked: list[Worker], force: bool, record: Callable[[Worker], object]) -> None:
        """Stop ``picked`` and ``record`` each one stopped. A worker its provider could not stop
        keeps its state (the next decision tries again); the first error is raised after."""
        prior = {w.id: w.state for w in picked}
        for w in picked:
            w.state = WorkerState.STOPPING
        try:
            failed = await self.provider.cancel([w.id for w in picked], force=force) if picked else {}
        except BaseException:
            for w in picked:
                w.state = prior[w.id]
            raise
        for w in picked:
            if w.id in failed:
                w.state = prior[w.id]
            else:
                record(w)
        if failed:
            raise RuntimeError(next(iter(failed.values())))

    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.address for w in snap.workers if w.tasks_running > 0}
        picked = [w for w in (self.workers.get(i) for i in ids)
                  if w is not None and w.state is WorkerState.CONNECTED and w.address not in busy]

        def drained(w: Worker) -> None:
            self._record(now, w, "drained")
            w.state = WorkerState.GONE

        await self._stop(picked, False, drained)
        return self._flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        picked = [w for w in (self.workers.get(i) for i in ids)
                  if w is not None and w.state in (WorkerState.PENDING, WorkerState.CONNECTED)]
        await self._stop(picked, True, lambda w: self._ended(w, now, "removed", snap.taken_at))
        return self._flush()

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        """Stop every worker of the run (the provider's, not only the ones tracked) and leave
        nothing running; each worker still there is ``stopped``."""
        for w in self._in(WorkerState.PENDING):  # connected and done between two looks (a short run)
            if self.provider.seen_connected(w.id):
                self._record(now, w, "connected", reason="seen in its log only: the run ended before the next look")
        try:
            await self.provider.stop_all()
        except Exception as exc:  # noqa: BLE001 — a provider's bug: the run still ends, and says so
            log.warning("%s: stopping every worker failed (%s): check that none is left running", self.name, exc)
        for w in self.workers.values():
            self._announce(w)
            if w.state is not WorkerState.GONE:
                self._record(now, w, "stopped")
                w.state = WorkerState.GONE
        return self._flush()
