"""Per-category learning from resource-monitor summaries.

Work Queue groups tasks into categories; tasks of one category are alike, so
what completed tasks of a category really used (peak cores, memory, disk and
their runtime) predicts the rest. HTA sizes allocations and workers from these
measurements rather than from guesses.
"""

from resource_monitor.categories import CategoryLearner

__all__ = ["CategoryLearner"]
