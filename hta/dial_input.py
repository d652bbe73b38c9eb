"""The time–cost dial as a user types it: ``hta makeflow --deadline WHEN`` and ``--budget AMOUNT``.

HTA's policy takes the dial as two plain numbers, ``deadline_s`` (seconds from the run's
start) and ``budget_node_s`` (node-seconds). People think in clock times, hours and
node-hours, and HPC users in Slurm's ``--time`` formats; this module turns that text into the
policy's numbers, once, at the start of ``hta makeflow`` (so a clock time is not re-read
later), and refuses anything else in one :class:`~hta.errors.UsageError` line that names
the value and the fix. It is kept apart from the policy, which never sees text or clocks.

``--deadline WHEN``, read in this order:

- an ISO date-time, ``2026-12-07T09:00`` or ``2026-12-07 09:00`` (seconds, a fraction and a
  zone, ``Z`` or ``+01:00``, allowed): its zone is honoured; without one it is local time.
  One that has passed is refused;
- ``HH:MM`` (a 1–2 digit hour 0–23, a 2-digit minute): a clock time, the next one after now
  (today, or tomorrow if it has passed; so never in the past);
- Slurm's durations (``sbatch --time``) with a day part or three fields:
  ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds`` (``1-12``,
  ``0-01:30``, ``1-12:00:00``) and ``hours:minutes:seconds`` (``1:30:00``). Slurm's
  ``minutes:seconds`` is *not* taken: two fields are the clock time above (write ``0:90:00``
  or ``90m``); nor is Slurm's bare number of minutes: a bare number here is seconds;
- a duration in units: a bare number of seconds (``5400``), or hours, minutes and seconds in
  that order, each optional, decimals allowed: ``2h``, ``90m``, ``45s``, ``1h30m``, ``1.5h``
  (and days, ``1d12h``).

A duration must be more than 0. In a YAML config file quote a clock time (``deadline:
"9:00"``): YAML 1.1 reads an unquoted ``9:00`` as the number 540.

``--budget AMOUNT``: node-hours (``40node-h``, ``40 node-hours``) or core-hours
(``300core-h``, ``300 core-hours``), case-insensitive, decimals allowed, more than 0. A node
is one worker of the configured shape (``--worker-cores``, ``--worker-memory``): core-hours
are divided by its cores.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from hta.errors import UsageError

#: what a deadline may be, said in every refusal
DEADLINE_FORMS = "give a duration (90m, 2h, 1-12:00:00) or a clock time (09:00, 2026-12-07T09:00)"

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d.*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
_SLURM_DAYS = re.compile(r"(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?")
_SLURM_HMS = re.compile(r"(\d+):(\d+):(\d+)")
_UNITS = re.compile(rf"(?:({_NUMBER})\s*d)?\s*(?:({_NUMBER})\s*h)?\s*(?:({_NUMBER})\s*m)?\s*(?:({_NUMBER})\s*s)?",
                    re.I)
_BARE = re.compile(_NUMBER)

_AMOUNT = re.compile(rf"([+-]?{_NUMBER})\s*(.*)")
_BUDGET_UNIT = re.compile(r"(node|core)[-\s·]?(?:h|hr|hrs|hour|hours)", re.I)


def _utc(when: dt.datetime) -> dt.datetime:
    """``when`` in UTC; a naive one is the system's local time (its zone's DST rules)."""
    return when.astimezone(dt.UTC)


def _duration_s(text: str) -> float | None:
    """Seconds of a duration (any of the forms the module says), or None if ``text`` is none."""
    m = _SLURM_DAYS.fullmatch(text)
    if m:
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
        return days * 86400.0 + hours * 3600.0 + minutes * 60.0 + seconds
    m = _SLURM_HMS.fullmatch(text)
    if m:
        hours, minutes, seconds = (int(g) for g in m.groups())
        return hours * 3600.0 + minutes * 60.0 + seconds
    if _BARE.fullmatch(text):
        return float(text)
    m = _UNITS.fullmatch(text)
    if m and any(m.groups()):
        return sum(float(g) * k for g, k in zip(m.groups(), (86400, 3600, 60, 1)) if g)
    return None


def parse_deadline(text: str, now: dt.datetime) -> float:
    """Seconds from ``now`` to the deadline ``text`` (the forms in the module's docstring).

    ``now`` naive is local wall time (as ``datetime.now()``); aware, a clock time and a
    date-time without a zone are read in its zone."""
    given = text.strip()
    if not given:
        raise UsageError(f"--deadline is empty: {DEADLINE_FORMS}")
    if _ISO.fullmatch(given):
        try:
            when = dt.datetime.fromisoformat(given)
        except ValueError as exc:
            raise UsageError(f"--deadline {given}: not a date-time ({exc}): {DEADLINE_FORMS}") from None
        if when.tzinfo is None and now.tzinfo is not None:
            when = when.replace(tzinfo=now.tzinfo)
        seconds = (_utc(when) - _utc(now)).total_seconds()
        if seconds <= 0:
            raise UsageError(f"--deadline {given}: that time has passed: a deadline must be in the future: "
                             f"{DEADLINE_FORMS}")
        return seconds
    if _DATE.fullmatch(given):
        raise UsageError(f"--deadline {given}: a date needs a time of day: write e.g. {given}T09:00, or "
                         f"{DEADLINE_FORMS}")
    m = _CLOCK.fullmatch(given)
    if m:
        hour, minute = int(m.group(1)), int(m.group(2))
        if hour > 23 or minute > 59:
            raise UsageError(f"--deadline {given}: HH:MM is a clock time (hours 0-23, minutes 00-59) and this is "
                             f"none: for {hour} min {minute} s from now write 0:{hour}:{minute:02d}, or "
                             f"{DEADLINE_FORMS}")
        wall = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if wall <= now:  # (the next one: tomorrow's, on the wall clock: adding a day keeps the zone's rules)
            wall += dt.timedelta(days=1)
        # (in UTC: the seconds between, whatever DST change comes tonight)
        return (_utc(wall) - _utc(now)).total_seconds()
    negative = given.startswith("-")
    duration = _duration_s(given[1:].strip() if negative else given)
    if duration is None:
        raise UsageError(f"--deadline {given}: not a duration or a clock time: {DEADLINE_FORMS}")
    if not math.isfinite(duration):
        raise UsageError(f"--deadline {given}: not a finite duration: {DEADLINE_FORMS}")
    if negative or duration <= 0:
        raise UsageError(f"--deadline {given}: a deadline must be in the future: {DEADLINE_FORMS}")
    return duration


def parse_budget(text: str, node_cores: int) -> float:
    """Node-seconds of the budget ``text``: node-hours (``40node-h``) or core-hours
    (``300core-h``, divided by ``node_cores``, the cores of the configured worker shape)."""
    if node_cores < 1:
        raise ValueError(f"node_cores must be at least 1, not {node_cores}")
    given = text.strip()
    forms = "give node-hours (40node-h) or core-hours (300core-h)"
    if not given:
        raise UsageError(f"--budget is empty: {forms}")
    m = _AMOUNT.fullmatch(given)
    if m is None:
        raise UsageError(f"--budget {given}: not an amount: {forms}")
    number, unit = m.group(1), m.group(2).strip()
    value = float(number)
    shown = number.lstrip("+-") or "40"
    if not unit:
        raise UsageError(f"--budget {given}: no unit: give node-hours ({shown}node-h) or core-hours "
                         f"({shown}core-h)")
    u = _BUDGET_UNIT.fullmatch(unit)
    if u is None:
        raise UsageError(f"--budget {given}: unknown unit {unit!r}: give node-hours ({shown}node-h) or core-hours "
                         f"({shown}core-h)")
    if not math.isfinite(value):
        raise UsageError(f"--budget {given}: not a finite amount: {forms}")
    if value <= 0:
        raise UsageError(f"--budget {given}: a budget must be more than 0: {forms}")
    node_hours = value if u.group(1).lower() == "node" else value / node_cores
    return node_hours * 3600.0
