"""What the estimator may be told (:class:`EstimatorOptions`) and what it answers
(:class:`Estimate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hta.model import TaskGroup


@dataclass
class EstimatorOptions:
    #: tasks the DAG releases within the horizon join the queue
    lookahead: bool = True
    #: do not buy workers that would arrive after the work they are bought for is gone
    tail_aware: bool = True
    #: a release waiting on many tasks comes when the slowest of them ends (the
    #: median of their maximum), not when the average one does (lookahead only)
    barrier_aware: bool = True
    #: tail awareness: a worker is bought only if the backlog keeps it busy for this many
    #: mean task runtimes once it is there (1: the thesis's rule; more buys fewer workers,
    #: a cheaper and slower run; it must be > 0 — turn ``tail_aware`` off for no cap)
    busy_runtimes: float = 1.0
    #: tail awareness: ``busy_runtimes`` asks no more than this many preparation latencies
    #: of busy time, and never less than one task runtime (0: no such bound). The latency
    #: is what a worker pays before it works, so b latencies of work keep it at most
    #: 1/(b+1) of its bill whatever its tasks' length; k runtimes of a stage of long tasks
    #: ask far more, and a cost setting ran them in rounds to save a latency per worker.
    #: Measured tasks only: never-measured ones still get a worker per ``unmeasured_rounds``
    #: of them
    busy_latencies: float = 0.0
    #: the task runtime ρ that ``busy_latencies`` counts rounds in: ``mean`` (r) or ``p90``
    #: (each waiting category's measured 90th percentile, at least its mean, weighted by its
    #: tasks). The busy time asked is r × rounds, rounds = b·L / ρ kept within [1, k]. While
    #: a stage runs its measurements are its first completions, its shortest, and b·L does
    #: not scale with r as k·r does (docs/decisions/0014-presets.md)
    busy_latencies_runtime: Literal["mean", "p90"] = "mean"
    #: tail awareness: never-measured tasks left at the horizon get one worker per this
    #: many (at least ``busy_runtimes``; measured ones are capped on their own). Each such
    #: task takes a whole worker, but only until one of its category ends: then the rest
    #: are packed by what it used, so a worker bought for two runs the second, and its
    #: category's later ones beside it
    unmeasured_per_worker: float = 1.0
    #: buy no more workers than the master's link can feed (:mod:`hta.estimator.link`)
    link_aware: bool = True
    #: tail awareness: never-measured tasks of a category whose first tasks already run get
    #: no worker until one of those ends or they have run this many latencies (0: buy at
    #: once). A first finisher measures the category, and the cap on measured tasks then
    #: buys what its backlog keeps busy, where a worker per task would have been bought for
    #: tasks of seconds, each paying a latency (and, under the cluster autoscaler, its
    #: node's 10-minute hold); tasks that run longer wait this long for theirs
    first_finish_latencies: float = 0.25
    #: tail awareness: buy for work the DAG releases after a never-measured task ends, as if
    #: it ended when the play guesses (a short prior, or as long again as it has run). Off:
    #: such work is bought for once it is released or its gate measured; bought ahead, the
    #: workers of a stage whose first task was short idled through the rest, each paying a
    #: latency and its node's hold
    buy_for_gated: bool = False

    @property
    def unmeasured_rounds(self) -> float:
        """u: how many never-measured tasks in a row a worker bought for them is to run."""
        return max(self.busy_runtimes, self.unmeasured_per_worker)


@dataclass
class Estimate:
    horizon_s: float
    #: waiting tasks left at the horizon, in queue order
    left_waiting: list[TaskGroup]
    #: workers idle now that the play never gave a task
    unused_idle: list[str]
    #: workers to buy (after packing and tail awareness, before max_workers)
    workers_needed: int
    #: workers the leftover tasks would fill, before tail awareness (those bought for: not
    #: the work behind a never-measured task, unless ``buy_for_gated``)
    packed_need: int
    backlog_core_s: float = 0.0
    #: (time, tasks) the DAG is expected to release within the horizon
    releases: list[tuple[float, int]] = field(default_factory=list)
    #: (cores, seconds) measured tasks running at the horizon still hold after it: the
    #: capacity they hold is not free to drain the leftover tasks until they end
    inflight: list[tuple[float, float]] = field(default_factory=list)
    #: what held ``workers_needed`` below the shortage other than tail awareness, in a
    #: user's words (the master's link: :mod:`hta.estimator.link`); None: nothing did
    limit: str | None = None
    #: never-measured categories bought nothing for until a first task of theirs ends
    #: (``first_finish_latencies``)
    awaiting_first: list[str] = field(default_factory=list)
    #: tasks left at the horizon behind a never-measured task, not bought for (``buy_for_gated``)
    gated_count: int = 0

    @property
    def inflight_core_s(self) -> float:
        return sum(c * s for c, s in self.inflight)

    @property
    def left_count(self) -> int:
        return sum(g.count for g in self.left_waiting)
