"""The category learner: measured task summaries in, :class:`CategoryModel` out."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from resource_monitor.model import CategoryModel
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.resources import Resources


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def runtime_model(name: str, runtimes: list[float], peak: Resources,
                  declared: Resources | None = None) -> CategoryModel:
    """The category's model from its measured runtimes (non-empty) and peak:
    the one place the runtime statistics are computed (learner and simulator)."""
    return CategoryModel(
        name=name,
        samples=len(runtimes),
        peak=peak,
        runtime_mean_s=statistics.fmean(runtimes),
        runtime_median_s=statistics.median(runtimes),
        runtime_p90_s=percentile(runtimes, 90),
        runtime_min_s=min(runtimes),
        runtime_max_s=max(runtimes),
        declared=declared,
    )


@dataclass
class _Samples:
    runtimes: list[float] = field(default_factory=list)
    cores: float = 0.0
    memory_mb: float = 0.0
    disk_mb: float = 0.0


class CategoryLearner:
    """Accumulates summaries per category.

    Peak cores are rounded up to whole cores (at least one), the unit Work
    Queue allocates; memory and disk are the peaks seen. Only successful
    tasks teach runtimes; every task teaches peaks (a task killed for
    exceeding its allocation shows what it really needs).
    """

    def __init__(self) -> None:
        self._cats: dict[str, _Samples] = {}
        self._declared: dict[str, Resources] = {}
        self._known: set[str] = set()
        #: models built since the category last changed (a model is rebuilt only after
        #: its category learned something: the simulator asks for one per dispatch)
        self._cache: dict[str, CategoryModel] = {}
        #: an earlier run's mean runtime per category (:meth:`take_prior`)
        self._prior: dict[str, float] = {}

    def take_prior(self, runtimes: dict[str, float]) -> None:
        """An earlier run's mean runtime per category: each stands in for the forecast until
        this run measures the category itself (its peak does not: the master allocates as it
        learns, run by run)."""
        self._prior = {n: x for n, x in runtimes.items() if x > 0}
        self._cache.clear()

    def add(self, summary: TaskSummary) -> None:
        self._cache.pop(summary.category, None)
        s = self._cats.setdefault(summary.category, _Samples())
        s.cores = max(s.cores, summary.cores)
        s.memory_mb = max(s.memory_mb, summary.memory_mb)
        s.disk_mb = max(s.disk_mb, summary.disk_mb)
        if summary.succeeded:
            s.runtimes.append(summary.wall_time_s)

    def add_all(self, summaries: list[TaskSummary]) -> None:
        for s in summaries:
            self.add(s)

    def declare(self, category: str, resources: Resources) -> None:
        """Record what the workflow declared for a category (from the master)."""
        if self._declared.get(category) != resources:
            self._cache.pop(category, None)
            self._declared[category] = resources

    def know(self, category: str) -> None:
        """A category the master has tasks of: listed (unmeasured) before any completes."""
        self._known.add(category)

    def model(self, category: str) -> CategoryModel:
        m = self._cache.get(category)
        if m is None:
            m = self._cache[category] = self._build(category)
        return m

    def _build(self, category: str) -> CategoryModel:
        s = self._cats.get(category)
        declared = self._declared.get(category)
        if s is None or not s.runtimes:
            return CategoryModel(name=category, samples=0, declared=declared,
                                 peak=self._peak(s) if s else Resources(), prior_runtime_s=self._prior.get(category))
        return runtime_model(category, s.runtimes, self._peak(s), declared)

    @staticmethod
    def _peak(s: _Samples) -> Resources:
        return Resources(cores=max(1.0, math.ceil(s.cores - 1e-6)), memory_mb=s.memory_mb, disk_mb=s.disk_mb)

    def models(self, with_prior: bool = False) -> dict[str, CategoryModel]:
        """The categories this run has seen; ``with_prior``, also those only an earlier run
        measured (the stages still ahead, which the master lists only once released)."""
        names = set(self._cats) | set(self._declared) | self._known | (set(self._prior) if with_prior else set())
        return {n: self.model(n) for n in sorted(names)}


def first_allocation(model: CategoryModel | None, worker: Resources) -> Resources:
    """What a task of this category is given: its measured peak once measured,
    a whole worker before (as Work Queue does for a category never seen)."""
    if model is None or not model.measured:
        return worker
    return model.peak
