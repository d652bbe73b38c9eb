"""The category learner, with each model built from running tallies.

:class:`~resource_monitor.categories.CategoryLearner` rebuilds a category's model
from all its runtimes after every new summary (a sort for the median, another for
the p90): with 100k tasks of one category that is quadratic. This subclass keeps
the runtimes sorted as they come and an exact running sum (Shewchuk's partials,
what :func:`math.fsum` computes), so it answers the very same
:class:`~hta.model.CategoryModel` (``tests/test_sim_speed.py`` compares them) in
logarithmic time per summary. Production (``hta makeflow``) and the simulator
both learn with it.
"""

from __future__ import annotations

import bisect
import math

from resource_monitor.categories import CategoryLearner
from resource_monitor.model import CategoryModel
from workqueue_bridge.monitor_summaries import TaskSummary


def _add_exact(partials: list[float], x: float) -> None:
    """Add ``x`` to a sum kept exactly as non-overlapping partials (Shewchuk; the
    ``msum`` recipe behind :func:`math.fsum`)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


class IncrementalCategoryLearner(CategoryLearner):
    def __init__(self) -> None:
        super().__init__()
        self._sorted: dict[str, list[float]] = {}
        self._partials: dict[str, list[float]] = {}

    def add(self, summary: TaskSummary) -> None:
        super().add(summary)
        if summary.succeeded:
            x = summary.wall_time_s
            bisect.insort(self._sorted.setdefault(summary.category, []), x)
            _add_exact(self._partials.setdefault(summary.category, []), x)

    def _build(self, category: str) -> CategoryModel:
        s = self._cats.get(category)
        if s is None or not s.runtimes:
            return super()._build(category)
        xs = self._sorted[category]
        n = len(xs)
        mid = n // 2
        # what runtime_model computes: statistics.fmean, statistics.median, the nearest-rank p90
        return CategoryModel(
            name=category,
            samples=n,
            peak=self._peak(s),
            runtime_mean_s=math.fsum(self._partials[category]) / n,
            runtime_median_s=xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2,
            runtime_p90_s=xs[max(0, min(n - 1, math.ceil(90 / 100 * n) - 1))],
            runtime_min_s=xs[0],
            runtime_max_s=xs[-1],
            declared=self._declared.get(category),
        )
