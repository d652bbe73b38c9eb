"""What the Slurm backend says to Slurm and reads back: ``sbatch``, ``squeue``, ``scancel``.

Only Slurm's own client commands, as any user runs them (no library, no REST daemon):
that is what every Slurm site has. Each call is bounded in time and returns or raises
:class:`SlurmError` with one line: the command's own error, never a traceback.

The parsers are pure functions of the text the commands print, so they are tested against
captured output without a cluster (``tests/test_slurm_units.py``).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

#: squeue's fields, in order (``%k``, the comment, last: it is the only free text)
SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%V|%S|%l|%e|%k"
#: job states in which the job has not started: it waits in the queue, or its nodes boot
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                            "SUSPENDED"})
#: job states in which its batch script runs
RUNNING_STATES = frozenset({"RUNNING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESIZING"})
#: pending reasons that do not pass by themselves: the job can never start as it was asked
NEVER_REASONS = ("PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "PartitionDown", "PartitionInactive",
                 "BadConstraints", "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
                 "JobHeldAdmin", "JobHeldUser", "DependencyNeverSatisfied", "ReqNodeNotAvail, UnavailableNodes",
                 "MaxWallDurationPerJobLimit", "MaxCpuPerJob", "MaxMemPerJob", "MinCpuNotSatisfied")
#: how long one Slurm command may take before it counts as failed
COMMAND_TIMEOUT_S = 20.0


class SlurmError(RuntimeError):
    """A Slurm command failed: one line, with the command's own words."""


class SlurmJob(BaseModel):
    """One line of ``squeue``: what the backend knows of a job."""

    job_id: str
    name: str
    state: str
    reason: str = ""
    nodes: str = ""
    #: Unix times (Slurm's, second resolution); None: not known (yet)
    submitted_at: float | None = None
    #: while the job waits or its nodes boot, when it was given them; once it runs, when it began
    #: (Slurm resets it when a powered-up node is ready)
    start_at: float | None = None
    time_limit: str = ""
    #: when it must end (its start plus its time limit), once Slurm knows; None: not known
    end_at: float | None = None
    comment: str = ""

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def finished(self) -> bool:
        return not (self.waiting or self.running)

    @property
    def worker_address(self) -> str | None:
        """The ``ip:port`` the job's worker reports (:mod:`hta.backends.slurm.job` puts it in
        the comment once its worker has connected)."""
        m = re.search(r"(?:^|\s)worker=(\S+)", self.comment)
        return m.group(1) if m else None

    def never_starts(self) -> str | None:
        """The pending reason, if it is one that does not pass by itself."""
        if self.state != "PENDING":
            return None
        for r in NEVER_REASONS:
            if self.reason.startswith(r) or r in self.reason:
                return self.reason
        return None


def slurm_time(text: str) -> float | None:
    """A squeue time (``2024-05-01T12:00:00``, local time) as a Unix time; None for ``N/A``."""
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "NONE", "None"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def parse_squeue(text: str) -> list[SlurmJob]:
    """``squeue --noheader --format=SQUEUE_FORMAT`` lines as jobs (unreadable lines skipped)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", 9)
        if len(parts) < 10 or not parts[0].strip():
            continue
        jid, name, state, reason, nodes, submitted, start, limit, end, comment = (p.strip() for p in parts)
        jobs.append(SlurmJob(job_id=jid, name=name, state=state.split()[0] if state else "", reason=reason,
                             nodes="" if nodes in ("", "(null)") else nodes, submitted_at=slurm_time(submitted),
                             start_at=slurm_time(start), time_limit=limit, end_at=slurm_time(end),
                             comment="" if comment == "(null)" else comment))
    return jobs


def worker_of(job_id: str, name: str) -> str:
    """The worker a job is: its name, or for element ``K`` (``ID_K``) of a job array named
    ``hta-<run>-F-L``, ``hta-<run>-<F+K>`` (HTA numbers an array's elements from 0)."""
    _, _, k = job_id.partition("_")
    m = re.fullmatch(r"(.*-)(\d+)-\d+", name)
    return f"{m.group(1)}{int(m.group(2)) + int(k)}" if k.isdigit() and m else name


def parse_sbatch(stdout: str) -> str:
    """The job id ``sbatch --parsable`` printed (``ID`` or ``ID;CLUSTER``)."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    jid = line.split(";")[0].strip()
    if not jid.isdigit():
        raise SlurmError(f"sbatch printed no job id: {stdout.strip()[:200]!r}")
    return jid


def error_line(stderr: str, stdout: str = "") -> str:
    """The line of a Slurm command's output that says what went wrong."""
    lines = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip()]
    said = next((ln for ln in lines if "error" in ln.lower() or "failure" in ln.lower()), lines[-1] if lines else "")
    said = re.sub(r"^(sbatch|squeue|scancel|scontrol|sinfo): error: ", "", said)
    return re.sub(r"^(allocation failure|Batch job submission failed): ", "", said) or "no output"


def hint(error: str) -> str:
    """What to do about a Slurm error, in a few words."""
    low = error.lower()
    if "resolve_ctls_from_dns_srv" in low or "configuration source" in low or "slurm.conf" in low:
        return "no slurm.conf found: set SLURM_CONF to the cluster's slurm.conf"
    if "unable to contact slurm controller" in low or "connection refused" in low or "connect failure" in low:
        return "start slurmctld, or point SLURM_CONF at the cluster's slurm.conf"
    if "invalid partition" in low:
        return "name a partition that exists (sinfo -s lists them) with --partition"
    if "invalid account" in low or "invalid qos" in low or "association" in low:
        return "check --account and --qos (sacctmgr show assoc user=$USER lists yours)"
    if "time limit" in low:
        return "lower --time-limit to what the partition allows (sinfo -o '%P %l')"
    if any(s in low for s in ("node configuration is not available", "more processors", "cpu count per node",
                              "memory")):
        return "lower --worker-cores/--worker-memory to what a node of the partition has (sinfo -o '%P %c %m')"
    return "fix the sbatch options (--partition, --account, --qos, --time-limit, --sbatch-args)"


def require(command: str) -> str:
    """The path of a Slurm client command, or one line saying how to get it."""
    path = shutil.which(command)
    if path is None:
        raise SlurmError(f"{command} not found: install Slurm's client commands (Debian: slurm-client) or put them "
                         f"on PATH")
    return path


def run(argv: list[str], *, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Run a Slurm command (blocking); its stdout, or :class:`SlurmError` with its own words."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{Path(argv[0]).name} did not answer within {timeout_s:.0f}s (is slurmctld up?)") from None
    except OSError as exc:
        raise SlurmError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise SlurmError(error_line(done.stderr, done.stdout))
    return done.stdout


async def arun(argv: list[str], *, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """:func:`run` without blocking the event loop; the command is killed at ``timeout_s``."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise SlurmError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SlurmError(f"{Path(argv[0]).name} did not answer within {timeout_s:.0f}s (is slurmctld up?)") from None
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise SlurmError(error_line(err.decode(errors="replace"), out.decode(errors="replace")))
    return out.decode(errors="replace")


def sbatch_argv(*, name: str, comment: str, cores: int, memory_mb: int, output: Path, partition: str | None = None,
                account: str | None = None, qos: str | None = None, time_limit: str | None = None,
                extra: list[str] | None = None, test_only: bool = False, array: tuple[int, int] | None = None
                ) -> list[str]:
    """The ``sbatch`` command line of one worker job: one task of ``cores`` CPUs and
    ``memory_mb`` on one node, never requeued by Slurm (a worker that went away is replaced
    only if the policy still wants one), its output in ``output``. ``array`` (first, last):
    one job array of workers numbered so, in one call (``output`` then holds ``%a``)."""
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={cores}", f"--mem={memory_mb}M", "--no-requeue", f"--output={output}",
            "--open-mode=append"]
    if partition:
        argv.append(f"--partition={partition}")
    if account:
        argv.append(f"--account={account}")
    if qos:
        argv.append(f"--qos={qos}")
    if time_limit:
        argv.append(f"--time={time_limit}")
    if array is not None:
        argv.append(f"--array={array[0]}-{array[1]}")
    argv += list(extra or [])
    if test_only:
        argv.append("--test-only")
    return argv


def batch_script(python: str, port: int, comment: str, worker: list[str]) -> str:
    """The job's script: the in-job wrapper (:mod:`hta.backends.slurm.job`) around ``hta worker``."""
    wrapper = [python, "-m", "hta.backends.slurm.job", f"--port={port}", f"--comment={comment}", "--", *worker]
    return "#!/bin/sh\n# an HTA worker (hta makeflow --backend slurm)\nexec " + shlex.join(wrapper) + "\n"
