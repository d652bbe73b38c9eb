"""The Slurm backend: each worker is a Slurm batch job (``sbatch``) running ``hta worker``.

Behind the same :class:`~hta.backends.base.WorkerBackend` contract as local processes and
Kubernetes pods; it speaks to Slurm only through its client commands
(:mod:`hta.backends.slurm.commands`).

- A worker job asks for one task of the worker's cores (``--cpus-per-task``) and memory
  (``--mem``) on one node, with the partition, account, QOS, time limit and extra
  ``sbatch`` arguments the user gave, ``--no-requeue`` (a worker that went away is
  replaced only if the policy still wants one). It is named ``hta-<run>-<n>`` and its
  comment starts ``hta.run=<run>``: a restarted HTA adopts the run's jobs, never
  duplicating them (the run id comes from the workflow's path, and so does the master's
  default port, so adopted workers find the new master).
- The job's wrapper (:mod:`hta.backends.slurm.job`) adds its worker's ``ip:port`` to the
  comment once it connected: that is how a worker of the master is matched to its job,
  even with several jobs on one node.
- Preparation latency = request → worker connected, split into ``pending`` (the queue:
  request → Slurm gave it a node), ``resume`` (a powered-down node booting: Slurm holds the
  job CONFIGURING until the node is ready) and ``start`` (the job's script began → its
  worker connected); ``node`` = pending + resume. The node it ran on is recorded, so jobs
  that share a node pay its node·s once.
- Scale down = drain: only jobs whose worker the master shows idle are cancelled
  (``scancel``). A job Slurm ended while its worker was connected (its time limit,
  preemption, its node failing, a ``scancel`` from outside) is ``lost`` with its tasks,
  which the master runs again; the reason says which.
- At the end, on SIGINT/SIGTERM or after a failure, every job of the run (adopted ones
  too) is cancelled and HTA waits until Slurm lists none of them as pending or running.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hta.backends.base import WorkerBackend
from hta.backends.lifecycle import Lifecycle, WorkerLife, running_by_worker
from hta.backends.local import hta_executable, last_words
from hta.backends.slurm.commands import (
    SQUEUE_FORMAT,
    SlurmError,
    SlurmJob,
    arun,
    batch_script,
    hint,
    parse_sbatch,
    parse_squeue,
    require,
    run,
    sbatch_argv,
)
from hta.model import PendingWorker, Resources
from hta.node.worker import worker_command
from hta.scaling_log import WorkerRecord
from workqueue_bridge.resources import whole_cores
from workqueue_bridge.snapshot import MasterSnapshot

log = logging.getLogger("hta.slurm")

#: no worker connected and every job that runs has run this long without its worker reaching
#: the master: the run ends (a firewall, a wrong --master-host). Queue waits never end a run:
#: on a busy cluster they are the latency HTA plans over.
START_TIMEOUT_S = 300.0
#: squeue is asked at most this often (a busy slurmctld is everyone's)
SQUEUE_EVERY_S = 1.0
#: a job just submitted that squeue does not list yet is not taken for gone before this
LIST_GRACE_S = 10.0
#: at the end: how long HTA waits for Slurm to list none of the run's jobs as pending or running
CANCEL_TIMEOUT_S = 60.0
#: a job COMPLETING is ending; its final state (why it ended) is waited for this long
COMPLETING_WAIT_S = 30.0
#: sbatch calls at once in one request
SUBMIT_CONCURRENCY = 4
#: Slurm states of a job that ended, in the user's words (for a ``lost`` worker)
ENDED_HOW = {
    "TIMEOUT": "Slurm ended its job at its time limit",
    "PREEMPTED": "its job was preempted",
    "NODE_FAIL": "its job's node failed",
    "BOOT_FAIL": "its job's node failed to boot",
    "CANCELLED": "its job was cancelled outside HTA",
    "OUT_OF_MEMORY": "its job went over its memory",
    "DEADLINE": "its job reached its deadline",
}


def run_id_for(workflow: Path) -> str:
    """A stable id for a workflow's runs (as the Kubernetes backend's): a restarted HTA finds its jobs."""
    return hashlib.sha1(str(Path(workflow).resolve()).encode()).hexdigest()[:10]


def port_for(run_id: str) -> int:
    """The master's default port: fixed for the workflow (adopted workers reconnect to it), and
    different for different workflows, so two runs on one login node do not collide."""
    return 9200 + int(hashlib.sha1(run_id.encode()).hexdigest()[:6], 16) % 700


@dataclass
class Job:
    """A worker job this run asked for (or adopted)."""

    name: str
    shape: Resources
    #: controller time (seconds since the run's epoch) it was asked for
    requested_at: float
    job_id: str
    state: str = "pending"  # pending | connected | cancelling | gone
    adopted: bool = False
    address: str | None = None
    node: str | None = None
    #: Unix times: Slurm gave it a node; its script began (Slurm's StartTime, reset after a node's boot)
    allocated_at: float | None = None
    began_at: float | None = None
    #: the last squeue line of the job, and when the backend last saw it listed (Unix time)
    last: SlurmJob | None = None
    seen_at: float | None = None
    #: when squeue first showed it COMPLETING (Unix time): its final state (TIMEOUT, PREEMPTED...) comes next
    completing_since: float | None = None
    life: WorkerLife = field(default_factory=WorkerLife)


class SlurmBackend(WorkerBackend):
    name = "slurm"

    def __init__(self, *, run_id: str, epoch: float, run_dir: Path, partition: str | None = None,
                 account: str | None = None, qos: str | None = None, time_limit: str | None = None,
                 sbatch_args: list[str] | None = None, master_host: str | None = None, idle_timeout_s: int = 900,
                 start_timeout_s: float | None = None, squeue_every_s: float = SQUEUE_EVERY_S,
                 cancel_timeout_s: float = CANCEL_TIMEOUT_S, css: bool = True):
        self.run_id = run_id
        self.epoch = epoch
        self.run_dir = Path(run_dir)
        self.partition, self.account, self.qos, self.time_limit = partition, account, qos, time_limit
        self.sbatch_args = list(sbatch_args or [])
        self.master_host = master_host
        self.idle_timeout_s = idle_timeout_s
        self.start_timeout_s = START_TIMEOUT_S if start_timeout_s is None else start_timeout_s
        self.squeue_every_s = squeue_every_s
        self.cancel_timeout_s = cancel_timeout_s
        self.css = css
        self.default_port = port_for(run_id)
        self.prefix = f"hta-{run_id}-"
        self.comment = f"hta.run={run_id}"
        self.lifecycle = Lifecycle()
        self._jobs: dict[str, Job] = {}
        self._seq = 0
        self._port = 0
        self._queue: dict[str, SlurmJob] = {}
        self._queue_at = float("-inf")
        self._said: set[str] = set()
        self._holding_back: str | None = None

    @property
    def fatal(self) -> str | None:
        return self.lifecycle.fatal

    @property
    def start_failures(self) -> int:
        return self.lifecycle.start_failures

    def logs(self) -> Path:
        return self.run_dir / "slurm"

    # -- checks before anything starts -------------------------------------------------
    def check(self) -> None:
        """Slurm's commands are there, the controller answers, and it would take a worker job
        with these options (``sbatch --test-only``: a partition, account or QOS that does not
        exist, or a time limit above the partition's, is one line now)."""
        for cmd in ("sbatch", "squeue", "scancel", "scontrol"):
            require(cmd)
        argv = sbatch_argv(name=f"{self.prefix}check", comment=self.comment, cores=1, memory_mb=1,
                           output=Path("/dev/null"), partition=self.partition, account=self.account, qos=self.qos,
                           time_limit=self.time_limit, extra=self.sbatch_args, test_only=True)
        try:
            run(argv, stdin="#!/bin/sh\ntrue\n")
        except SlurmError as exc:
            said = str(exc)
            if "contact slurm controller" in said.lower() or "did not answer" in said:
                raise SlurmError(f"the Slurm controller does not answer (sbatch: {said}); {hint(said)}") from None
            raise SlurmError(f"sbatch refused a worker job: {said}; {hint(said)}") from None

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, master_host: str, master_port: int) -> None:
        self.master_host = self.master_host or master_host
        self._port = master_port
        self.logs().mkdir(parents=True, exist_ok=True)
        try:
            await self._read_queue(force=True)
        except SlurmError as exc:
            log.warning("squeue: %s (adopting this run's jobs later)", exc)
        self._adopt()
        adopted = [j for j in self._jobs.values() if j.adopted]
        if adopted:
            log.info("adopted %d Slurm job(s) of run %s: %s", len(adopted), self.run_id,
                     ", ".join(j.job_id for j in adopted))

    async def _read_queue(self, force: bool = False) -> None:
        """This user's jobs of this run, as squeue lists them (at most every ``squeue_every_s``)."""
        if not force and time.monotonic() - self._queue_at < self.squeue_every_s:
            return
        out = await arun(["squeue", "--me", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"])
        self._queue_at = time.monotonic()
        now = time.time()
        self._queue = {j.job_id: j for j in parse_squeue(out) if j.name.startswith(self.prefix)}
        for job in self._jobs.values():
            if job.job_id in self._queue:
                job.seen_at = now

    def _adopt(self) -> None:
        """Track the run's live jobs this HTA did not submit (a restarted HTA's)."""
        known = {j.job_id for j in self._jobs.values()}
        for sj in self._queue.values():
            if sj.job_id in known or sj.finished:
                continue
            requested = (sj.submitted_at or time.time()) - self.epoch
            job = Job(sj.name, Resources(), requested, sj.job_id, adopted=True, last=sj, seen_at=time.time())
            self._jobs[sj.name] = job
            self.lifecycle.record(WorkerRecord(t=round(max(requested, 0.0), 3), worker=sj.name, event="requested"))
            try:
                self._seq = max(self._seq, int(sj.name.rsplit("-", 1)[1]))
            except (IndexError, ValueError):
                pass

    # -- scale up -----------------------------------------------------------------------
    def holding_back(self) -> str | None:
        return self._holding_back

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        if self.fatal or n <= 0:
            return []
        gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)
        cores, memory = whole_cores(shape.cores), int(shape.memory_mb)
        worker = worker_command(f"{self.master_host or '127.0.0.1'}:{self._port}", cores=cores, memory_mb=memory,
                                disk_mb=int(shape.disk_mb), idle_timeout_s=self.idle_timeout_s, css=self.css,
                                executable=hta_executable())
        script = batch_script(sys.executable, self._port, self.comment, worker)

        async def submit(name: str) -> str | None:
            argv = sbatch_argv(name=name, comment=self.comment, cores=cores, memory_mb=memory,
                               output=self.logs() / f"{name}.log", partition=self.partition, account=self.account,
                               qos=self.qos, time_limit=self.time_limit, extra=self.sbatch_args)
            async with gate:
                if self.fatal:
                    return None
                out = await arun(argv, stdin=script)
            job = Job(name, shape, now, parse_sbatch(out))
            self._jobs[name] = job
            self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=name, event="requested", cores=shape.cores))
            return name

        names = []
        for _ in range(n):
            self._seq += 1
            names.append(f"{self.prefix}{self._seq}")
        done = await asyncio.gather(*(submit(x) for x in names), return_exceptions=True)
        errors = [d for d in done if isinstance(d, BaseException)]
        if errors:
            err = str(errors[0])
            if permanent(err):  # every job would be refused alike: the run cannot go on
                self.lifecycle.give_up(f"sbatch refused a worker job ({cores} cores, {memory} MB): {err}; {hint(err)}")
                log.info("%s", self.fatal)
            else:  # those submitted are tracked; the next decision asks again for the rest
                raise errors[0]
        return [d for d in done if isinstance(d, str)]

    # -- observation --------------------------------------------------------------------
    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        known = {j.address for j in self._jobs.values() if j.address}
        started = any(j.state == "pending" and j.began_at is not None for j in self._jobs.values())
        try:  # a worker the master lists that no job has named yet: ask Slurm now, not a second later
            await self._read_queue(force=started and any(w.address not in known for w in snap.workers))
        except SlurmError as exc:
            self._say("squeue", f"squeue failed: {exc}; the workers keep running, HTA asks again")
            return self.lifecycle.flush()
        self._adopt()
        listed = {w.address: w for w in snap.workers}
        running = running_by_worker(snap)
        unix = time.time()
        held: list[str] = []
        for job in self._jobs.values():
            if job.state in ("gone", "cancelling"):
                continue
            sj = self._queue.get(job.job_id)
            if sj is not None:
                job.last = sj
                self._note_times(job, sj)
            elif unix - (job.seen_at or self.epoch + job.requested_at) < LIST_GRACE_S:
                continue  # just submitted: squeue will list it
            if sj is not None and sj.state == "COMPLETING":
                job.completing_since = job.completing_since or unix
                if unix - job.completing_since < COMPLETING_WAIT_S:
                    continue  # ending: its final state says why, in a moment
            addr = sj.worker_address if sj is not None else None
            if job.state == "pending":
                if sj is not None and sj.running and addr in listed:
                    self._connected(job, listed[addr].cores, now)
                elif sj is None or sj.finished:
                    self._start_failed(job, now, sj)
                    continue
                else:
                    never = sj.never_starts()
                    if never:
                        self.lifecycle.give_up(f"Slurm will never start worker job {job.job_id}: it is pending with "
                                               f"reason {never}; {hint(never)}")
                        log.info("%s", self.fatal)
                    elif sj.state == "PENDING" and sj.reason not in ("", "None", "Priority", "Resources", "BeginTime"):
                        held.append(sj.reason)
            if job.state == "connected":
                if sj is None or sj.finished:
                    self._lost(job, now, snap.taken_at, self._ended_how(sj))
                elif addr and addr != job.address and addr in listed:
                    job.address = addr  # its worker reconnected (a restarted master)
                    self.lifecycle.listed(job.life, running.get(addr, {}))
                elif job.address in listed:
                    self.lifecycle.listed(job.life, running.get(job.address or "", {}))
                elif self.lifecycle.dropped(job.life, snap.taken_at):
                    self._lost(job, now, job.life.missing_since or snap.taken_at,
                               "its worker left the master while its job still ran (node gone or worker stalled): "
                               "job cancelled and replaced")
                    await self._cancel([job])
        self._holding_back = (f"Slurm holds {len(held)} worker job(s) pending: {held[0]}" if held else None)
        self._check_unreachable(unix)
        return self.lifecycle.flush()

    def _note_times(self, job: Job, sj: SlurmJob) -> None:
        if sj.nodes:
            job.node = sj.nodes
        if sj.state == "CONFIGURING" and job.allocated_at is None:
            job.allocated_at = sj.start_at  # given its node, which boots
        if sj.running and job.began_at is None:
            job.began_at = sj.start_at or time.time()
            if job.allocated_at is None:
                job.allocated_at = job.began_at

    def _connected(self, job: Job, cores: float, now: float) -> None:
        job.state, job.address = "connected", job.last.worker_address if job.last else None
        self.lifecycle.connected()
        if job.shape == Resources():
            job.shape = Resources(cores=cores)
        rec = WorkerRecord(t=round(now, 3), worker=job.name, event="connected", cores=cores, node=job.node,
                           latency_s=None if job.adopted else round(now - job.requested_at, 3))
        if not job.adopted:
            rec.phases = self.phases(job, now)
        self.lifecycle.record(rec)

    def phases(self, job: Job, now: float) -> dict[str, float]:
        """Where the latency went, in order and adding up: ``pending`` + ``resume`` (= ``node``)
        + ``start``. Slurm's times have one-second resolution; they are clamped between the
        request and the connection."""
        asked = job.requested_at
        began = min(max(self._rel(job.began_at, now), asked), now)
        given = min(max(self._rel(job.allocated_at, began), asked), began)
        return {"pending": round(given - asked, 3), "resume": round(began - given, 3),
                "start": round(now - began, 3), "node": round(began - asked, 3)}

    def _rel(self, unix: float | None, default: float) -> float:
        return default if unix is None else unix - self.epoch

    def _ended_how(self, sj: SlurmJob | None) -> str:
        if sj is None:
            return "its job left Slurm's queue"
        how = ENDED_HOW.get(sj.state, "its job ended")
        return f"{how} ({sj.state}" + (f", time limit {sj.time_limit})" if sj.state == "TIMEOUT" else ")")

    def _lost(self, job: Job, now: float, at: float, why: str) -> None:
        job.state = "gone"
        rec = self.lifecycle.ended(job.life, t=now, worker=job.name, event="lost", cores=job.shape.cores or None,
                                   at=at, reason=why)
        log.warning("worker job %s (%s) went away with %d running task(s): %s; the master runs them again",
                    job.job_id, job.name, rec.tasks_lost, why)

    def _start_failed(self, job: Job, now: float, sj: SlurmJob | None) -> None:
        job.state = "gone"
        words = last_words(self.logs() / f"{job.name}.log")
        state = f"{sj.state}" + (f", {sj.reason}" if sj and sj.reason not in ("", "None") else "") if sj else "gone"
        why = f"its job ended before its worker connected ({state})" + (f": {words}" if words else "")
        self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=job.name, event="failed",
                                           cores=job.shape.cores or None, reason=why))

        def fatal(n: int) -> str:
            return (f"worker jobs cannot start: {n} in a row ended before their worker connected; the last (job "
                    f"{job.job_id}): {state}{': ' + words if words else ''} (log: {self.logs() / job.name}.log)")

        if self.lifecycle.start_failed(fatal) == 1:
            log.warning("worker job %s ended before its worker connected (%s); its output: %s", job.job_id, state,
                        self.logs() / f"{job.name}.log")

    def _check_unreachable(self, unix: float) -> None:
        """``fatal`` when no worker is connected and jobs have run ``start_timeout_s`` without
        their worker reaching the master."""
        if self.fatal or any(j.state == "connected" for j in self._jobs.values()):
            return
        began = [j.began_at for j in self._jobs.values() if j.state == "pending" and j.began_at is not None]
        if began and unix - min(began) >= self.start_timeout_s:
            self.lifecycle.give_up(f"worker jobs run but no worker reached the master at {self.master_host}:"
                                   f"{self._port} for {self.start_timeout_s:.0f}s; pass --master-host an address of "
                                   f"this host the compute nodes can reach, and let port {self._port} through")
            log.info("%s", self.fatal)

    def _say(self, key: str, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.warning("%s", line)

    def worker_ids(self) -> dict[str, str]:
        return {j.address: j.name for j in self._jobs.values() if j.state == "connected" and j.address}

    def retired(self) -> set[str]:
        return {j.address for j in self._jobs.values() if j.address and j.state in ("cancelling", "gone")}

    def pending(self) -> list[PendingWorker]:
        return [PendingWorker(id=j.name, requested_at=j.requested_at, shape=j.shape)
                for j in self._jobs.values() if j.state == "pending"]

    def job_ids(self) -> list[str]:
        """Slurm ids of the run's jobs not known to be over."""
        return [j.job_id for j in self._jobs.values() if j.state != "gone"]

    # -- scale down -----------------------------------------------------------------------
    async def _cancel(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        try:
            await arun(["scancel", *(j.job_id for j in jobs)])
        except SlurmError as exc:
            if "invalid job id" not in str(exc).lower():  # ended meanwhile: what was wanted
                raise

    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        busy = {w.address for w in snap.workers if w.tasks_running > 0}
        picked = [j for j in (self._jobs.get(i) for i in ids)
                  if j is not None and j.state == "connected" and j.address not in busy]
        await self._cancel(picked)
        for j in picked:
            j.state = "gone"
            self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=j.name, event="drained",
                                               cores=j.shape.cores or None))
        return self.lifecycle.flush()

    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        picked = [j for j in (self._jobs.get(i) for i in ids) if j is not None and j.state != "gone"]
        await self._cancel(picked)
        for j in picked:
            j.state = "gone"
            self.lifecycle.ended(j.life, t=now, worker=j.name, event="removed", cores=j.shape.cores or None,
                                 at=snap.taken_at)
        return self.lifecycle.flush()

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        """Cancel every job of the run (adopted ones and any squeue lists under its name) and
        wait until none is pending or running, at most ``cancel_timeout_s``; a controller that
        does not answer is one line naming the command that cancels what is left."""
        try:
            await self._cancel_everything()
        except SlurmError as exc:
            ids = sorted(set(self.job_ids()) | {j for j, sj in self._queue.items() if not sj.finished}, key=int)
            log.warning("could not cancel this run's Slurm jobs (%s): cancel them with: scancel %s", exc,
                        " ".join(ids) or f"--me --name=<job names starting {self.prefix}>")
        for j in self._jobs.values():
            if j.state != "gone":
                self.lifecycle.record(WorkerRecord(t=round(now, 3), worker=j.name, event="stopped",
                                                   cores=j.shape.cores or None))
                j.state = "gone"
        return self.lifecycle.flush()

    async def _cancel_everything(self) -> None:
        t0 = time.monotonic()
        said = False
        left: list[str] = []
        while True:
            await self._read_queue(force=True)
            live = {j for j, sj in self._queue.items() if not sj.finished or sj.state == "COMPLETING"}
            live |= {j.job_id for j in self._jobs.values() if j.state != "gone" and j.job_id not in self._queue
                     and time.time() - (j.seen_at or self.epoch + j.requested_at) < LIST_GRACE_S}
            left = sorted(live, key=int)
            if not left:
                return
            waited = time.monotonic() - t0
            if waited >= self.cancel_timeout_s:
                break
            if not said and waited >= 5.0:
                said = True
                log.warning("waiting for Slurm to end %d worker job(s): %s", len(left), " ".join(left[:8]))
            pending_or_running = [j for j in left if self._queue.get(j) is None or not self._queue[j].finished]
            if pending_or_running:
                await self._cancel([Job("", Resources(), 0.0, j) for j in pending_or_running])
            await asyncio.sleep(0.5)
        raise SlurmError(f"{len(left)} job(s) still listed after {self.cancel_timeout_s:.0f}s: {' '.join(left)}")


def permanent(error: str) -> bool:
    """An sbatch refusal that every later job would meet too."""
    low = error.lower()
    return any(s in low for s in ("invalid partition", "invalid account", "invalid qos", "time limit",
                                  "node configuration is not available", "more processors",
                                  "memory specification", "invalid generic resource", "invalid feature",
                                  "job violates accounting/qos policy", "unrecognized option", "invalid option"))


def this_host() -> str:
    """The address compute nodes reach this host at: its name's address (a login node's
    name resolves to its cluster address); ``--master-host`` when it does not."""
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def from_options(options, run) -> SlurmBackend:
    """The registry's factory (:mod:`hta.backends`): checks Slurm now, so a missing ``sbatch``,
    a controller that does not answer or a partition that does not exist is one line (exit 2)
    before anything starts."""
    backend = SlurmBackend(
        run_id=run_id_for(run.workflow), epoch=run.epoch, run_dir=run.run_dir, partition=options.partition,
        account=options.account, qos=options.qos, time_limit=options.time_limit, sbatch_args=options.sbatch_args,
        master_host=options.master_host or this_host(), idle_timeout_s=options.idle_timeout_s,
        start_timeout_s=options.start_timeout_s)
    try:
        backend.check()
    except SlurmError as exc:
        raise ValueError(str(exc)) from None
    return backend
