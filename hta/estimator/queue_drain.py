"""The queue-drain estimator behind HTA's policy: how many workers to buy, and which idle
ones to drain.

Given an :class:`~hta.model.Observation` and the preparation latency L, play the next L
seconds forward (:class:`~hta.estimator.play.DrainPlay`). What still waits at the horizon
is the shortage to buy now, packed into the worker shape, capped by tail awareness and by
what the master's link can feed (:mod:`hta.estimator.link`);
workers idle now that the play never needed are the waste to drain.
"""

from __future__ import annotations

import math

from hta.estimator.forecast import p90_runtime, runtime_of
from hta.estimator.link import link_limit, waits_on_link
from hta.estimator.options import Estimate, EstimatorOptions
from hta.estimator.play import DrainPlay, fit_in
from hta.estimator.releases import BarrierMemo
from hta.model import Observation, Resources, TaskGroup


class QueueDrainEstimator:
    """The estimator. ``estimate()`` is a pure function of its input; the one state kept,
    a :class:`~hta.estimator.releases.BarrierMemo`, only spares the plays of one observation computing its barrier
    times again."""

    def __init__(self, options: EstimatorOptions | None = None):
        self.options = options or EstimatorOptions()
        self._barriers = BarrierMemo()

    def estimate(self, obs: Observation, horizon_s: float) -> Estimate:
        """Play the queue to the horizon, then size what is left: packed into
        workers of the shape, capped by tail awareness. The horizon is the preparation
        latency L (what a worker bought now waits), which ``busy_latencies`` counts in."""
        play = DrainPlay(obs, horizon_s, self.options, barrier_memo=self._barriers)
        play.run()
        left = play.left_waiting()
        # (tail-aware: work the play released after a never-measured task is bought for once
        # it is released, or its gate measured; the guessed end says nothing of when it comes)
        sized = left if self.options.buy_for_gated or not self.options.tail_aware else play.left_waiting(gated=False)
        packed = self._pack(sized, obs.worker_shape)
        backlog = self._backlog(obs, sized)
        awaiting = self._awaiting_first(obs, sized, horizon_s) if self.options.tail_aware else []
        needed = self._needed(obs, play, sized, awaiting, horizon_s)
        limit = None
        if needed > 0 and self.options.link_aware:
            # the link limits the workers for tasks that wait on it; those for the others
            # (a stage of small inputs behind one of large ones) are bought as they would be
            heavy: list[TaskGroup] = []
            light: list[TaskGroup] = []
            for g in sized:
                (heavy if waits_on_link(obs, g, horizon_s) else light).append(g)
            link = link_limit(obs, heavy, horizon_s) if heavy else None
            if link is not None:
                for_heavy = self._needed(obs, play, heavy, awaiting, horizon_s) if light else needed
                if link.workers < for_heavy:
                    needed = min(needed, link.workers + (self._needed(obs, play, light, awaiting, horizon_s)
                                                         if light else 0))
                    limit = link.reason
        gated = sum(g.count for g in left) - sum(g.count for g in sized)
        return Estimate(horizon_s, left, play.unused_idle(), needed, packed, backlog, play.releases.released,
                        play.inflight, limit, awaiting, gated)

    def _needed(self, obs: Observation, play: DrainPlay, groups: list[TaskGroup], awaiting: list[str],
                horizon_s: float) -> int:
        """Workers to buy for ``groups`` left at the horizon: packed into the shape, capped by
        tail awareness (no worker for a category ``awaiting`` its first finisher)."""
        packed = self._pack(groups, obs.worker_shape)
        if not self.options.tail_aware or packed <= 0:
            return packed
        # workers on their way are credited only when each is to run u > 1 rounds
        started = play.unmeasured_started() if self.options.unmeasured_rounds > 1 else None
        capped = [g for g in groups if g.category not in awaiting] if awaiting else groups
        return min(packed, self._tail_cap(obs, capped, self._backlog(obs, groups), play.inflight, started,
                                          horizon_s))

    def _awaiting_first(self, obs: Observation, left: list[TaskGroup], latency_s: float) -> list[str]:
        """The never-measured categories left waiting whose first tasks run now, none of them
        for ``first_finish_latencies`` latencies yet: one of them ending soon measures the
        category, and then its backlog is bought for by what it measured."""
        wait_s = self.options.first_finish_latencies * latency_s
        if wait_s <= 0:
            return []
        unmeasured = {g.category for g in left if runtime_of(obs.categories, g.category) is None}
        if not unmeasured:
            return []
        longest: dict[str, float] = {}
        for t in obs.running:
            if t.category in unmeasured:
                longest[t.category] = max(longest.get(t.category, 0.0), obs.time - t.started_at)
        return sorted(c for c, ran in longest.items() if ran < wait_s)

    def unused_idle(self, obs: Observation, latency_s: float, horizon_s: float,
                    measured_only: bool = False) -> list[str]:
        """Workers idle now that a play to ``horizon_s`` (pending workers still one
        ``latency_s`` after their request) never gives a task (``measured_only``: a task
        released without waiting on a never-measured one, whose end the play guesses)."""
        return self.idle_work(obs, latency_s, horizon_s, measured_only)[0]

    def idle_work(self, obs: Observation, latency_s: float, horizon_s: float,
                  measured_only: bool = False) -> tuple[list[str], dict[str, set[str]]]:
        """:meth:`unused_idle`, and the categories the same play gives each worker idle now
        (a worker not in the first list with ``measured_only`` is played until the horizon, so
        what it is given there is complete)."""
        play = DrainPlay(obs, horizon_s, self.options, latency_s, until_idle_used=True,
                          measured_only=measured_only, barrier_memo=self._barriers)
        play.run()
        return play.unused_idle(), play.given_idle()

    @staticmethod
    def _backlog(obs: Observation, left: list[TaskGroup]) -> float:
        """Core·seconds of the leftover tasks (a whole-worker task holds the shape's cores;
        a never-measured one counts 0: its runtime is unknown)."""
        shape, models = obs.worker_shape, obs.categories
        return sum(
            g.count * (shape.cores if g.whole_worker else g.request.cores) * (runtime_of(models, g.category) or 0.0)
            for g in left
        )

    @staticmethod
    def _pack(left: list[TaskGroup], shape: Resources) -> int:
        """Workers of ``shape`` that hold the leftover tasks (fractional bin packing, rounded up)."""
        need = 0.0
        for g in left:
            per = fit_in(g.request, shape)
            if per <= 0:
                continue  # never fits a worker of this shape: buying does not help
            need += g.count / per
        return math.ceil(need - 1e-9)

    def _tail_cap(self, obs: Observation, left: list[TaskGroup], backlog_core_s: float,
                  inflight: list[tuple[float, float]], started: dict[str, float] | None = None,
                  latency_s: float | None = None) -> int:
        """Buy no more workers than the backlog keeps busy for ``busy_runtimes`` task runtimes
        (or ``busy_latencies`` latencies, if that is less but at least one runtime).

        Measured tasks: after the horizon their backlog B (core·s) drains on the capacity C
        that exists or is coming; a new worker of c cores earns its keep only if the drain
        still lasts at least k task runtimes r once it is there (k = 1 by default):
        W / (C + n·c) ≥ k·r  ⇔  n ≤ (W/(k·r) − C)/c (rounded up: tasks are whole), where
        W = B plus, for each task still running at the horizon, its cores times how long it
        runs on, up to k·r: a core busy that long is a core C does not have for the drain.
        A worker drains only the tasks that fit in it: W is divided by the share of a
        worker's cores they can use (2-core tasks on 3-core workers: ⅔, one at a time).
        With ``busy_latencies`` b > 0 and the latency L given (``latency_s``: the horizon),
        the busy time asked is r·min(k, max(1, b·L/ρ)), where ρ is r or the tasks'
        90th-percentile runtime (``busy_latencies_runtime``); with ρ = r that is
        min(k·r, max(r, b·L)). Never under r unless k·r is.

        Never-measured tasks have no runtime: one worker is bought for every
        u = max(k, ``unmeasured_per_worker``) of their packed need (each is to run about u
        of them in a row, as a KEDA job of u tasks does); u ≤ 1: one each, no cap. A worker
        the play starts on such tasks (``started``: workers' worth of them, by category;
        one on its way, idle now, or freed within the horizon) is to run them u − 1 more
        times over: that many of those left are taken off before the cap, or every decision
        would buy again a u-th of what the workers on their way will run. A worker running
        such a task now is not counted for more: each latency still buys for a u-th of what
        waits while the first ones run, a ramp (docs/decisions/0005-tail-awareness.md).
        """
        k = self.options.busy_runtimes
        measured: list[tuple[TaskGroup, float]] = []
        unmeasured: list[TaskGroup] = []
        for g in left:
            rt = runtime_of(obs.categories, g.category)
            if rt is None:
                unmeasured.append(g)
            else:
                measured.append((g, rt))
        cap = 0
        if unmeasured:
            u = self.options.unmeasured_rounds
            if u > 1:
                unmeasured = self._credit_first_runs(unmeasured, started or {}, u - 1, obs.worker_shape)
            need = self._pack(unmeasured, obs.worker_shape)
            cap += math.ceil(need / u - 1e-9) if u > 1 else need
        tasks = sum(g.count for g, _ in measured)
        if tasks == 0 or backlog_core_s <= 0:
            return cap
        mean_s = sum(rt * g.count for g, rt in measured) / tasks
        busy_s = k * mean_s  # the busy time asked of a worker bought
        if self.options.busy_latencies > 0 and latency_s:
            round_s = mean_s
            if self.options.busy_latencies_runtime == "p90":
                round_s = sum(p90_runtime(obs.categories, g.category, rt) * g.count for g, rt in measured) / tasks
            busy_s = mean_s * min(k, max(1.0, self.options.busy_latencies * latency_s / round_s))
        work = backlog_core_s + sum(cores * min(seconds, busy_s) for cores, seconds in inflight)
        capacity = sum(w.capacity.cores for w in obs.workers) + sum(p.shape.cores for p in obs.pending)
        c = obs.worker_shape.cores or 1.0
        work /= self._usable_share(measured, obs.worker_shape)
        return cap + max(0, math.ceil((work / busy_s - capacity) / c - 1e-9))

    @staticmethod
    def _credit_first_runs(unmeasured: list[TaskGroup], started: dict[str, float], more: float,
                           shape: Resources) -> list[TaskGroup]:
        """The never-measured groups left once each worker's worth of their category the play
        started runs ``more`` rounds of them after it (from the back of the queue; a round is
        as many tasks of a group as a worker of ``shape`` holds)."""
        rounds = {c: n * more for c, n in started.items()}
        kept: list[TaskGroup] = []
        for g in reversed(unmeasured):
            per = fit_in(g.request, shape)
            off = min(g.count, math.floor(rounds.get(g.category, 0.0) * per + 1e-9)) if per > 0 else 0
            if off:
                rounds[g.category] -= off / per
            if g.count - off > 0:
                kept.append(g if not off else g.model_copy(update={"count": g.count - off}))
        kept.reverse()
        return kept

    @staticmethod
    def _usable_share(measured: list[tuple[TaskGroup, float]], shape: Resources) -> float:
        """The share of a worker's cores the measured tasks left can use, weighted by their
        work: as many as fit in a worker of ``shape`` (by cores, memory and disk), each its
        cores; a whole-worker task uses it all. 1 when nothing tells."""
        used = taken = 0.0
        for g, rt in measured:
            per = fit_in(g.request, shape)
            if per <= 0 or shape.cores <= 0:
                continue  # never fits: buying does not help (see _pack)
            cores = shape.cores if g.whole_worker else g.request.cores
            used += g.count * rt * cores
            taken += g.count * rt * shape.cores / per
        return min(1.0, used / taken) if used > 0 and taken > 0 else 1.0
