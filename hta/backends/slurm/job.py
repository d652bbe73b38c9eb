"""Inside a worker job: run ``hta worker`` and tell Slurm which worker of the master it is.

The master names a worker by its connection (``ip:port``) and its host name; several jobs
on one node share the host name, so HTA could not tell which job holds which worker, and
draining an idle worker could cancel a busy one. This wrapper watches its ``hta worker``'s
``work_queue_worker`` for its connection to the master (``--port``), and puts the address
in the job's own comment (``scontrol update JobId=$SLURM_JOB_ID Comment="... worker=IP:PORT"``,
which the job's owner may do): HTA reads it with ``squeue``, no shared file needed. A new
connection (the master restarted) is reported again.

It also tells ``hta worker`` when its job ends (``--ends-at``, the job's EndTime as
``squeue`` prints it), so that the worker takes no task it cannot finish by then
(:mod:`hta.node.last_call`).

Signals are passed on to ``hta worker`` (Slurm signals every process of the job anyway); the
wrapper exits with its code.

    python -m hta.backends.slurm.job --port PORT --comment TEXT -- hta worker --master=HOST:PORT ...
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from hta.node.launch import master_connection

#: how often the wrapper looks at its worker's connection
LOOK_EVERY_S = 0.3


def report(job_id: str, comment: str) -> bool:
    """Set the job's comment; False (and a line on stderr) if Slurm refused."""
    try:
        done = subprocess.run(["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"hta-slurm-job: cannot set the job's comment: {exc}", file=sys.stderr, flush=True)
        return False
    if done.returncode != 0:
        print(f"hta-slurm-job: cannot set the job's comment: {done.stderr.strip()}", file=sys.stderr, flush=True)
        return False
    return True


def job_end(job_id: str) -> float | None:
    """The job's end (Unix), as Slurm set it from its time limit; None if Slurm does not say."""
    from hta.backends.slurm.commands import slurm_time

    try:
        done = subprocess.run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%e"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return slurm_time(done.stdout.strip().splitlines()[0]) if done.returncode == 0 and done.stdout.strip() else None


def with_end(cmd: list[str], ends_at: float | None) -> list[str]:
    """``hta worker ...`` with ``--ends-at`` (after ``worker``); other commands as they are."""
    if ends_at is None or "worker" not in cmd:
        return cmd
    at = cmd.index("worker") + 1
    return [*cmd[:at], f"--ends-at={ends_at:.0f}", *cmd[at:]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hta-slurm-job", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="the master's port")
    ap.add_argument("--comment", default="", help="the job's comment before the worker's address")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- hta worker ...")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give the worker's command after --")
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if job_id:  # (an element of a job array is listed as ARRAYID_TASKID)
        array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        cmd = with_end(cmd, job_end(f"{array}_{task}" if array and task else job_id))
    child = subprocess.Popen(cmd)

    def pass_on(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, pass_on)
    said: str | None = None
    retry_at = 0.0
    while child.poll() is None:
        addr = master_connection(child.pid, a.port)
        if addr and addr != said and job_id and time.monotonic() >= retry_at:
            if report(job_id, f"{a.comment} worker={addr}".strip()):
                said = addr
            else:
                retry_at = time.monotonic() + 10.0  # Slurm refused: do not ask it three times a second
        time.sleep(LOOK_EVERY_S)
    rc = child.returncode
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
