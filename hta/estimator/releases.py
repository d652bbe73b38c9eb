"""Lookahead in the play: which upcoming groups the DAG releases, and when.

An upcoming group is released once everything in its ``after`` has completed: running tasks
(at their expected end, or for a barrier over many of them when the slowest is likely to
end), waiting or released groups (when their last batch ends), other upcoming groups. A
release is a :class:`TaskReleased` event of the play; a group released after a
never-measured task is marked so, since when that task ends is a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from hta.estimator.forecast import barrier_wait
from hta.model import Observation, UpcomingTasks

INF = float("inf")


class TaskReleased(NamedTuple):
    """Lookahead: the DAG releases an upcoming group (everything it waits for is done)."""

    at: float
    upcoming_index: int


class BarrierMemo:
    """The barrier times (:func:`barrier_times`) of the last observation played.

    One decision plays the same observation several times (HTA's policy plays it once to
    choose a worker shape and again with that shape; draining plays it to the hold's
    horizon), and barrier times depend only on what the plays share: the running tasks, the
    DAG's upcoming groups, the learned categories and the time. A copy of an observation
    with another worker shape (``model_copy``) holds the same lists, so they are compared by
    identity and the memo keeps them alive: an id is never reused while held."""

    def __init__(self) -> None:
        self._key: tuple[object, object, object, float] | None = None
        self._value: dict[str, float] = {}

    def get(self, obs: Observation, compute: Callable[[], dict[str, float]]) -> dict[str, float]:
        key = (obs.running, obs.upcoming, obs.categories, obs.time)
        held = self._key
        if held is None or any(a is not b for a, b in zip(held[:3], key[:3])) or held[3] != key[3]:
            self._value = compute()
            self._key = key
        return self._value


def barrier_times(obs: Observation, upcoming: list[UpcomingTasks], measured: Callable[[str], bool]) -> dict[str, float]:
    """A group waiting on several running tasks is released when the slowest ends
    (:func:`barrier_wait`), so each of those tasks counts as done then, for releases only
    (its resources still come back at its own expected end). Returns task ref → that time."""
    now = obs.time
    running = {f"task:{t.task_id}": t for t in obs.running if measured(t.category)}
    out: dict[str, float] = {}
    for up in upcoming:
        parents = [running[ref] for ref in up.after if ref in running]
        if len(parents) < 2:
            continue
        at = now + barrier_wait([(obs.categories[t.category], now - t.started_at) for t in parents])
        for t in parents:
            ref = f"task:{t.task_id}"
            out[ref] = max(out.get(ref, at), at)
    return out


class Releases:
    """Who waits for what, and the releases scheduled; ``push`` puts a release on the
    play's event heap."""

    def __init__(self, upcoming: list[UpcomingTasks], end: float, push: Callable[[TaskReleased], None]):
        self.upcoming = upcoming
        self.end = end
        self._push = push
        #: upcoming groups waiting for a ref, refs each still misses, release times
        self._waiting_for: dict[str, list[int]] = {}
        self._missing: list[int] = []
        self._released_at: list[float] = [INF] * len(upcoming)
        #: refs (tasks, groups) that are or come after a never-measured task, and the upcoming
        #: groups released after one
        self.unmeasured_refs: set[str] = set()
        self.after_unmeasured: list[bool] = [False] * len(upcoming)
        #: releases scheduled, by time, not handled yet: a slot freed at such a time waits for
        #: them, since the master gives what a completion releases before older tasks
        self.due: dict[float, int] = {}
        #: (time, tasks) released, in the order handled
        self.released: list[tuple[float, int]] = []
        for k, up in enumerate(upcoming):
            self._missing.append(len(up.after))
            for ref in up.after:
                self._waiting_for.setdefault(ref, []).append(k)

    def schedule(self, event: TaskReleased) -> None:
        self._push(event)
        self.due[event.at] = self.due.get(event.at, 0) + 1

    def waits_for(self, at: float) -> bool:
        """Whether what frees up at ``at`` waits for groups released at ``at`` (newest first:
        they come before every older waiting task; their handler fills every slot with room)."""
        return self.due.get(at, 0) > 0

    def start(self, task_done: dict[str, float], now: float) -> None:
        """Complete the running tasks expected done within the horizon; groups waiting for
        nothing are released ``now``."""
        if not self.upcoming:
            return
        for ref, at in task_done.items():
            if at <= self.end and ref in self._waiting_for:
                self.complete(ref, at)
        for k, up in enumerate(self.upcoming):
            if not up.after:
                self.schedule(TaskReleased(now, k))

    def complete(self, ref: str, t: float) -> None:
        """``ref`` (a task or a group) completed at ``t``: release what waited only for it."""
        unmeasured = ref in self.unmeasured_refs
        for k in self._waiting_for.get(ref, ()):
            self._missing[k] -= 1
            if unmeasured:
                self.after_unmeasured[k] = True
            before = self._released_at[k]
            self._released_at[k] = t if before == INF else max(before, t)
            if self._missing[k] == 0 and self._released_at[k] <= self.end:
                self.schedule(TaskReleased(self._released_at[k], k))

    def handled(self, ev: TaskReleased) -> UpcomingTasks:
        """The release ``ev`` is being handled: it is due no more. Returns its group."""
        left = self.due[ev.at] - 1
        if left:
            self.due[ev.at] = left
        else:
            del self.due[ev.at]  # (an empty dict: no slot freed from now on waits)
        up = self.upcoming[ev.upcoming_index]
        self.released.append((ev.at, up.count))
        return up
