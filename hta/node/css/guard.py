"""Do no harm: CSS keeps its plan only while the tasks measurably progress faster under it.

The paper's CSS (Song, Yu & Lee 2022) gains where IO-waiting threads steal time slices
from CPU-bound ones on a node with many cores, and loses on small workloads; a worker pod
is usually small. So the plan is on trial, as feedback-controlled CPU allocation is in
container runtimes: epochs under the kernel's own scheduling (K) and under the plan (P)
alternate, K P K, and each task's progress is read as the CPU time it received per
second.

The plan wins when the geometric mean over tasks of its rate over the mean of the two K
epochs around it beats 1 by more than the noise the two K epochs show against each other
(never less than :data:`MIN_GAIN`), and no task's rate falls by more than that. A node
cannot know which of its tasks the workflow waits on, so a plan that feeds one task by
starving another loses, as does one that leaves a core idle that the kernel would have
used. A lost trial is tried again after twice as many epochs as the last (up to
:data:`MAX_BACKOFF`); a plan kept is tried again every :data:`RECHECK_EPOCHS` epochs; a
new mix of classes starts a trial at once, and a mix seen before resumes where it was
(tasks come and go and futex counts are cleaned every 30 s, so mixes recur); a trial a
new mix cuts short counts as lost.

What the reading cannot see: a gain in work done per CPU second. The paper's futex
tasks (``stress-ng --futex`` on 2 cores beside 2 CPU-bound ones) are such a case:
confined to one core they finish sooner (with ``taskset``: 27.1 s, the kernel 31.7 s),
yet no reading the guard has shows it. Under CTBRA's partition the worst task received
20–24 % less CPU time in trials; under ``confine`` the futex tasks made 20–27 % fewer
futex calls a second (waker and waiter on one core need fewer calls for the same
work), so futex calls are no measure of their progress either. Without a measure of
work (no hardware counters in most VMs; completions come too late) the guard errs
toward the kernel.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

#: the smallest gain a plan must show (a fraction of the tasks' progress)
MIN_GAIN = 0.02
#: epochs between trials after a lost one, at most
MAX_BACKOFF = 64
#: epochs a kept plan runs before it is tried again
RECHECK_EPOCHS = 10


def tree_cpu_s(pids: set[int]) -> float | None:
    """CPU seconds (user + system) the processes have received, or None if one is gone."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        total += t.user + t.system
    return total


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 1.0


@dataclass
class Epoch:
    mode: str  # "kernel" or "plan"
    started: float
    cpu0: dict[str, tuple[frozenset[int], float]]
    #: CPU seconds a second per task, once the epoch ended (tasks there throughout only)
    rates: dict[str, float] = field(default_factory=dict)


@dataclass
class Verdict:
    """A trial's outcome, logged with its figures."""

    keep: bool
    gain: float
    noise: float
    tasks: int
    #: the largest fall of one task's rate under the plan (a fraction; 0: none fell)
    worst_loss: float = 0.0
    #: each task's progress under the plan over the kernel's (1.1: 10 % faster)
    ratios: dict[str, float] = field(default_factory=dict)


class PlanGuard:
    """Says at each management step whether the plan is applied (True) or the tasks run
    under the kernel's scheduling on every core (False)."""

    def __init__(self, epoch_s: float, cpu_of: Callable[[set[int]], float | None] = tree_cpu_s,
                 clock: Callable[[], float] = time.monotonic):
        self.epoch_s = epoch_s
        self.cpu_of = cpu_of
        self.clock = clock
        self.trial: list[Epoch] = []
        self.current: Epoch | None = None
        #: what runs between trials: the plan (kept) or the kernel (lost)
        self.resting = "kernel"
        self.rest_epochs = 0  # epochs left before the next trial
        self.backoff = 1
        self.mix: tuple[int, int] | None = None
        #: what each mix of classes last came to (resting, epochs left, backoff): a mix
        #: seen again (tasks come and go, counts are cleaned) resumes where it was
        self.by_mix: dict[tuple[int, int], tuple[str, int, int]] = {}
        self.verdicts: list[Verdict] = []

    def _snapshot(self, containers: dict[str, set[int]]) -> dict[str, tuple[frozenset[int], float]]:
        out = {}
        for c, pids in containers.items():
            cpu = self.cpu_of(pids)
            if cpu is not None:
                out[c] = (frozenset(pids), cpu)
        return out

    def _end(self, epoch: Epoch, containers: dict[str, set[int]], now: float) -> None:
        span = max(now - epoch.started, 1e-6)
        for c, (pids, cpu1) in self._snapshot(containers).items():
            before = epoch.cpu0.get(c)
            if before is not None and before[0] == pids:  # (the same processes throughout)
                epoch.rates[c] = max(cpu1 - before[1], 0.0) / span

    def _judge(self) -> Verdict:
        k1, p, k2 = self.trial
        common = [c for c in p.rates if c in k1.rates and c in k2.rates
                  and k1.rates[c] + k2.rates[c] > 0 and p.rates[c] > 0]
        by_task = {c: p.rates[c] / ((k1.rates[c] + k2.rates[c]) / 2) for c in common}
        ratios = list(by_task.values())
        gain = geomean(ratios) - 1
        noise = abs(geomean([k2.rates[c] / k1.rates[c] for c in common if k1.rates[c] > 0 and k2.rates[c] > 0]) - 1)
        worst_loss = max(0.0, 1 - min(ratios)) if ratios else 0.0
        bar = max(noise, MIN_GAIN)
        keep = bool(common) and gain > bar and worst_loss <= bar
        return Verdict(keep=keep, gain=round(gain, 4), noise=round(noise, 4), tasks=len(common),
                       worst_loss=round(worst_loss, 4), ratios={c: round(r, 4) for c, r in by_task.items()})

    def _leave_mix(self) -> None:
        """Remember where the mix under trial was; a trial cut short counts as lost (the
        plan ran on no evidence)."""
        if self.mix is not None:
            in_trial = self.rest_epochs == 0 and (self.trial or (self.current and self.current.mode == "plan"))
            self.by_mix[self.mix] = (("kernel", self.backoff, min(self.backoff * 2, MAX_BACKOFF)) if in_trial
                                     else (self.resting, self.rest_epochs, self.backoff))

    def pause(self) -> None:
        """There is no plan to try now (its plan is the kernel's every core): the epoch under
        way is dropped, and the next mix starts or resumes its trials as usual."""
        self._leave_mix()
        self.mix, self.trial, self.current = None, [], None

    def step(self, containers: dict[str, set[int]], mix: tuple[int, int]) -> tuple[bool, Verdict | None]:
        """(apply the plan now?, the verdict of a trial that just ended). ``mix`` is how many
        tasks of each class there are: a new mix is a new plan, tried at once."""
        now = self.clock()
        verdict = None
        if mix != self.mix:
            self._leave_mix()
            self.resting, self.rest_epochs, self.backoff = self.by_mix.get(mix, ("kernel", 0, 1))
            self.mix, self.trial, self.current = mix, [], None
        if self.current is not None and now - self.current.started >= self.epoch_s:
            self._end(self.current, containers, now)
            if self.rest_epochs > 0:
                self.rest_epochs -= 1
            else:
                self.trial.append(self.current)
            self.current = None
            if len(self.trial) == 3:
                verdict = self._judge()
                self.verdicts.append(verdict)
                self.trial = []
                if verdict.keep:
                    self.resting, self.rest_epochs, self.backoff = "plan", RECHECK_EPOCHS, 1
                else:
                    self.resting, self.rest_epochs = "kernel", self.backoff
                    self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        if self.current is None:
            mode = self.resting if self.rest_epochs > 0 else ("plan" if len(self.trial) == 1 else "kernel")
            self.current = Epoch(mode, now, self._snapshot(containers))
        return self.current.mode == "plan", verdict
