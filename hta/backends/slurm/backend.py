"""The Slurm provider: each worker is a Slurm batch job (``sbatch``) running ``hta worker``.

A :class:`~hta.backends.provider.Provider` under the worker pool, as local processes and
Kubernetes pods are; it speaks to Slurm only through its client commands
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
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hta.backends.provider import (
    JobState,
    JobStatus,
    Provider,
    end_all,
    in_order,
    launched,
    run_id_for,
    shape_words,
)
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
    worker_of,
)
from hta.backends.slurm.limits import JobLimits, clock, job_limits, parse_default_qos, slurm_seconds
from hta.model import Resources
from hta.node.last_call import MARGIN, left_how
from hta.node.launch import hta_executable, last_words
from hta.node.worker import worker_command
from hta.plural import span
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
#: this many workers asked at once are one job array (``sbatch --array``): one call
ARRAY_FROM = 2
#: elements of one array at most (Slurm's default MaxArraySize is 1001: indexes 0…1000)
ARRAY_MAX = 1000
#: Slurm states of a job that ended, as lost work is counted by cause
CAUSES = {"TIMEOUT": "time limit", "DEADLINE": "time limit", "PREEMPTED": "preemption", "NODE_FAIL": "node failure",
          "BOOT_FAIL": "node failure"}
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


def port_for(run_id: str) -> int:
    """The master's default port: fixed for the workflow (adopted workers reconnect to it), and
    different for different workflows, so two runs on one login node do not collide."""
    return 9200 + int(hashlib.sha1(run_id.encode()).hexdigest()[:6], 16) % 700


@dataclass
class Job:
    """A worker job this run asked for (or adopted)."""

    name: str
    job_id: str
    #: Unix times: asked for; last listed by squeue; given a node; its script began (Slurm's
    #: StartTime, reset after a node's boot); first seen COMPLETING (its final state comes next)
    submitted_at: float
    seen_at: float | None = None
    allocated_at: float | None = None
    began_at: float | None = None
    completing_since: float | None = None
    #: its worker's connection, once the job's wrapper put it in the comment
    address: str | None = None
    over: bool = False
    #: its output (default: ``<name>.log`` in the run's slurm folder; an array element's is its array's)
    log: Path | None = None


class SlurmProvider(Provider):
    name = "slurm"
    noun, job, launched, reached_from = "worker job", "job", "submitted", "the compute nodes"

    def __init__(self, *, run_id: str, run_dir: Path, partition: str | None = None,
                 account: str | None = None, qos: str | None = None, time_limit: str | None = None,
                 sbatch_args: list[str] | None = None, master_host: str | None = None, idle_timeout_s: int = 900,
                 start_timeout_s: float | None = None, squeue_every_s: float = SQUEUE_EVERY_S,
                 cancel_timeout_s: float = CANCEL_TIMEOUT_S, css: bool | str = True):
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.partition, self.account, self.qos, self.time_limit = partition, account, qos, time_limit
        self.sbatch_args = list(sbatch_args or [])
        self.master_host = master_host
        self.idle_timeout_s = idle_timeout_s
        self.start_timeout_s = START_TIMEOUT_S if start_timeout_s is None else start_timeout_s
        self.stuck_after_s = min(self.stuck_after_s, self.start_timeout_s / 4)
        self.squeue_every_s = squeue_every_s
        self.cancel_timeout_s = cancel_timeout_s
        self.css = css
        self.default_port = port_for(run_id)
        self.prefix = f"hta-{run_id}-"
        self.comment = f"hta.run={run_id}"
        self._jobs: dict[str, Job] = {}
        self._seq = 0
        self._port = 0
        self._queue: dict[str, SlurmJob] = {}
        self._queue_at = float("-inf")
        self._said: set[str] = set()
        self._holding_back: str | None = None
        #: the limits a worker job lives under (:meth:`check` reads them)
        self.limits = JobLimits()

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
        self.limits = self.read_limits()

    def read_limits(self) -> JobLimits:
        """The partition's MaxTime and DefaultTime and, where slurmdbd runs, the QOS's MaxWall
        (:mod:`hta.backends.slurm.limits`); what cannot be read is left out, never an error."""
        try:
            text = run(["scontrol", "--oneliner", "show", "partition", *([self.partition] if self.partition else [])])
        except SlurmError:
            text = ""
        lines = text.splitlines()
        line = next((ln for ln in lines if self.partition or " Default=YES" in ln), lines[0] if lines else "")
        try:
            qos_text: str | None = run(["sacctmgr", "--noheader", "--parsable2", "show", "qos",
                                        "format=Name,MaxWall,MaxSubmitJobsPU,MaxJobsPU"], timeout_s=10.0)
        except SlurmError:
            qos_text = None  # no accounting (slurmdbd): no QOS limits to read
        default_qos = None
        if qos_text is not None and not self.qos:
            import getpass

            try:
                default_qos = parse_default_qos(run(
                    ["sacctmgr", "--noheader", "--parsable2", "show", "user", getpass.getuser(), "withassoc",
                     "format=User,DefaultAccount,Account,Partition,DefaultQOS,QOS"], timeout_s=10.0), self.account)
            except SlurmError:
                pass
        limits = job_limits(user=self.time_limit, partition=self.partition, partition_text=line, qos=self.qos,
                            qos_text=qos_text, default_qos=default_qos)
        if limits.ceiling is not None:
            log.info("worker jobs may run at most %s (%s)", clock(limits.ceiling.seconds), limits.ceiling.source)
        if limits.max_submit_jobs is not None:
            log.info("QOS %s lets you have %d jobs submitted at once (MaxSubmitJobsPerUser): HTA submits no more, "
                     "counting your other jobs", limits.qos, limits.max_submit_jobs)
        return limits

    async def submit_room(self, n: int) -> int:
        """Of ``n`` workers, how many the QOS's MaxSubmitJobsPerUser lets HTA submit now: it
        counts every job of the user's in that QOS (other runs', every array element), so HTA
        reads what is queued. What it holds back is said as what holds HTA back, as a quota is."""
        most = self.limits.max_submit_jobs
        if most is None:
            return n
        out = await arun(["squeue", "--me", "--array", "--noheader", f"--qos={self.limits.qos}",
                          "--states=PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED", "--format=%i"])
        queued = sum(1 for line in out.splitlines() if line.strip())
        room = max(0, most - queued)
        if room < n:
            self._holding_back = (f"QOS {self.limits.qos}'s MaxSubmitJobsPerUser {most} ({queued} of your jobs "
                                  f"submitted)")
        return min(n, room)

    def job_time(self) -> str | None:
        """``sbatch --time``: the policy's choice in whole minutes (Slurm's unit), within the
        ceiling; without one, the ceiling itself (a partition's DefaultTime may be shorter:
        until a runtime is learned, the longest job is the safe ask); None: no limit at all."""
        if self.job_time_s is None and self.time_limit:
            return self.time_limit
        c = self.limits.ceiling
        if self.job_time_s is None:
            return None if c is None else str(max(1, int(c.seconds // 60)))
        minutes = math.ceil(self.job_time_s / 60.0)
        if c is not None:
            minutes = min(minutes, int(c.seconds // 60))
        return str(max(1, minutes))

    def job_ceiling(self) -> tuple[float, str] | None:
        c = self.limits.ceiling
        return (c.seconds, c.words()) if c is not None else None

    async def start(self, master_host: str, master_port: int) -> None:
        self.master_host = self.master_host or master_host
        self._port = master_port
        self.master = f"{self.master_host}:{master_port}"
        self.logs().mkdir(parents=True, exist_ok=True)

    async def _read_queue(self, force: bool = False) -> None:
        """This user's jobs of this run, as squeue lists them (at most every ``squeue_every_s``)."""
        if not force and time.monotonic() - self._queue_at < self.squeue_every_s:
            return
        out = await arun(["squeue", "--me", "--array", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"])
        self._queue_at = time.monotonic()
        now = time.time()
        self._queue = {j.job_id: j for j in parse_squeue(out) if j.name.startswith(self.prefix)}
        for job in self._jobs.values():
            if job.job_id in self._queue:
                job.seen_at = now

    # -- launch -------------------------------------------------------------------------
    def holding_back(self) -> str | None:
        return self._holding_back

    async def launch(self, shape: Resources, n: int, delay_s: float = 0.0) -> list[str]:
        gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)
        cores, memory = whole_cores(shape.cores), int(shape.memory_mb)
        worker = worker_command(self.master, cores=cores, memory_mb=memory, disk_mb=int(shape.disk_mb),
                                idle_timeout_s=self.idle_timeout_s, css=self.css, executable=hta_executable(),
                                last_call_s=self.expected_task_s * MARGIN)
        script = batch_script(sys.executable, self._port, self.comment, worker)

        time_limit = self.job_time()

        def argv(name: str, output: str, array: tuple[int, int] | None = None) -> list[str]:
            return sbatch_argv(name=name, comment=self.comment, cores=cores, memory_mb=memory,
                               output=self.logs() / output, partition=self.partition, account=self.account,
                               qos=self.qos, time_limit=time_limit, extra=self.sbatch_args, array=array)

        async def submit(name: str) -> str | None:
            async with gate:
                if self.fatal:
                    return None
                out = await arun(argv(name, f"{name}.log"), stdin=script)
            self._jobs[name] = Job(name, parse_sbatch(out), time.time(), log=self.logs() / f"{name}.log")
            return name

        n = await self.submit_room(n)
        if n <= 0:
            return []
        async def submit_array(first: int, last: int) -> list[str]:
            """Workers ``first``..``last`` as one job array ``hta-<run>-F-L``, elements 0…"""
            name = f"{self.prefix}{first}-{last}"
            async with gate:
                if self.fatal:
                    return []
                out = await arun(argv(name, f"{name}_%a.log", (0, last - first)), stdin=script)
            jid, now = parse_sbatch(out), time.time()
            for k in range(last - first + 1):
                handle = f"{self.prefix}{first + k}"
                self._jobs[handle] = Job(handle, f"{jid}_{k}", now, log=self.logs() / f"{name}_{k}.log")
            return [f"{self.prefix}{k}" for k in range(first, last + 1)]

        first, self._seq = self._seq + 1, self._seq + n
        done: list[object]
        if n >= ARRAY_FROM:  # one call for up to ARRAY_MAX workers, each element a worker with its own log
            chunks = [(a, min(a + ARRAY_MAX - 1, self._seq)) for a in range(first, self._seq + 1, ARRAY_MAX)]
            done = []
            for got in await asyncio.gather(*(submit_array(a, b) for a, b in chunks), return_exceptions=True):
                done += got if isinstance(got, list) else [got]
        else:
            done = await asyncio.gather(*(submit(f"{self.prefix}{k}") for k in range(first, self._seq + 1)),
                                        return_exceptions=True)
        error = next((d for d in done if isinstance(d, BaseException)), None)
        if error is not None and permanent(str(error)):  # every job would be refused alike: the run cannot go on
            self.fatal = (f"sbatch refused a worker job of {shape_words(cores, memory, shape, self.worker_shape)}: "
                          f"{error}; {hint(str(error))}")
            return [d for d in done if isinstance(d, str)]
        return launched(done, self.noun)

    # -- poll ---------------------------------------------------------------------------
    async def poll(self, snap: MasterSnapshot | None) -> dict[str, JobStatus]:
        known = {j.address for j in self._jobs.values() if j.address}
        started = any(j.began_at is not None and j.address is None for j in self._jobs.values())
        try:  # a worker the master lists that no job has named yet: ask Slurm now, not a second later
            await self._read_queue(force=snap is None or (started and any(w.address not in known
                                                                          for w in snap.workers)))
        except SlurmError as exc:
            self._say(f"squeue failed: {exc}; the workers keep running, HTA asks again")
            return {}
        out: dict[str, JobStatus] = {}
        for q in self._queue.values():  # the run's jobs this HTA did not submit (a restarted HTA's)
            last = q.name.removeprefix(self.prefix).rpartition("-")[2]  # (an array's last worker, ended or not)
            self._seq = max(self._seq, int(last) if last.isdigit() else 0)
            handle = self.handle_of(q)
            if handle not in self._jobs and not q.finished:
                _, _, k = q.job_id.partition("_")
                log = self.logs() / (f"{q.name}_{k}.log" if k else f"{q.name}.log")
                self._jobs[handle] = Job(handle, q.job_id, q.submitted_at or time.time(), seen_at=time.time(),
                                         log=log)
                seq = handle.removeprefix(self.prefix)
                self._seq = max(self._seq, int(seq) if seq.isdigit() else 0)
        unix = time.time()
        held: list[str] = []
        for job in self._jobs.values():
            sj = self._queue.get(job.job_id)
            if sj is None and not job.over and unix - (job.seen_at or job.submitted_at) < LIST_GRACE_S:
                continue  # just submitted: squeue will list it
            if sj is not None:
                self._note_times(job, sj)
            if sj is not None and sj.state == "COMPLETING":
                job.completing_since = job.completing_since or unix
                if unix - job.completing_since < COMPLETING_WAIT_S:
                    out[job.name] = JobStatus(JobState.ENDING)
                    continue
            if sj is None or sj.finished:
                job.over = True
                out[job.name] = self._ended_how(job, sj)
            elif sj.running:
                out[job.name] = JobStatus(JobState.RUNNING, address=job.address, node=sj.nodes or None,
                                          running_since=job.began_at, ends_at=sj.end_at)
            else:
                never = sj.never_starts()
                if never:
                    self.fatal = self.fatal or (f"Slurm will never start worker job {job.job_id}: it is pending "
                                                f"with reason {never}; {hint(never)}")
                elif sj.state == "PENDING" and sj.reason not in ("", "None", "Priority", "Resources", "BeginTime"):
                    held.append(sj.reason)
                out[job.name] = JobStatus(JobState.PENDING)
            out[job.name].created_at = job.submitted_at  # (for a job the pool adopts)
        self._holding_back = f"Slurm holds {len(held)} worker job(s) pending: {held[0]}" if held else None
        return out

    def handle_of(self, sj: SlurmJob) -> str:
        """A job's handle: the worker it is (:func:`~hta.backends.slurm.commands.worker_of`)."""
        return worker_of(sj.job_id, sj.name)

    def _note_times(self, job: Job, sj: SlurmJob) -> None:
        job.address = sj.worker_address or job.address
        if sj.state == "CONFIGURING" and job.allocated_at is None:
            job.allocated_at = sj.start_at  # given its node, which boots
        if sj.running and job.began_at is None:
            job.began_at = sj.start_at or time.time()
            job.allocated_at = job.allocated_at or job.began_at

    def phases(self, handle: str, requested: float, connected: float) -> dict[str, float]:
        """``pending`` + ``resume`` (a powered-down node booting; = ``node``) + ``start``."""
        job = self._jobs[handle]
        began = job.began_at or connected
        out = in_order(requested, connected, [("pending", job.allocated_at or began), ("resume", began)], "start")
        out["node"] = round(out["pending"] + out["resume"], 3)
        return out

    def _ended_how(self, job: Job, sj: SlurmJob | None) -> JobStatus:
        """An ended job's status: why, in the user's words, and what it cost (its cause)."""
        log_path = job.log or self.logs() / f"{job.name}.log"
        if job.address is None:  # before its worker connected: its output says why
            words = last_words(log_path)
            state = f"{sj.state}" + (f", {sj.reason}" if sj.reason not in ("", "None") else "") if sj else "gone"
            return JobStatus(JobState.ENDED,
                             why=f"its job ended before its worker connected ({state})" + (f": {words}" if words else ""))
        if sj is None:
            return JobStatus(JobState.ENDED, why="its job left Slurm's queue")
        try:
            limit = slurm_seconds(sj.time_limit)
        except ValueError:
            limit = None
        # (a worker that left may still meet the limit while its abort kills what it held)
        left = left_how(log_path.read_text(errors="replace")) if sj.state in ("COMPLETED", "TIMEOUT") \
            and log_path.exists() else None
        if left is not None and left.get("cut"):
            return JobStatus(JobState.ENDED, cause="time limit", limit_s=limit,
                             why=f"its worker left at its job's time limit ({sj.time_limit}), cutting "
                                 f"{left['cut']} running task(s)")
        if left is not None:
            return JobStatus(JobState.ENDED, left=True, limit_s=limit, failed=False, held_back=int(left.get("held", 0)),
                             held_s=float(left.get("held_s", 0.0)),
                             why=f"its worker left before its job's time limit ({sj.time_limit}): a task taken now "
                                 f"(expected to run {span(left.get('last_call_s') or 0)}) would not end in time")
        how = ENDED_HOW.get(sj.state, "its job ended")
        return JobStatus(JobState.ENDED, cause=CAUSES.get(sj.state), limit_s=limit,
                         why=f"{how} ({sj.state}" + (f", time limit {sj.time_limit})" if sj.state == "TIMEOUT" else ")"))

    def cannot_start(self, n: int, handle: str, why: str) -> str:
        return (f"worker jobs cannot start: {n} in a row ended before their worker connected; the last (job "
                f"{self._jobs[handle].job_id}): {why} (log: {self._jobs[handle].log})")

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.warning("%s", line)

    def job_ids(self) -> list[str]:
        """Slurm ids of the run's jobs not known to be over."""
        return [j.job_id for j in self._jobs.values() if not j.over]

    # -- cancel -------------------------------------------------------------------------
    async def _scancel(self, job_ids: list[str]) -> None:
        if not job_ids:
            return
        try:
            await arun(["scancel", *job_ids])
        except SlurmError as exc:
            if "invalid job id" not in str(exc).lower():  # ended meanwhile: what was wanted
                raise

    async def cancel(self, handles: list[str], force: bool = False) -> dict[str, str]:
        jobs = [self._jobs[h] for h in handles if h in self._jobs]
        try:
            await self._scancel([j.job_id for j in jobs])
        except SlurmError as exc:
            return {j.name: str(exc) for j in jobs}
        for j in jobs:
            j.over = True
        return {}

    async def stop_all(self) -> None:
        """Cancel every job of the run (adopted ones and any squeue lists under its name) and
        wait until none is pending or running, at most ``cancel_timeout_s``."""
        await end_all("worker job", self._live, self._end, self._stop_command,
                      timeout_s=self.cancel_timeout_s, force_after_s=10.0, force_words="again")

    async def _live(self) -> list[str]:
        """The run's jobs Slurm lists as not over, and those just submitted it does not list yet."""
        await self._read_queue(force=True)
        live = {j for j, sj in self._queue.items() if not sj.finished or sj.state == "COMPLETING"}
        live |= {j.job_id for j in self._jobs.values() if not j.over and j.job_id not in self._queue
                 and time.time() - (j.seen_at or j.submitted_at) < LIST_GRACE_S}
        return sorted(live, key=int)

    async def _end(self, ids: list[str], force: bool) -> None:
        await self._scancel([j for j in ids if (q := self._queue.get(j)) is None or not q.finished])  # not COMPLETING

    def _stop_command(self, ids: list[str]) -> str:
        ids = ids or sorted(set(self.job_ids()) | {j for j, sj in self._queue.items() if not sj.finished},
                            key=lambda j: [int(x) for x in j.split("_") if x.isdigit()])
        return "scancel " + (" ".join(ids) or f"--me --name=<job names starting {self.prefix}>")


def permanent(error: str) -> bool:
    """An sbatch refusal that every later job would meet too."""
    low = error.lower()
    return any(s in low for s in ("invalid partition", "invalid account", "invalid qos", "time limit",
                                  "node configuration is not available", "more processors",
                                  "cpu count per node can not be satisfied",
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


def from_options(options, run):
    """The registry's factory (:mod:`hta.backends`): checks Slurm now, so a missing ``sbatch``,
    a controller that does not answer or a partition that does not exist is one line (exit 2)
    before anything starts."""
    from hta.backends.pool import WorkerPool

    provider = SlurmProvider(
        run_id=run_id_for(run.workflow), run_dir=run.run_dir, partition=options.partition,
        account=options.account, qos=options.qos, time_limit=options.time_limit, sbatch_args=options.sbatch_args,
        master_host=options.master_host or this_host(), idle_timeout_s=options.idle_timeout_s,
        start_timeout_s=options.start_timeout_s, css=options.css)
    try:
        provider.check()
    except SlurmError as exc:
        raise ValueError(str(exc)) from None
    return WorkerPool(provider, epoch=run.epoch, max_task_losses=options.max_task_losses)
