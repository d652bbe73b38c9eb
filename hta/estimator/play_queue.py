"""The play's queue: the waiting groups in the master's order.

Groups are kept oldest first, as the master was given them, and played newest first, as it
dispatches (:mod:`workqueue_bridge.dispatch`). A group the DAG releases during the play
joins at the newest end; groups released together (one batch of makeflow's, submitted
last-in-the-file first) sit in the file's reverse order, so the first in the file is
dispatched first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hta.model import CategoryModel, Resources, TaskGroup

INF = float("inf")


@dataclass(slots=True)
class PlayGroup:
    """Waiting (or released) tasks of one kind, with what lookahead needs: batches still
    running and when the group's last task finished."""

    id: str | None
    category: str
    count: int
    request: Resources
    request_key: int  # equal requests, equal keys (see DrainPlay._fit)
    runtime: float | None
    model: CategoryModel | None = None
    inflight: int = 0
    #: released after a never-measured task or batch ends (directly, or through groups
    #: released after one): when that is, the play guesses, from how long such tasks have
    #: run or from a short prior
    after_unmeasured: bool = False
    blocked: bool = False  # a task of it will not finish within the horizon
    finished_at: float | None = None
    #: never-measured tasks of it the play started (see QueueDrainEstimator._tail_cap)
    started_unmeasured: int = 0


class PlayQueue:
    """The groups in the master's order; see the module."""

    def __init__(self) -> None:
        self.groups: list[PlayGroup] = []
        #: indices of the groups with tasks left (and some emptied ones not pruned yet),
        #: oldest first: :meth:`newest_first` reads it from the end, where most groups empty
        self.live: list[int] = []
        self._dead = 0  # emptied groups still in live
        #: the releases of the time now handled, as their groups' indices (one batch)
        self._batch_at = -INF
        self._batch: list[int] = []

    def __getitem__(self, gi: int) -> PlayGroup:
        return self.groups[gi]

    def start_with(self, groups: list[PlayGroup]) -> None:
        """The waiting groups of the observation, oldest first."""
        self.groups = groups
        self.live = [gi for gi, g in enumerate(groups) if g.count > 0]

    def newest_first(self) -> Iterator[int]:
        return reversed(self.live)

    def release(self, group: PlayGroup, at: float) -> int:
        """A group the DAG released at ``at`` joins the queue as the master would get it:
        after everything older; among groups released at the same time, before those the
        file lists first. Returns its index."""
        gi = len(self.groups)
        self.groups.append(group)
        if group.count <= 0:
            return gi
        live = self.live
        if at != self._batch_at:
            self._batch_at, self._batch = at, []
        # the batch's groups sit together at the end, the first in the file last: this one goes
        # before the one that joined last (and is still there)
        anchor = next((b for b in reversed(self._batch) if b in live), None)
        if anchor is None:
            live.append(gi)
        else:
            live.insert(live.index(anchor), gi)
        self._batch.append(gi)
        return gi

    def prune(self, emptied: int) -> None:
        """``emptied`` more groups have no task left: drop those at the newest end (amortised
        O(1) a fill, as most groups empty there), and the rest once they are more than half of
        what is left (a scan now and then, not at every fill)."""
        groups, live = self.groups, self.live
        self._dead += emptied
        while live and not groups[live[-1]].count:
            live.pop()
            self._dead -= 1
        if self._dead > 16 and 2 * self._dead > len(live):
            self.live = [gi for gi in live if groups[gi].count]
            self._dead = 0

    def left_waiting(self, gated: bool | None = None) -> list[TaskGroup]:
        """Tasks still waiting, in queue order (``gated``: only those released after a
        never-measured task, or only the others)."""
        return [TaskGroup(category=g.category, count=g.count, request=g.request, id=g.id)
                for g in self.groups if g.count > 0 and (gated is None or g.after_unmeasured == gated)]
