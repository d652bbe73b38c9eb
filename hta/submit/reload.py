"""SIGHUP: read the config file again and put in force what changed that may change live.

The daemon convention (nginx, sshd, Prometheus): ``kill -HUP PID`` re-reads the
configuration. HTA reads its layers again (:class:`hta.submit.config.Layers`: the config file
anew; the environment and the flags as they were, since nothing outside can change them)
and compares what they build with what the last read built:

- a changed ``max-workers``, ``deadline`` or ``budget`` (:data:`hta.live.LIVE_KEYS`) goes
  to the controller, as ``hta set`` does; its decision says so
  (``cap 4 → 8 workers (SIGHUP)``);
- any other changed setting is named in one line: it takes a new run;
- a setting given as a flag (or an ``HTA_*`` variable) stays as given, whatever the file
  now says (flags beat the file, as at the start): one line says so, and that ``hta set``
  is how to change it.

Only what changed since the last read is applied, so a value ``hta set`` gave stands until
the file's own value for it changes. In the file, as at the start, a deadline's duration
counts from the run's start (``deadline: 3h``: three hours into the run) and a clock time
is the next one after it: the file describes the run, and reading it again must not move
a deadline it did not change. A file that does not read or validate changes nothing, in
one line; the run goes on as it was.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hta.dial_input import parse_budget, parse_deadline
from hta.errors import UsageError
from hta.live import LIVE_KEYS, LiveSettings, Refused
from hta.submit.config import FROM_ENVIRONMENT, FROM_FLAGS, Layers, as_keys, variable_of

if TYPE_CHECKING:
    from hta.controller import Controller
    from hta.submit.options import MakeflowOptions

log = logging.getLogger("hta")


@dataclass
class ConfigReread:
    """What SIGHUP reads again (``read``: the layers, as :func:`hta.cli.option_layers`
    reads them) and what the last read gave (``last``, and the options it built)."""

    read: Callable[[], Layers]
    last: Layers
    options: MakeflowOptions

    def apply(self, controller: Controller) -> list[str]:
        """Read again, and hand the controller what changed; every outcome but a change
        put in force (the live view says that) is one warning line. Returns the changes
        asked for, in words."""
        try:
            layers = self.read()
            new = layers.build()
        except UsageError as exc:
            log.warning("SIGHUP: %s: nothing changed (the run goes on as it was)", exc)
            return []
        if layers.file is None:
            log.warning("SIGHUP: no config file to read again (--config or HTA_CONFIG): nothing changed")
            return []
        before, after = as_keys(self.options), as_keys(new)
        changed = [k for k in after if after[k] != before[k]]
        live = [k for k in changed if k in LIVE_KEYS]
        fixed = [k for k in changed if k not in LIVE_KEYS]
        kept = [k for k in LIVE_KEYS if k not in changed
                and self.last.file_values().get(k) != layers.file_values().get(k)
                and layers.winner(k) in (FROM_FLAGS, FROM_ENVIRONMENT)]
        if fixed:
            log.warning("SIGHUP: %s changed in %s: %s only in a new run (max-workers, deadline and budget change "
                        "while it runs)", ", ".join(fixed), layers.file,
                        "it takes effect" if len(fixed) == 1 else "they take effect")
        for k in kept:
            flag = layers.winner(k) == FROM_FLAGS
            log.warning("SIGHUP: %s changed in %s, but %s was given (%s beats the file): it stays %s; hta set "
                        "changes it while the run goes", k, layers.file, f"--{k}" if flag else variable_of(k),
                        "a flag" if flag else "the environment", after[k])
        if new.deadline is not None and new.budget is not None and {"deadline", "budget"} & set(live):
            log.warning("SIGHUP: %s gives a deadline and a budget, and the dial takes one: nothing changed",
                        layers.file)
            return []
        if not live:
            if not fixed and not kept:
                log.warning("SIGHUP: %s read again: nothing changed", layers.file)
            self.last, self.options = layers, new
            return []
        try:
            wanted = settings_from(new, live, controller.live_settings(), controller.epoch)
            changes = controller.change(wanted, "SIGHUP")
        except (UsageError, Refused) as exc:  # (the last read stays the one to compare with)
            log.warning("SIGHUP: %s: %s: nothing changed", layers.file, exc)
            return []
        self.last, self.options = layers, new
        return [c.words() for c in changes]


def settings_from(options: MakeflowOptions, keys: list[str], current: LiveSettings, epoch: float) -> LiveSettings:
    """``current`` with ``keys`` (those that changed) taken from ``options``: a deadline as
    at the run's start (its duration from then, a clock time the next one after it), a
    budget in node·s of the run's worker shape; one the file no longer gives is cleared."""
    new = current
    if "max-workers" in keys:
        new = LiveSettings(options.max_workers, new.deadline_s, new.budget_node_s)
    started = dt.datetime.fromtimestamp(epoch)
    if "deadline" in keys:
        new = new.with_deadline(None if options.deadline is None else parse_deadline(options.deadline, started))
    if "budget" in keys:
        new = new.with_budget(None if options.budget is None else parse_budget(options.budget, options.worker_cores))
    return new
