"""What ends a run that cannot end well by itself, with one line that says why.

- Another makeflow started on the same workflow during the run (makeflow 8.0 takes no
  lock): both write one log and the same outputs, so HTA's is stopped and the run fails.

- A rule failed for good and makeflow has nothing left to run (makeflow 8.0 never exits
  when other rules depend on the failed one): makeflow is stopped and the rule, its exit
  code or the limit it went over are named.
- The backend cannot start workers (``backend.fatal``).
- The ``--budget`` is spent, no worker is left and tasks still wait
  (:func:`hta.policies.dial.budget_spent`): nothing more will be bought, so nothing would
  ever run them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from hta.backends.base import WorkerBackend
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.dag import Rule, read_rules
from workqueue_bridge.makeflow import FailedRule, MakeflowRun
from workqueue_bridge.makeflow_log import MakeflowLog, NodeEvent
from workqueue_bridge.monitor_summaries import TaskSummary

log = logging.getLogger("hta")

#: how often the watch looks at makeflow's log and the backend
WATCH_EVERY_S = 1.0
#: a rule FAILED and not put back to WAITING within this long failed for good; makeflow with
#: nothing running that has not exited this long after its last log line never will
FAILED_QUIET_S = 3.0


class FailureWatch:
    """Watches what the controller does not: rules that failed for good (from a makeflowlog
    reader of its own) and a backend that cannot start workers. :meth:`run` returns the
    one line that ends the run; it never returns while the run can still end well."""

    def __init__(self, workflow: Path, mf: MakeflowRun, backend: WorkerBackend, learner: CategoryLearner,
                 epoch: float):
        self.workflow = workflow
        self.mf = mf
        self.backend = backend
        self.learner = learner
        self.epoch = epoch
        self.log = MakeflowLog(mf.log_path)
        self._rules: dict[int, Rule] | None = None
        self._told: set[int] = set()
        self._learned: set[int] = set()
        #: more reasons to end the run, asked at every check (the controller's, once it runs)
        self.more: list[Callable[[], str | None]] = []

    async def rules(self) -> dict[int, Rule]:
        if self._rules is None:
            self._rules = await asyncio.to_thread(read_rules, self.workflow, self.mf.format_options(), self.mf.cwd)
        return self._rules

    def category_of(self, node_id: int) -> str | None:
        """A rule's category (for :class:`LogSummaries`; :meth:`rules` has read them)."""
        rule = (self._rules or {}).get(node_id)
        return rule.category if rule else None

    async def run(self) -> str:
        failures = 0
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                why = await self.check()
            except Exception as exc:  # noqa: BLE001 — the watch must not end the run by itself
                failures += 1
                if failures == 1:
                    log.warning("cannot watch makeflow's log (%s); retrying", exc)
                continue
            if why:
                return why

    async def check(self) -> str | None:
        if self.backend.fatal:
            return self.backend.fatal
        for ask in self.more:
            why = ask()
            if why:
                return why
        self.log.poll()
        other = self.other_makeflow()
        if other:
            return other
        now = time.time()
        failed = self.log.failed_for_good(now, FAILED_QUIET_S, since=self.epoch)
        new = [e for e in failed if e.node_id not in self._told]
        running = self.log.latest.running if self.log.latest else 0
        if new and running:  # with nothing running, the run ends now and says it once
            self._told.update(e.node_id for e in new)
            for text in await self.explain(new):
                log.warning("%s; waiting for the %d task(s) still running", text, running)
        stuck = self.log.stuck(now, FAILED_QUIET_S, since=self.epoch)
        if stuck:
            rules = await self.rules()
            texts = await self.explain(stuck[:1])
            blocked = sum(rules[e.node_id].dependents for e in stuck if e.node_id in rules)
            more = f" and {len(stuck) - 1} other rule(s)" if len(stuck) > 1 else ""
            waits = (f"{blocked} rule(s) depending on it can never run, and makeflow 8.0 would wait forever"
                     if blocked else "makeflow did not end by itself")
            return (f"{texts[0]}{more}; {waits}: stopped makeflow and every worker "
                    f"(makeflow's output: {self.mf.output_path})")
        return None

    def other_makeflow(self) -> str | None:
        """The line that ends a run another makeflow joined: its log has a second ``# STARTED``
        mark since this run began (each makeflow that opens a log writes one)."""
        if len([t for t in self.log.starts if t >= self.epoch - 1.0]) < 2:
            return None
        ours = self.mf.proc.pid if self.mf.proc is not None else None
        others = [p.pid for p in psutil.process_iter(["name", "cwd"])
                  if p.info["name"] == "makeflow" and p.pid != ours and p.info["cwd"] == str(self.mf.workdir)]
        who = f" (pid {', '.join(map(str, others))})" if others else ""
        return (f"another makeflow{who} started on {self.workflow.name} in this folder during the run: it writes "
                f"the same log and outputs (makeflow 8.0 takes no lock), so they may be mixed; stopped HTA's "
                f"makeflow and every worker: run it again once the other has ended")

    async def explain(self, events: list[NodeEvent]) -> list[str]:
        """One clause per failed rule: which rule, and why (learning from an over-limit task)."""
        rules = await self.rules()
        out = []
        for e in events:
            f = self.mf.failed_rule(e.node_id, e.job_id, self.log.submissions.get(e.node_id, 1), rules)
            if f.over_limit:
                out.append(self._over_limit(f))
            else:
                cmd = f.rule.command if f.rule else ""
                cmd = cmd if len(cmd) <= 60 else cmd[:57] + "..."
                out.append(f"rule {f.name}" + (f" (`{cmd}`)" if cmd else "") + f" failed for good: {f.why()}"
                           + f.attempts_text())
        return out

    def _over_limit(self, f: FailedRule) -> str:
        """A task the resource monitor stopped: its summary is gone, so what it used comes
        from the backend's own sampling, if it has any; the learner is told."""
        cat = f.category or "default"
        limits = (f.rule.limits if f.rule else None) or {}
        peak = self.backend.task_peak_memory_mb(f.job_id)
        limit = limits.get("memory")
        shown = ", ".join(f"{k} {v:g}" + (" MB" if k != "cores" else "") for k, v in limits.items())
        text = f"rule {f.name} (category {cat}) was stopped by the resource monitor for going over its category's limits"
        text += f" ({shown})" if shown else ""
        if peak is not None and limit and peak > limit:
            text += (f": its processes reached {peak:.0f} MB of memory (sampled by HTA); raise MEMORY of category "
                     f"{cat} to at least {peak:.0f}")
            if f.node_id not in self._learned:
                self._learned.add(f.node_id)
                self.learner.add(TaskSummary(category=cat, command=f.rule.command if f.rule else "",
                                             exit_type="limits", limits_exceeded=True, exceeded=["memory"],
                                             memory_mb=peak))
        else:
            text += (": makeflow deleted its resource summary and HTA did not see it go over, so what it used "
                     "is not known; raise its category's limits")
        return text

