"""How Work Queue places a task, written once.

The estimator (which plays the queue forward to size the cluster) and the
simulator (which plays the real queue) both call these functions, so the
rule they model cannot drift apart:

- **What a task is given** (:func:`allocation_request`): a task that failed
  for exceeding its allocation is retried on a whole worker; a task that
  declares resources gets what it declares; a task that declares nothing gets
  its category's measured peak once the master has measured the category
  (``auto`` allocation, makeflow ``--allocation=throughput``), otherwise a
  whole worker. ``Resources()`` stands for "a whole worker".
- **Where it goes** (:func:`fit_count`, :func:`first_fit`): each waiting task, in
  the master's order, to the first worker (in connection order) with room; a
  whole-worker task needs a worker that runs nothing.
- **The master's order**: newest first. CCTools' master inserts each task it is
  given at the head of its ready list (``list_push_priority``: before the first
  task of no higher priority, and makeflow sets none) and dispatches from the head;
  makeflow submits the rules that became ready together last-in-the-file first. So a
  task a completion released runs before every older waiting one, and one batch runs
  in the file's order (``tests/test_sim_rules.py``, on the real master). The simulator
  and the estimator play that order: the waiting groups are read in task-id order, the
  master's submission order, and played from the newest. (A task a lost worker sends back
  keeps its id, so the estimator plays it as old where the master gives it first: rare
  and short-lived, left as it is.)

The thesis's Algorithm 1 in ``hta/sim/algorithm1.py`` is deliberately *not*
built on this module: it is the literal transcription the estimator is
compared with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol, TypeVar

from workqueue_bridge.resources import Resources

EPS = 1e-9
WHOLE_WORKER = Resources()


class Amounts(Protocol):
    """Cores, memory (MB) and disk (MB) to read: a :class:`Resources`, or a
    mutable tally such as the estimator's free room on a worker (which would
    otherwise build a validated ``Resources`` at every dispatch it plays)."""

    @property
    def cores(self) -> float: ...

    @property
    def memory_mb(self) -> float: ...

    @property
    def disk_mb(self) -> float: ...


class Measured(Protocol):
    """What the master knows of a category once it has measured tasks of it (the resource
    monitor's :class:`~resource_monitor.model.CategoryModel` is one)."""

    @property
    def measured(self) -> bool: ...

    @property
    def peak(self) -> Resources: ...


def is_whole_worker(request: Resources) -> bool:
    """A request of nothing means "the whole worker" (Work Queue's rule)."""
    return request.cores <= 0 and request.memory_mb <= 0 and request.disk_mb <= 0


def allocation_request(declared: Resources | None, model: Measured | None, *, auto: bool = False,
                       exceeded: bool = False) -> Resources:
    """What the master will allocate a task (``Resources()``: a whole worker)."""
    if exceeded:
        return WHOLE_WORKER
    if declared is not None and not is_whole_worker(declared):
        return declared
    if auto and model is not None and model.measured:
        return Resources(cores=model.peak.cores, memory_mb=model.peak.memory_mb, disk_mb=model.peak.disk_mb)
    return WHOLE_WORKER


def fit_count(request: Resources, free: Amounts, capacity: Amounts, limit: int) -> int:
    """How many tasks asking ``request`` a worker with ``free`` of ``capacity`` can start now,
    at most ``limit``. A whole-worker task fits once, on a worker that runs nothing: all its
    cores and memory free (disk is not asked: a worker's disk in use also holds its cache of
    input files, which a task that runs alone there does not need freed)."""
    if limit <= 0:
        return 0
    if is_whole_worker(request):
        entirely_free = free.cores >= capacity.cores - EPS and free.memory_mb >= capacity.memory_mb - EPS
        return 1 if entirely_free else 0
    k = limit
    for want, have in ((request.cores, free.cores), (request.memory_mb, free.memory_mb),
                       (request.disk_mb, free.disk_mb)):
        if want > 0:
            k = min(k, math.floor(max(have, 0.0) / want + EPS))
    return max(k, 0)


def allocated(request: Resources, capacity: Resources) -> Resources:
    """The resources a started task holds: the whole worker for a whole-worker request."""
    return capacity if is_whole_worker(request) else request


class HasRoom(Protocol):
    @property
    def free(self) -> Resources: ...

    @property
    def capacity(self) -> Resources: ...


W = TypeVar("W", bound=HasRoom)


def first_fit(request: Resources, workers: Iterable[W]) -> W | None:
    """The first worker (in connection order) that can start a task asking ``request``."""
    for w in workers:
        if fit_count(request, w.free, w.capacity, 1):
            return w
    return None
