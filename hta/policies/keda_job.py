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
  else ``maxScale − pendingJobCount`` (pending: workers not connected yet).
  ``strategy=eager`` reads waiting tasks only too and creates ``min(maxReplicaCount −
  runningJobCount − pendingJobCount, maxScale)``: every free slot up to the maximum, at
  once (``eagerScalingStrategy``; KEDA's running count includes the pending jobs, so
  they are subtracted twice, as there).
- ``maxReplicaCount`` (``max_replicas``, KEDA's default 100; the cluster's cap
  applies too), ``minReplicaCount`` (``min_replicas``, default 0: while fewer
  jobs run, ``min − running`` are created); jobs are created only while the
  scaler is active (queue length > 0).

Settings: ``keda-job:tasks_per_job=3,polling_interval_s=30,max_replicas=20``
(also ``idle_timeout_s``, ``min_replicas``, ``strategy``); ``keda-job-3`` is
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

    def __post_init__(self) -> None:
        self.name = self.name or (f"keda-job-{self.tasks_per_job}" if self.tasks_per_job != 1 else "keda-job")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"keda-job: strategy must be default, accurate or eager, not {self.strategy!r}")

    @property
    def worker_lifetime(self) -> WorkerLifetime:
        return WorkerLifetime(max_tasks=max(1, int(self.tasks_per_job)), idle_timeout_s=self.idle_timeout_s)

    def decide(self, obs: Observation) -> ScaleDecision:
        running_jobs = len(obs.workers) + len(obs.pending)
        queue = obs.waiting_count + (len(obs.running) if self.strategy == "default" else 0)
        new = jobs_to_create(queue, self.tasks_per_job, running_jobs, len(obs.pending), self.max_replicas,
                             self.min_replicas, self.strategy)
        return ScaleDecision(add=new, shape=obs.worker_shape, next_decision_s=self.polling_interval_s,
                             target_workers=running_jobs + new,
                             reason=f"queue {queue} / {self.tasks_per_job} per job, max {self.max_replicas}, "
                                    f"{running_jobs} running jobs: create {new}")
