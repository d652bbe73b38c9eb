"""What a run may change while it runs, and how a change is said.

A run's cap (``--max-workers``) and its time–cost dial (``--deadline`` or ``--budget``)
may change while it runs: ``hta set`` asks the run's status server
(:mod:`hta.status.control`), and SIGHUP re-reads the config file
(:mod:`hta.submit.reload`). Both hand the controller a whole :class:`LiveSettings`
(:meth:`hta.controller.Controller.change`); it applies them at its next step, which
decides at once, and that decision's reason says what changed and who changed it
(``cap 4 → 8 workers (hta set)``), in the scaling log, the ``-v`` lines and the live view.

Only these three: every other setting shapes what the run has already started (the
policy, the worker shape, the backend, the ports) and needs a new run
(docs/decisions/0033-changing-a-running-run.md). This module is light (no I/O, no
pydantic): the controller and the simulator import it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hta.plural import node_hours, span

#: the settings a run may change while it runs, by their config-file names
LIVE_KEYS: tuple[str, ...] = ("max-workers", "deadline", "budget")


class Refused(ValueError):
    """A change this run cannot make (one line that says why and what would do)."""


@dataclass(frozen=True)
class LiveSettings:
    """The settings a run may change while it runs, as the controller holds them."""

    max_workers: int
    #: finish by this many seconds from the run's start (None: no deadline)
    deadline_s: float | None = None
    #: finish as early as this many node·s allow (None: no budget)
    budget_node_s: float | None = None

    def with_deadline(self, deadline_s: float | None) -> LiveSettings:
        """A deadline in place of whatever the dial held (the dial takes one ask: a
        deadline drops a budget); None clears it."""
        return replace(self, deadline_s=deadline_s,
                       budget_node_s=None if deadline_s is not None else self.budget_node_s)

    def with_budget(self, budget_node_s: float | None) -> LiveSettings:
        """A budget in place of whatever the dial held (it drops a deadline); None clears it."""
        return replace(self, budget_node_s=budget_node_s,
                       deadline_s=None if budget_node_s is not None else self.deadline_s)


def deadline_words(deadline_s: float | None) -> str:
    """``1h30m`` (from the run's start, as the plan says it), or ``none``."""
    return "none" if deadline_s is None else span(deadline_s)


def budget_words(budget_node_s: float | None) -> str:
    return "none" if budget_node_s is None else node_hours(budget_node_s)


@dataclass(frozen=True)
class SettingChange:
    """One setting changed while the run goes: from what, to what, by whom."""

    #: ``max-workers``, ``deadline`` or ``budget``
    setting: str
    old: str
    new: str
    #: who asked: ``hta set`` or ``SIGHUP``
    source: str

    def words(self) -> str:
        """As a decision's reason and the live view say it: ``cap 4 → 8 workers (hta set)``."""
        if self.setting == "max-workers":
            return f"cap {self.old} → {self.new} workers ({self.source})"
        return f"{self.setting} {self.old} → {self.new} ({self.source})"


def changes_between(old: LiveSettings, new: LiveSettings, source: str) -> list[SettingChange]:
    """What differs from ``old`` to ``new``, one :class:`SettingChange` a setting (a
    deadline within a second of the old one, or a budget within a node·s, is the same)."""
    out = []
    if old.max_workers != new.max_workers:
        out.append(SettingChange("max-workers", str(old.max_workers), str(new.max_workers), source))
    if not _same(old.deadline_s, new.deadline_s, 1.0):
        out.append(SettingChange("deadline", deadline_words(old.deadline_s), deadline_words(new.deadline_s), source))
    if not _same(old.budget_node_s, new.budget_node_s, 1.0):
        out.append(SettingChange("budget", budget_words(old.budget_node_s), budget_words(new.budget_node_s), source))
    return out


def merged(earlier: list[SettingChange], later: list[SettingChange]) -> list[SettingChange]:
    """Changes not applied yet, and more on top: one per setting, from the first one's old
    value to the last one's new value (a change undone before it applied is no change)."""
    by: dict[str, SettingChange] = {c.setting: c for c in earlier}
    for c in later:
        first = by.get(c.setting)
        by[c.setting] = c if first is None else replace(c, old=first.old)
    return [c for c in by.values() if c.old != c.new]


def _same(a: float | None, b: float | None, within: float) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) < within
