"""How long running tasks have left, from what their categories measured.

A category's measurements are its completed tasks' runtimes; the forecasts here read them
as a distribution (:meth:`~resource_monitor.model.CategoryModel.runtime_knots`): a running
task's expected remaining time (:func:`expected_remaining`), when the slowest of a batch
ends (:func:`batch_last_runtime`), and when the last of many running tasks ends, which is
when a barrier waiting on all of them is released (:func:`barrier_wait`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from hta.model import CategoryModel, Observation

#: a running task past its expected runtime is assumed to need this fraction more
OVERDUE_FRACTION = 0.1
#: a running task past this many times its category's p90 runtime is an outlier
OUTLIER_FACTOR = 2.0
#: a category's measurements are its short tasks (:func:`outrun_categories`) once as
#: many of its running tasks have run this many times its longest measured runtime as
#: were measured; a stage's tasks started together, just past the one measured, are not
OUTRUN_MARGIN = 1.2


def runtime_of(models: dict[str, CategoryModel], category: str) -> float | None:
    """A measured category's mean runtime (None: never measured, or unknown)."""
    m = models.get(category)
    if m is None or not m.measured:
        return None
    return m.runtime_mean_s


def p90_runtime(models: dict[str, CategoryModel], category: str, mean_s: float) -> float:
    """A measured category's 90th-percentile runtime (never under its mean)."""
    m = models.get(category)
    p90 = m.runtime_p90_s if m is not None else None
    return max(mean_s, p90 or mean_s)


def expected_remaining(elapsed: float, model: CategoryModel, past_longest: bool = False) -> float:
    """How much longer a running task of a measured category should take.

    Before its mean runtime: the rest of the mean. Past the mean: a little more
    (``OVERDUE_FRACTION`` of the mean) — the category's ordinary stragglers.
    Past ``OUTLIER_FACTOR`` × its p90 it is an outlier (a task much larger than
    its category's usual ones): it is expected to run about as long again as it
    already has, instead of looking "about to end" at every decision.

    ``past_longest`` (for a category in :func:`outrun_categories`): so is a task that
    has run longer than any of its category has. Nothing measured says how much is left,
    and the measurements are the category's first completions, its shortest
    (docs/decisions/0004-forecasting-running-tasks.md).
    """
    mean = model.runtime_mean_s or 0.0
    if elapsed < mean:
        return mean - elapsed
    p90 = model.runtime_p90_s or mean
    ordinary = OUTLIER_FACTOR * p90
    if past_longest and model.runtime_max_s is not None:
        ordinary = min(ordinary, model.runtime_max_s)
    if elapsed <= ordinary:
        return OVERDUE_FRACTION * mean
    return max(elapsed, OVERDUE_FRACTION * mean)


def past_outrun_margin(model: CategoryModel, elapsed: float) -> bool:
    """A running task of ``model``'s category has run longer than ``OUTRUN_MARGIN`` × the
    longest runtime measured in it (a category with no longest: never)."""
    return model.runtime_max_s is not None and elapsed > OUTRUN_MARGIN * model.runtime_max_s


def outrun_categories(obs: Observation) -> frozenset[str]:
    """Measured categories whose measurements are their short tasks: at least as many of
    their running tasks have run ``OUTRUN_MARGIN`` × the longest measured runtime as were
    measured (the tasks still running outnumber the measured ones, and each has run a
    fifth as long again as any of those did).

    Not a category with many measurements whose last stragglers run a little past the
    longest (they are about to end), nor a stage whose tasks all started together and have
    just passed its first completion (they are that task's peers) until they run a fifth
    as long again (docs/decisions/0004-forecasting-running-tasks.md)."""
    past: dict[str, int] = {}
    for t in obs.running:
        m = obs.categories.get(t.category)
        if m is not None and m.measured and past_outrun_margin(m, obs.time - t.started_at):
            past[t.category] = past.get(t.category, 0) + 1
    return frozenset(c for c, n in past.items() if n >= obs.categories[c].samples)


def batch_last_runtime(model: CategoryModel, k: int) -> float:
    """When the slowest of ``k`` alike tasks started together ends: the median
    of their maximum, Q(0.5^(1/k)) of the category's runtime distribution
    (never below the mean). A barrier (a reduce waiting on every align) is
    released by its slowest parent; the mean predicts it one straggler early."""
    mean = model.runtime_mean_s or 0.0
    if k <= 1:
        return mean
    return max(mean, model.runtime_quantile(0.5 ** (1.0 / k)) or mean)


def runtime_cdf(model: CategoryModel) -> Callable[[float], float]:
    """P(runtime ≤ x) for the category: the inverse of its
    :meth:`~hta.model.CategoryModel.runtime_quantile` (1 if never measured)."""
    pts = model.runtime_knots()
    if not pts:
        return lambda x: 1.0
    xs = [x for _, x in pts]
    return lambda x: _cdf_at(xs, pts, x)


def _cdf_at(xs: list[float], pts: list[tuple[float, float]], x: float) -> float:
    """:func:`runtime_cdf` at ``x`` on the knots (``xs``: their runtimes), linear between them."""
    if x >= xs[-1]:
        return 1.0
    if x < xs[0]:
        return 0.0
    i = bisect.bisect_right(xs, x)
    (q0, x0), (q1, x1) = pts[i - 1], pts[i]
    return q0 + (q1 - q0) * (x - x0) / (x1 - x0) if x1 > x0 else q1


def barrier_wait(tasks: list[tuple[CategoryModel, float]]) -> float:
    """Seconds until the last of these running tasks (model, elapsed) ends,
    as the median of that maximum: the Δ where the product of each task's
    conditional P(done within Δ | still running after its elapsed time) is ½.
    A task past its category's longest measured runtime contributes its
    :func:`expected_remaining` as a certainty. Tasks are bucketed by category
    and whole second of elapsed time, so a barrier over thousands of tasks
    costs a few hundred distinct terms per step; past the longest measured, a
    bucket stands for its furthest-run task (an outlier's remaining time is its
    elapsed time: the whole second would cut up to a second off it).

    A parent in an outrun category (:func:`outrun_categories`) is not made
    longer here: it holds back its own dependents through its own expected end,
    while a barrier's time counts for all of its parents' dependents."""
    sure = 0.0
    buckets: dict[tuple[str, int], list[float]] = {}  # (category, whole second) → [count, furthest]
    by_name: dict[str, CategoryModel] = {}
    for model, elapsed in tasks:
        by_name[model.name] = model
        b = buckets.setdefault((model.name, int(elapsed)), [0, elapsed])
        b[0] += 1
        b[1] = max(b[1], elapsed)
    # per category: its knots' runtimes, its knots, its longest runtime
    knots = {}
    for name, model in by_name.items():
        pts = model.runtime_knots()
        knots[name] = ([x for _, x in pts], pts, model.runtime_quantile(1.0) or 0.0)
    # (knot runtimes, knots, elapsed, P(done by elapsed), P(not), tasks) per bucket still running
    live: list[tuple[list[float], list[tuple[float, float]], float, float, float, int]] = []
    hi = 0.0
    for (name, elapsed), (n, furthest) in buckets.items():
        xs, pts, longest = knots[name]
        f0 = _cdf_at(xs, pts, elapsed) if pts else 1.0
        if f0 >= 1.0:
            sure = max(sure, expected_remaining(furthest, by_name[name]))
        else:
            live.append((xs, pts, elapsed, f0, 1.0 - f0, int(n)))
            hi = max(hi, longest - elapsed)
    if not live:
        return sure

    def p_all_done(d: float) -> float:
        p = 1.0
        for xs, pts, elapsed, f0, not_f0, n in live:
            p *= ((_cdf_at(xs, pts, elapsed + d) - f0) / not_f0) ** n
            if p < 0.5:
                break
        return p

    lo = 0.0
    for _ in range(24):  # bisection: hi / 2**24, far below a second
        mid = (lo + hi) / 2
        if p_all_done(mid) >= 0.5:
            hi = mid
        else:
            lo = mid
    return max(sure, hi)
