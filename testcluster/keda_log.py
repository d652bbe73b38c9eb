"""What a KEDA ScaledJob poll costs, read from the operator's own log. Test cluster only.

KEDA's scale loop (``pkg/scaling/executor/scale_jobs.go`` ``RequestJobScale``) logs the
Jobs it counts once it has read the scaler's metric, then writes the ScaledJob's status,
then creates its Jobs one API call after another between "Creating jobs" and "Created
jobs". So two costs show in the log:

- **the read**: from the count ("Number of pending Jobs") to "Creating jobs" or "No need to
  create jobs": the ScaledJob's status write, which waits on a loaded API server;
- **a create call**: "Creating jobs" to "Created jobs", over the Jobs created, in the polls
  made while Jobs ran. Into an idle cluster the API server answers at once and KEDA's own
  client limiter sets the pace (``--kube-api-qps`` 20, ``--kube-api-burst`` 30: the first
  60 Jobs of a run take 1.5 s), which the emulation applies itself.

The metric's own GET comes before the count and does not show in a poll's lines; where a
poll ran past its interval, the next one's count came 0.04–1 s (real) after it ended, which
is that GET: the emulation leaves it out. The operator logs sub-second times when started
with ``--zap-time-encoding=rfc3339nano`` (``testcluster.keda.install``). With whole-second
times (its default) the means of costs near a second hold within some 7 %, but costs well
under a second are lost to the truncation: a run's polls keep their interval's phase, so
the rounding does not average out. One ScaledJob's polls are read as one stream
(``scaled_job``): two ScaledJobs' interleaved lines would be paired wrongly.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass
class PollCosts:
    """Means over a run's polls, real seconds (None: no poll showed it)."""

    #: the count → the first Create call (or the decision to create none): the status write
    read_s: float | None = None
    #: one Job's Create call while Jobs run (the calls' time over the Jobs they made)
    create_call_s: float | None = None
    polls: int = 0


def _time(ts: object) -> float:
    """A zap time: seconds since the epoch, or RFC 3339 with up to nanoseconds."""
    if isinstance(ts, (int, float)):
        return float(ts)
    # (fromisoformat takes microseconds at most)
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", str(ts))).timestamp()


def poll_costs(log: Path, scaled_job: str | None = None) -> PollCosts:
    """The read and the create call of each poll of ``scaled_job`` (every ScaledJob's if
    None) in the operator's log ``log``."""
    counted: float | None = None
    running = 0
    creating: tuple[float, int] | None = None
    reads: list[float] = []
    calls_s, made = 0.0, 0
    for line in Path(log).read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict) or "ts" not in e:
            continue
        if scaled_job is not None and e.get("scaledJob.Name") not in (None, scaled_job):
            continue
        msg, t = e.get("msg", ""), _time(e["ts"])
        if msg == "Scaling Jobs" and "Number of running Jobs" in e:
            running = int(e["Number of running Jobs"])
        elif msg == "Scaling Jobs" and "Number of pending Jobs" in e:
            counted = t
        elif counted is not None and (msg.startswith("No need to create jobs") or
                                      (msg == "Creating jobs" and "Number of jobs" in e)):
            reads.append(t - counted)
            counted = None
            if msg == "Creating jobs" and int(e["Number of jobs"]) > 0 and running > 0:
                creating = (t, int(e["Number of jobs"]))
        elif msg == "Created jobs" and creating is not None:
            calls_s += t - creating[0]
            made += creating[1]
            creating = None
    return PollCosts(read_s=statistics.fmean(reads) if reads else None,
                     create_call_s=calls_s / made if made else None, polls=len(reads))
