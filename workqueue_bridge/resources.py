"""Resources as Work Queue counts them: cores, memory (MB) and disk (MB), allocated as one.

The bottom of HTA's vocabulary: the master, the workers, the learned categories and the
policies all speak in :class:`Resources`.
"""

from __future__ import annotations

import functools
import math

from pydantic import BaseModel, ConfigDict


def whole_cores(limit: float) -> int:
    """The cores a worker advertises under a CPU limit of ``limit`` cores: whole ones, at
    least 1 (Work Queue allocates whole cores; a pod asking 1.33 cores connects with 1)."""
    return max(1, math.floor(limit + 1e-9))


class Resources(BaseModel):
    """Cores, memory (MB) and disk (MB); a bundle Work Queue allocates as one."""

    model_config = ConfigDict(frozen=True)

    cores: float = 0.0
    memory_mb: float = 0.0
    disk_mb: float = 0.0

    def fits_in(self, free: Resources) -> bool:
        eps = 1e-9
        return (
            self.cores <= free.cores + eps
            and self.memory_mb <= free.memory_mb + eps
            and self.disk_mb <= free.disk_mb + eps
        )

    @property
    def declares_nothing(self) -> bool:
        """A request of all zeros: Work Queue gives such a task a whole worker."""
        return self.cores <= 0 and self.memory_mb <= 0 and self.disk_mb <= 0

    def count_in(self, free: Resources) -> int:
        """How many of these fit in ``free`` (dimensions asked as 0 do not limit)."""
        counts = []
        for want, have in (
            (self.cores, free.cores),
            (self.memory_mb, free.memory_mb),
            (self.disk_mb, free.disk_mb),
        ):
            if want > 0:
                counts.append(math.floor(have / want + 1e-9))
        return max(0, min(counts)) if counts else 0

    def split(self, k: int) -> Resources:
        """One of ``k`` equal parts (a worker pod of which ``k`` fill a node)."""
        return Resources(cores=self.cores / k, memory_mb=self.memory_mb / k, disk_mb=self.disk_mb / k)

    def advertised(self) -> Resources:
        """What a worker with these limits advertises to the master: whole cores (at least 1,
        :func:`whole_cores`) and whole MB."""
        return Resources(cores=whole_cores(self.cores), memory_mb=int(self.memory_mb + 1e-6), disk_mb=self.disk_mb)

    def share_of(self, whole: Resources) -> float:
        """What part of ``whole`` a worker of this shape counts as against a cap of whole
        workers: 1/k for one of k equal parts (:meth:`split`, k ≥ 2), else 1.

        A part is known by its memory, within a MB (a pod's limit is whole MiB), and by its
        cores: 1/k of the whole's, or the whole cores its worker advertises of them. A worker
        that reports a little less than it was asked for still counts whole, so a cap is
        never passed."""
        return _share_of(self.cores, self.memory_mb, whole.cores, whole.memory_mb)

    def plus(self, other: Resources) -> Resources:
        return Resources(
            cores=self.cores + other.cores,
            memory_mb=self.memory_mb + other.memory_mb,
            disk_mb=self.disk_mb + other.disk_mb,
        )

    def minus(self, other: Resources) -> Resources:
        return Resources(
            cores=self.cores - other.cores,
            memory_mb=self.memory_mb - other.memory_mb,
            disk_mb=self.disk_mb - other.disk_mb,
        )

    def times(self, k: float) -> Resources:
        return Resources(cores=self.cores * k, memory_mb=self.memory_mb * k, disk_mb=self.disk_mb * k)


@functools.lru_cache(maxsize=256)
def _share_of(cores: float, memory_mb: float, node_cores: float, node_memory_mb: float) -> float:
    """:meth:`Resources.share_of` on plain numbers, cached: a cap check counts every
    worker's share, and a run's workers come in a few shapes."""
    if node_cores <= 0 or cores <= 0 or memory_mb <= 0 or node_memory_mb <= 0:
        return 1.0
    k = round(node_memory_mb / memory_mb)
    if k < 2 or abs(node_memory_mb / k - memory_mb) >= 1.0:
        return 1.0
    part = node_cores / k
    if abs(part - cores) > 1e-6 and cores != math.floor(part + 1e-9):
        return 1.0
    return 1.0 / k
