"""work_queue_factory — CCTools' own worker pool manager, a rival.

Emulated from its source, ``batch_job/src/work_queue_factory.c`` of
cooperative-computing-lab/cctools; line numbers are those of commit
bf9224748 (September 2021), the snapshot Debian ships as CCTools "8.0.0
DEVELOPMENT" (``bench/factory_check.py`` runs it beside this emulation).
Releases from 7.4.0 differ only in the count (below).

**The target** (``count_workers_needed``, l. 283–330): per master
``need = tasks_waiting + tasks_left + tasks_on_workers`` (l. 311; makeflow
never sets ``tasks_left``: 0), divided by ``tasks_per_worker`` and rounded up
(l. 315–316), then ``need = MAX(need, manager_workers_needed_by_resource(j))``
(l. 321; l. 189–219): ``ceil(total / per worker)`` for cores, memory and disk,
the totals being what the waiting tasks ask plus what is in use on the
workers (``total_resources_needed``, work_queue.c l. 2130–2160).
``tasks_per_worker`` defaults to the worker's cores, else 1 (l. 791–793). The
target is clamped to [min, max] (``mainloop``, l. 946–954).

**The count** (l. 958–981): ``submitted`` is the factory's worker jobs not
yet reaped, ``connected`` the master's ``workers``, ``waiting_to_connect =
submitted - connected``. Before 7.4.0 (``pre_7_4_count``, the Debian
snapshot): ``new = needed - submitted - abs(waiting_to_connect)`` (l. 975),
then at most ``workers_per_cycle`` (l. 978–980). From 7.4.0 (commit
d823c53d3, its l. 958–980): ``new = needed - submitted``, and never more than
``workers_per_cycle`` waiting to connect: ``new = MAX(0, workers_per_cycle -
waiting_to_connect)`` when ``new + waiting_to_connect`` exceeds it. It never
removes a worker (l. 1001–1002: "too many workers, will wait for some to
exit").

**The cycle** (l. 1007–1038): after its submissions it reaps the worker jobs
that exited, waiting for more until ``time(0)+5`` (l. 1008–1025; the local
queue returns at once when it has no job left, ``batch_job_local_wait`` in
batch_job_local.c l. 67–108), then sleeps ``factory_period``, 30 s. So a
cycle follows the last by 35 s while it has workers (seen in its debug log),
by 30 s after its last one exited; a worker that exits between cycles still
counts as submitted, not connected, at the next one, and is reaped only after
that cycle's submissions.

**The idle timeout** is the worker's own: ``-t`` on its command line
(``submit_worker``, l. 396); ``work_queue_worker`` disconnects once it has
had no task that long (work_queue_worker.c l. 1829–1833; the timer restarts
while it has tasks, l. 1940–1943), whenever that falls. So this policy asks
to be called at its next cycle or the next idle expiry before it; a call it
asked for as an idle check lets the expired workers go and submits nothing.
The worker reads its timer only when it wakes, every 5 s while idle
(``wait_msec = 5000``, l. 1861), and in whole seconds (``time(0) >
idle_stoptime``): it leaves at the first wake-up past T + 1 s, 5·ceil((T + 1)
/ 5) s after its last task (65 s for ``-t 60``, as its log shows).
``worker_wakeup_s=5`` emulates that; the default 0 lets it go at T exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy

#: ``factory_period``: the sleep between cycles
CYCLE_S = 30.0
#: the wait for exited workers after each cycle's submissions, while it has any
REAP_WAIT_S = 5.0


@dataclass
class FactoryPolicy(Policy):
    name: str = "factory"
    tasks_per_worker: float | None = None
    workers_per_cycle: int = 5
    idle_timeout_s: float = 300.0
    #: the count of CCTools before 7.4.0 (and of Debian's 8.0.0 DEVELOPMENT snapshot)
    pre_7_4_count: bool = False
    #: how often an idle work_queue_worker wakes to read its idle timer (5 s; 0: it leaves at T)
    worker_wakeup_s: float = 0.0
    #: when the next cycle starts (None: the first call is one)
    _next_cycle: float | None = field(default=None, repr=False)
    #: until when this cycle reaps exited workers
    _reap_until: float = field(default=-math.inf, repr=False)
    #: workers that left since the last reaping, still counted as submitted
    _unreaped: set[str] = field(default_factory=set, repr=False)
    #: what the last answer asked to be called for
    _asked: str = field(default="cycle", repr=False)

    def validate(self) -> None:
        """Settings work_queue_factory could not mean, refused in one line (after
        ``factory:key=value``): a count below its floor, a negative time."""
        if self.tasks_per_worker is not None and not self.tasks_per_worker >= 1:
            raise ValueError(f"tasks_per_worker must be a number ≥ 1, not {self.tasks_per_worker:g} "
                             f"(leave it out for the worker's cores)")
        if self.workers_per_cycle < 0:
            raise ValueError(f"workers_per_cycle must be a whole number ≥ 0 (0: no limit), not {self.workers_per_cycle}")
        for key in ("idle_timeout_s", "worker_wakeup_s"):
            value = getattr(self, key)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{key} must be a number of seconds, 0 or more, not {value:g}")

    def target(self, obs: Observation) -> int:
        """Workers needed: the tasks per worker, or the resources the tasks ask, clamped."""
        shape = obs.worker_shape
        per = self.tasks_per_worker if self.tasks_per_worker and self.tasks_per_worker >= 1 else \
            (int(shape.cores) if shape.cores >= 1 else 1)
        need = math.ceil((obs.waiting_count + len(obs.running)) / per)
        totals = (
            (sum(g.count * g.request.cores for g in obs.waiting) + sum(w.in_use.cores for w in obs.workers),
             shape.cores),
            (sum(g.count * g.request.memory_mb for g in obs.waiting) + sum(w.in_use.memory_mb for w in obs.workers),
             shape.memory_mb),
            (sum(g.count * g.request.disk_mb for g in obs.waiting) + sum(w.in_use.disk_mb for w in obs.workers),
             shape.disk_mb),
        )
        for total, per_worker in totals:
            if per_worker > 0 and total > 0:
                need = max(need, math.ceil(total / per_worker - 1e-9))
        return max(obs.min_workers, min(obs.max_workers, need))

    def idle_for(self) -> float:
        """How long after its last task an idle worker leaves."""
        t, tick = self.idle_timeout_s, self.worker_wakeup_s
        return tick * math.ceil((t + 1) / tick) if tick > 0 else t

    def new_workers(self, needed: int, submitted: int, connected: int) -> int:
        waiting = submitted - connected
        if self.pre_7_4_count:
            new = needed - submitted - abs(waiting)
            if self.workers_per_cycle > 0 and new > self.workers_per_cycle:
                new = self.workers_per_cycle
            return max(0, new)
        new = needed - submitted
        if waiting < 0:  # workers connected from elsewhere
            new -= -waiting
            waiting = 0
        if self.workers_per_cycle > 0 and new + waiting > self.workers_per_cycle:
            new = max(0, self.workers_per_cycle - waiting)
        return max(0, new)

    def decide(self, obs: Observation) -> ScaleDecision:
        now = obs.time
        idle_for = self.idle_for()
        leaving = [w for w in obs.workers if w.idle and w.idle_since is not None and now - w.idle_since >= idle_for]
        staying = len(obs.workers) - len(leaving) + len(obs.pending)
        cycle = self._next_cycle is None or now >= self._next_cycle or self._asked != "idle"
        if cycle:
            needed = self.target(obs)
            submitted = len(obs.workers) + len(obs.pending) + len(self._unreaped - {w.id for w in obs.workers})
            connected = len(obs.workers) - len(leaving)
            add = self.new_workers(needed, submitted, connected)
            self._unreaped = set()  # reaped after the submissions
            # a call that comes a poll late still starts the cycle when it was due: the factory's
            # own cycles do not drift
            due = self._next_cycle
            start = due if due is not None and due <= now < due + REAP_WAIT_S else now
            if staying + add > 0:
                self._reap_until, self._next_cycle = start + REAP_WAIT_S, start + REAP_WAIT_S + CYCLE_S
            else:
                self._reap_until, self._next_cycle = now, start + CYCLE_S
            reason = (f"cycle: target {needed} from {obs.waiting_count} waiting + {len(obs.running)} running; "
                      f"{submitted} submitted, {connected} connected")
        else:
            add, needed = 0, None
            if now <= self._reap_until:
                if leaving and staying == 0:  # its last worker exited: the wait returns, the sleep starts
                    self._reap_until, self._next_cycle = now, now + CYCLE_S
            else:
                self._unreaped |= {w.id for w in leaving}
            reason = f"idle check: {len(leaving)} idle for {idle_for:g} s leave"
        # the next call: the next cycle, or an idle worker's expiry before it (a worker busy now
        # cannot expire within idle_timeout_s)
        gone = {w.id for w in leaving}
        expiries = [w.idle_since + idle_for for w in obs.workers
                    if w.idle and w.idle_since is not None and w.id not in gone]
        wake = min(expiries + [now + idle_for])
        if self._next_cycle is None or wake < self._next_cycle:
            self._asked, at = "idle", wake
        else:
            self._asked, at = "cycle", self._next_cycle
        return ScaleDecision(add=add, shape=obs.worker_shape, drain=[w.id for w in leaving],
                             next_decision_s=max(0.0, at - now), target_workers=needed, reason=reason)
