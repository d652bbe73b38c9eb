"""KEDA ScaledJob on the master's queue — a rival, the KEDA shape users pick for batch work.

Faithful to KEDA's ScaledJob (https://keda.sh/docs/latest/reference/scaledjob-spec/,
https://keda.sh/docs/latest/concepts/scaling-jobs/) and to its job executor
(kedacore/keda ``pkg/scaling/executor/scale_jobs.go``):

- **One Kubernetes Job per worker, run to completion.** KEDA never deletes a job
  it started (no scale-down at all): each job's worker runs until it is done and
  leaves by itself, never while it runs a task. A job "pulls" ``tasks_per_job``
  units of work (the scaler's target value: "the number of messages that will
  be consumed on a job") and completes, or completes when it finds no work: a
  ``work_queue_worker -t idle_timeout_s`` that has had no task that long. This
  policy states it in :attr:`worker_lifetime`; the simulator's world applies it
  (:class:`~hta.policies.base.WorkerLifetime`).
- **Every ``pollingInterval``** (30 s by default) KEDA reads the queue length and
  computes ``maxScale = min(maxReplicaCount, ceil(queueLength / tasks_per_job))``.
- **The default scaling strategy** creates ``maxScale − runningJobCount`` new jobs
  (none if that is negative), where ``runningJobCount`` counts every job not
  finished, pending ones included (here: workers connected or on their way).
  The default strategy is written for a scaler whose queue length still
  counts the messages being processed (the docs recommend ``accurate``
  otherwise), so its queue length here is the master's waiting + running tasks.
  ``strategy=accurate`` reads waiting tasks only and creates
  ``maxReplicaCount − running`` if ``maxScale + running > maxReplicaCount``,
  else ``maxScale − pendingJobCount`` (pending: a Job none of whose pods is Running yet,
  ``getPendingJobCount``; a worker on its way whose pod runs, still starting or connecting,
  is not pending, where the backend says when its pod started: ``PendingWorker.started_at``).
  ``strategy=eager`` reads waiting tasks only too and creates ``min(maxReplicaCount −
  runningJobCount − pendingJobCount, maxScale)``: every free slot up to the maximum, at
  once (``eagerScalingStrategy``; KEDA's running count includes the pending jobs, so
  they are subtracted twice, as there).
- **A Job outlives its worker.** KEDA counts Job objects, and a Job is finished only once
  its pod has exited and the Job controller has marked it complete: seconds after the
  worker's last task ended (``job_end_s``; 7–12 s on the test cluster at 60 Jobs, measured
  by ``bench/replay.py`` from the Jobs themselves). Until then it holds a replica: a worker
  gone less than ``job_end_s`` ago counts as a running Job (when it left is read between
  two polls, as the midpoint).
- **One poll at a time, one call at a time.** A poll reads the scaler's metric (an HTTP GET
  the master answers between its own work; not modelled: it shows in the operator's log
  only when a poll runs past its interval, 0.04–1 s real on the test cluster), then, while
  the scaler is active, writes the ScaledJob's status (``RequestJobScale``: ``read_s``,
  with the count of its Jobs before it). It then creates its Jobs one API call after another
  (``create_call_s`` each, on an API server loaded with running Jobs: the k-th Job exists
  ``read_s + k·create_call_s`` after the poll began; into an idle cluster the server answers
  at once and KEDA's client limiter sets the pace, ``api_burst`` calls at once and then
  ``api_qps`` a second: ``--kube-api-burst`` 30 and ``--kube-api-qps`` 20 in
  ``cmd/operator/main.go``; its bucket is taken as full at each poll) and deletes, one
  call each, the finished Jobs beyond ``successfulJobsHistoryLimit`` (``history_limit``,
  KEDA's default 100; ``executor/scale_jobs.go`` ``createJobs``, ``cleanUp``). KEDA's scale loop waits ``pollingInterval``
  from the start of a poll, but only once the poll has ended (``pkg/scaling/
  scale_handler.go`` ``startScaleLoop``), so the next poll comes ``max(pollingInterval,
  the poll's calls)`` later: on an API server that deletes a Job in 0.4 s (the test
  cluster's, loaded, measured by ``bench/replay.py``), deleting 20 finished Jobs holds the
  loop 8 s.
- **Where its pods go.** ``packed`` (the default) gives its pods HTA's pod affinity: they
  fill nodes one by one, so a node whose Jobs are done empties, as generous a deployment as
  a user minding node·s would make. ``packed=false`` is the Job template as KEDA's docs
  give it, with no affinity: the default scheduler spreads its pods (``NodeResourcesFit``
  scores the least allocated node highest), so every node keeps a Job or two and few empty
  while Jobs come and go. ``bench/replay.py``'s twin of the real ScaledJob is that one.
- ``maxReplicaCount`` (``max_replicas``, KEDA's default 100; the cluster's cap
  applies too), ``minReplicaCount`` (``min_replicas``, default 0: while fewer
  jobs run, ``min − running`` are created); jobs are created only while the
  scaler is active (queue length > 0).

Settings: ``keda-job:tasks_per_job=3,polling_interval_s=30,max_replicas=20``
(also ``idle_timeout_s``, ``min_replicas``, ``strategy``, ``job_end_s``, ``history_limit``,
``read_s``, ``create_call_s``, ``delete_call_s``, ``api_qps``, ``api_burst``, ``packed``);
``keda-job-3`` is
``tasks_per_job=3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy, WorkerLifetime

#: KEDA's defaults
POLLING_INTERVAL_S = 30.0
MAX_REPLICA_COUNT = 100
SUCCESSFUL_JOBS_HISTORY_LIMIT = 100
#: the operator's client limiter (``--kube-api-qps``, ``--kube-api-burst``)
KUBE_API_QPS = 20.0
KUBE_API_BURST = 30
#: scalingStrategy.strategy values emulated ("custom" is not)
STRATEGIES = ("default", "accurate", "eager")


def jobs_to_create(queue_length: int, tasks_per_job: int, running_jobs: int, pending_jobs: int,
                   max_replicas: int, min_replicas: int = 0, strategy: str = "default") -> int:
    """KEDA's ScaledJob decision (``RequestJobScale`` / ``getScalingDecision``): jobs to create now."""
    if queue_length <= 0:  # the scaler is not active: KEDA creates nothing
        return 0
    max_scale = min(max_replicas, math.ceil(queue_length / max(1, tasks_per_job)))
    if running_jobs < min_replicas:
        return min_replicas - running_jobs
    running = running_jobs - min_replicas
    if strategy == "accurate":
        n = max_replicas - running if max_scale + running > max_replicas else max_scale - pending_jobs
    elif strategy == "eager":
        n = min(max_replicas - running - pending_jobs, max_scale)
    else:
        n = max_scale - running
    return max(0, n)


@dataclass
class KEDAJobPolicy(Policy):
    name: str = ""
    #: the scaler's target value: tasks a job's worker takes before it completes
    tasks_per_job: int = 1
    #: pollingInterval
    polling_interval_s: float = POLLING_INTERVAL_S
    #: maxReplicaCount
    max_replicas: int = MAX_REPLICA_COUNT
    #: minReplicaCount
    min_replicas: int = 0
    #: a job's worker completes after this long without a task (``work_queue_worker -t``)
    idle_timeout_s: float = 60.0
    #: scalingStrategy.strategy: "default", "accurate" or "eager"
    strategy: str = "default"
    #: seconds a Job still counts after its worker left (its pod's exit, the Job controller)
    job_end_s: float = 0.0
    #: successfulJobsHistoryLimit: finished Jobs kept; each one beyond is deleted in the poll
    history_limit: int = SUCCESSFUL_JOBS_HISTORY_LIMIT
    #: a poll's time before its first Create call while the scaler is active: the ScaledJob's
    #: status write (the metric's GET is not in it)
    read_s: float = 0.0
    #: one Job created, and one deleted, through the API server, as KEDA makes them: one at a time
    create_call_s: float = 0.0
    delete_call_s: float = 0.0
    #: the operator's client limiter: calls a second, and at once
    api_qps: float = KUBE_API_QPS
    api_burst: int = KUBE_API_BURST
    #: its pods prefer the nodes that hold its others (a pod affinity, as HTA's workers have),
    #: so nodes fill one by one, as a cost-minded user would give it; false: the Job template
    #: as KEDA's docs give it, whose pods the default scheduler spreads over the nodes
    packed: bool = True

    def __post_init__(self) -> None:
        self.name = self.name or (f"keda-job-{self.tasks_per_job}" if self.tasks_per_job != 1 else "keda-job")
        self.validate()
        #: the workers and Jobs seen at the last poll, and when each Job whose worker left is done
        self._seen: set[str] = set()
        self._last_poll: float | None = None
        self._ending: dict[str, float] = {}
        #: finished Jobs still there (KEDA deletes those beyond ``history_limit``)
        self._finished = 0
        #: the running poll's Jobs not created yet: when each will exist; and the next poll
        self._due: list[float] = []
        self._next_poll = 0.0

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"keda-job: strategy must be default, accurate or eager, not {self.strategy!r}")
        for key in ("read_s", "create_call_s", "delete_call_s", "job_end_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"keda-job: {key} is a time: give 0 or more, not {getattr(self, key):g}")
        if not self.api_qps > 0 or self.api_burst < 0:
            raise ValueError(f"keda-job: api_qps must be above 0 and api_burst 0 or more (KEDA's defaults: "
                             f"{KUBE_API_QPS:g} and {KUBE_API_BURST}), not {self.api_qps:g} and {self.api_burst}")

    @property
    def worker_lifetime(self) -> WorkerLifetime:
        return WorkerLifetime(max_tasks=max(1, int(self.tasks_per_job)), idle_timeout_s=self.idle_timeout_s)

    @property
    def packs_pods(self) -> bool:
        return self.packed

    def _finishing(self, obs: Observation) -> int:
        """Jobs whose worker has left but which KEDA still counts (``job_end_s``)."""
        here = {w.id for w in obs.workers} | {p.id for p in obs.pending}
        if self._last_poll is not None:
            left_at = (self._last_poll + obs.time) / 2
            for gone in self._seen - here:
                self._ending[gone] = left_at + self.job_end_s
        done = {w for w, end in self._ending.items() if end <= obs.time}
        self._finished += len(done)
        self._ending = {w: end for w, end in self._ending.items() if w not in done}
        self._seen, self._last_poll = here, obs.time
        return len(self._ending)

    def decide(self, obs: Observation) -> ScaleDecision:
        running_jobs = len(obs.workers) + len(obs.pending) + self._finishing(obs)
        if self._due:  # (a poll still making its calls)
            return self._go_on(obs, running_jobs)
        queue = obs.waiting_count + (len(obs.running) if self.strategy == "default" else 0)
        # (a Job whose pod runs is not pending, its worker connected or not: ``getPendingJobCount``)
        pending = sum(1 for p in obs.pending if p.started_at is None or p.started_at > obs.time)
        new = jobs_to_create(queue, self.tasks_per_job, running_jobs, pending, self.max_replicas,
                             self.min_replicas, self.strategy)
        deleted = max(0, self._finished - self.history_limit)
        self._finished -= deleted
        read = self.read_s if queue > 0 else 0.0  # (an inactive scaler writes no status)
        self._due = self._calls(obs.time + read, new, loaded=running_jobs > 0)
        calls_end = self._due[-1] if self._due else obs.time + read
        self._next_poll = max(obs.time + self.polling_interval_s, calls_end + self.delete_call_s * deleted)
        now = self._created(obs.time)
        return ScaleDecision(add=now, shape=obs.worker_shape, next_decision_s=self._wait(obs.time),
                             target_workers=running_jobs + now,
                             reason=f"queue {queue} / {self.tasks_per_job} per job, max {self.max_replicas}, "
                                    f"{running_jobs} running jobs: create {new}"
                                    + (f", delete {deleted} finished" if deleted else ""))

    def _calls(self, start: float, n: int, loaded: bool) -> list[float]:
        """When each of ``n`` Create calls made one after another from ``start`` returns: a
        loaded server's ``create_call_s`` each, never faster than the client limiter lets."""
        ends, t = [], start
        for k in range(n):
            t += max(self.create_call_s if loaded else 0.0, 1.0 / self.api_qps if k >= self.api_burst else 0.0)
            ends.append(t)
        return ends

    def _created(self, now: float) -> int:
        """The running poll's Jobs whose create call has returned by ``now`` (taken off)."""
        n = sum(1 for t in self._due if t <= now + 1e-9)
        del self._due[:n]
        return n

    def _wait(self, now: float) -> float:
        """Until the poll's next Job exists, or else its next poll. (A controller that asks
        no sooner than its floor, the simulator's ``min_interval_s``, makes the Jobs due
        within it at once: KEDA's own loop has no such floor.)"""
        return (self._due[0] if self._due else self._next_poll) - now

    def _go_on(self, obs: Observation, running_jobs: int) -> ScaleDecision:
        """Between polls: the Jobs the running poll has created since (one call each)."""
        new = self._created(obs.time)
        return ScaleDecision(add=new, shape=obs.worker_shape, next_decision_s=self._wait(obs.time),
                             target_workers=running_jobs + new,
                             reason=f"{running_jobs} running jobs: create {new} (the poll's calls)" if new
                             else f"{running_jobs} running jobs: between polls")
