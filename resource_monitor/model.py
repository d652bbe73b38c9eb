"""What completed tasks of one category really used: the learner's answer."""

from __future__ import annotations

from pydantic import BaseModel

from workqueue_bridge.resources import Resources


class CategoryModel(BaseModel):
    """What completed tasks of one category really used (resource monitor).

    ``samples == 0`` means never measured: Work Queue then gives such a task a whole
    worker, and so does every estimate made from this model.
    """

    name: str
    samples: int = 0
    peak: Resources = Resources()
    runtime_mean_s: float | None = None
    runtime_median_s: float | None = None
    runtime_p90_s: float | None = None
    runtime_min_s: float | None = None
    runtime_max_s: float | None = None
    declared: Resources | None = None
    #: an earlier run's mean runtime of this category (``hta makeflow --runtime-prior``): the
    #: forecast's guess while this run has not measured it; allocations never use it, since
    #: the master gives an unmeasured category a whole worker whatever was learned before
    prior_runtime_s: float | None = None

    @property
    def measured(self) -> bool:
        return self.samples > 0

    def runtime_knots(self) -> list[tuple[float, float]]:
        """(quantile, runtime) points of the measured runtime distribution: min at 0, median
        at 0.5, p90 at 0.9, max at 1 (those kept), linear in between. Empty when never
        measured."""
        if not self.measured or self.runtime_mean_s is None:
            return []
        med = self.runtime_median_s if self.runtime_median_s is not None else self.runtime_mean_s
        pts = [(0.0, self.runtime_min_s if self.runtime_min_s is not None else med), (0.5, med)]
        if self.runtime_p90_s is not None:
            pts.append((0.9, self.runtime_p90_s))
        pts.append((1.0, self.runtime_max_s if self.runtime_max_s is not None else pts[-1][1]))
        out: list[tuple[float, float]] = []
        for q, x in pts:  # keep it monotone whatever the inputs
            out.append((q, max(x, out[-1][1]) if out else x))
        return out

    def runtime_quantile(self, q: float) -> float | None:
        """The q-quantile of the runtime, interpolated between the knots."""
        pts = self.runtime_knots()
        if not pts:
            return None
        q = min(max(q, 0.0), 1.0)
        for (q0, x0), (q1, x1) in zip(pts, pts[1:]):
            if q <= q1:
                return x0 + (x1 - x0) * (q - q0) / (q1 - q0)
        return pts[-1][1]
