"""The time limits a worker job lives under, as Slurm states them.

A job's ``--time`` may not pass its partition's ``MaxTime`` nor its QOS's ``MaxWall``
(with ``EnforcePartLimits``, sbatch refuses; without, the job pends forever); a job that
gives none gets the partition's ``DefaultTime``, else its ``MaxTime``. HTA reads them
once, with the commands any user may run (``scontrol show partition``; ``sacctmgr show
qos`` where slurmdbd runs), so that the policy knows the longest job it may ask for, and
the run can say so when a task cannot fit in it. The backend reports; the policy decides.

The parsers are pure functions of the commands' text (``tests/test_slurm_units.py``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

#: Slurm's words for "no limit"
UNLIMITED = frozenset({"", "UNLIMITED", "INFINITE", "NONE", "N/A", "(null)", "Partition_Limit"})


def slurm_seconds(text: str) -> float | None:
    """A Slurm duration in seconds; None for no limit. Every form ``sbatch --time`` takes and
    ``scontrol``/``sacctmgr`` print: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    text = text.strip()
    if text in UNLIMITED:
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if m is None:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, a, b, c = m.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        h, mi, s = int(a), int(b or 0), int(c or 0)
        return float(int(days) * 86400 + h * 3600 + mi * 60 + s)
    if c is not None:  # H:M:S
        return float(int(a) * 3600 + int(b) * 60 + int(c))
    if b is not None:  # M:S
        return float(int(a) * 60 + int(b))
    return float(int(a) * 60)  # M


def clock(seconds: float) -> str:
    """Seconds as Slurm prints a time limit: ``1:00``, ``1:30:00``, ``1-00:00:00``."""
    s = int(round(seconds))
    days, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if days:
        return f"{days}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def parse_partition(text: str) -> dict[str, str]:
    """``scontrol show partition NAME -o`` (one line of ``Key=Value`` pairs) as a dict."""
    out: dict[str, str] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq:
            out[key] = value
    return out


def parse_qos(text: str) -> dict[str, dict[str, str]]:
    """``sacctmgr -nP show qos format=Name,MaxWall,MaxSubmitJobsPU,MaxJobsPU`` by QOS name."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0]:
            out[parts[0]] = {"MaxWall": parts[1], "MaxSubmitJobsPU": parts[2], "MaxJobsPU": parts[3]}
    return out


def parse_default_qos(text: str, account: str | None = None) -> str | None:
    """The QOS a job gets when it names none: ``sacctmgr -nP show user $USER withassoc
    format=User,DefaultAccount,Account,Partition,DefaultQOS,QOS``, the association of
    ``account`` (default: the user's default account) with no partition; its DefaultQOS,
    else its only QOS, else Slurm's ``normal``."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 6:
            continue
        _, default_account, acct, partition, default_qos, qos = parts[:6]
        if acct == (account or default_account) and not partition:
            allowed = [q for q in qos.split(",") if q]
            return default_qos or (allowed[0] if len(allowed) == 1 else "normal")
    return None


class Limit(BaseModel):
    """One limit and who set it, in a user's words (``partition hta's MaxTime``)."""

    seconds: float
    source: str

    def words(self) -> str:
        return f"{self.source} {clock(self.seconds)}"


class JobLimits(BaseModel):
    """What bounds worker jobs: the longest job HTA may ask for (``ceiling``, the smallest
    of ``--time-limit``, the partition's ``MaxTime`` and the QOS's ``MaxWall``), what a job
    that asks for none gets (``default``), and how many jobs the QOS lets a user have
    submitted (``MaxSubmitJobsPerUser``: sbatch refuses more) or running (``MaxJobsPerUser``:
    more wait)."""

    limits: list[Limit] = []
    #: the partition's DefaultTime, if it has one
    default: Limit | None = None
    qos: str | None = None
    max_submit_jobs: int | None = None
    max_running_jobs: int | None = None

    @property
    def ceiling(self) -> Limit | None:
        return min(self.limits, key=lambda x: x.seconds) if self.limits else None

    @property
    def job_time(self) -> Limit | None:
        """What a job gets when HTA passes the ceiling (or, with none, what Slurm gives it)."""
        return self.ceiling or self.default


def _count(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def job_limits(*, user: str | None, partition: str | None, partition_text: str, qos: str | None,
               qos_text: str | None, default_qos: str | None = None) -> JobLimits:
    """The limits from ``--time-limit`` (``user``), the partition's line and the QOS table
    (``qos_text`` None: no accounting, so no QOS limit to read)."""
    found: list[Limit] = []
    if user:
        s = slurm_seconds(user)
        if s is not None:
            found.append(Limit(seconds=s, source="--time-limit"))
    part = parse_partition(partition_text)
    name = partition or part.get("PartitionName", "")
    default = None
    try:
        s = slurm_seconds(part.get("MaxTime", ""))
        if s is not None:
            found.append(Limit(seconds=s, source=f"partition {name}'s MaxTime"))
        d = slurm_seconds(part.get("DefaultTime", ""))
        if d is not None:
            default = Limit(seconds=d, source=f"partition {name}'s DefaultTime")
    except ValueError:
        pass
    out = JobLimits(limits=found, default=default)
    if qos_text is None:
        return out
    table = parse_qos(qos_text)
    # the job's QOS (--qos, else its association's default), and the partition's on top of it
    out.qos = qos or default_qos or "normal"
    own = part.get("QoS", "")
    for which, words in ((out.qos, f"QOS {out.qos}'s"), (own, f"partition {name}'s QOS {own}'s")):
        q = table.get(which) if which and which not in UNLIMITED else None
        if q is None or (which == out.qos and words != f"QOS {out.qos}'s"):
            continue
        try:
            s = slurm_seconds(q["MaxWall"])
        except ValueError:
            s = None
        if s is not None:
            out.limits.append(Limit(seconds=s, source=f"{words} MaxWall"))
        if which == out.qos:  # (the submitted count HTA reads is per job QOS: squeue --qos)
            out.max_submit_jobs, out.max_running_jobs = _count(q["MaxSubmitJobsPU"]), _count(q["MaxJobsPU"])
    return out
