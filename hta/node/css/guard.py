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

What the CPU reading cannot see: a gain in work done per CPU second. The paper's futex
tasks (``stress-ng --futex`` on 2 cores beside 2 CPU-bound ones) are such a case:
confined to one core they finish sooner (with ``taskset``: 27.1 s, the kernel 31.7 s),
yet they receive 20–24 % less CPU time under the plan and make 20–27 % fewer futex calls
a second (waker and waiter on one core need fewer calls for the same work).

So where tasks end, their ends decide: **a task's duration is its work over its speed**.
The guard follows every task from its start to its end (a worker sees both) with the
share of its life it ran under the plan, s. If a task of a kind has work W and goes at
speed v_K under the kernel and v_P under the plan, it ends when W = d (v_K + s (v_P −
v_K)): 1/d is a straight line in s, whose slope over its intercept is the plan's gain.
So every task that ends is a sample, whatever its share, and tasks are grouped by kind
(their command, digits aside: ``stress-ng --futex #``). A kind is judged once
:data:`MIN_FIT_ENDS` of its tasks ended within the trial with shares spread enough to
fit a slope (:data:`MIN_SPREAD`); the noise is the fit's standard error. The plan is
kept only if it gains by :data:`KEEP_SE` standard errors, no kind loses beyond one, and
every kind seen in the trial is judged: a kind whose tasks stop ending under the plan is
the one it starves. A trial alternates K and P epochs of about one task's duration (the
median of the latest ends; each K P pair's length varied by :data:`EPOCH_PATTERN`, so
that tasks' shares spread rather than lock to the epochs' phase) until every kind seen is
judged, for at most :data:`MAX_TRIAL_EPOCHS` epochs. Where no task ends within K P K,
or no kind could be fitted by the last epoch, the CPU rate decides (blind to a gain in
work per CPU second, so it rarely keeps such a plan); each verdict says which
(``evidence``). A trial in which nothing could be judged (no task ran throughout, none
fitted) runs again with epochs twice as long, after the kernel's backoff of a lost one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

#: the smallest gain a plan must show (a fraction of the tasks' progress)
MIN_GAIN = 0.02
#: ... and, judged on durations, by this many standard errors of the fit (a fit of a few
#: ends has few degrees of freedom: at one, a plan with no effect was kept a quarter of the time)
KEEP_SE = 1.5
#: epochs between trials after a lost one, at most
MAX_BACKOFF = 64
#: epochs a kept plan runs before it is tried again
RECHECK_EPOCHS = 10
#: ends of a kind within a trial for its durations to decide ...
MIN_FIT_ENDS = 4
#: ... spread over the plan's share of their lives by at least this: the sum of the shares'
#: squared deviations (two tasks at a share of 0.25 and two at 0.75 spread 0.25)
MIN_SPREAD = 0.2
#: a trial whose tasks end goes on, epoch after epoch, for its kinds' ends, at most this long
MAX_TRIAL_EPOCHS = 8
#: a trial's epochs last these multiples of their base length, a K and a P epoch each in
#: turn (so that tasks' shares spread instead of locking to the epochs' phase)
EPOCH_PATTERN = (1.0, 1.4, 0.7, 1.2)
#: an epoch between trials lasts this many trial epochs (trials take the time they took
#: when a trial's epochs were this long)
REST_EPOCHS = 3.0
#: an epoch's base length is at least this many times the median duration of the tasks
#: seen to end ...
EPOCH_TASKS = 1.0
#: ... and at most this long
MAX_EPOCH_S = 600.0
#: the durations an epoch's length is learned from: the latest ends
LEARN_ENDS = 20


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
class TaskLife:
    """One task from its start to its end, and how long it ran under each scheduling."""

    kind: str
    started: float
    plan_s: float = 0.0
    kernel_s: float = 0.0
    ended: float | None = None

    @property
    def duration(self) -> float:
        return (self.ended or self.started) - self.started

    @property
    def plan_share(self) -> float:
        total = self.plan_s + self.kernel_s
        return self.plan_s / total if total > 0 else 0.0


@dataclass
class Epoch:
    mode: str  # "kernel" or "plan"
    started: float
    cpu0: dict[str, tuple[frozenset[int], float]]
    #: CPU seconds a second per task, once the epoch ended (tasks there throughout only)
    rates: dict[str, float] = field(default_factory=dict)
    #: how long it lasts (:meth:`PlanGuard.epoch_length` when it began)
    length: float = 0.0


@dataclass
class Verdict:
    """A trial's outcome, logged with its figures."""

    keep: bool
    gain: float
    noise: float
    tasks: int
    #: the largest fall of one task's rate under the plan (a fraction; 0: none fell)
    worst_loss: float = 0.0
    #: each task's (or kind's) progress under the plan over the kernel's (1.1: 10 % faster)
    ratios: dict[str, float] = field(default_factory=dict)
    #: what decided: "completions" (tasks' durations by kind), "cpu" (CPU time received
    #: a second), or "none" (nothing to judge: the trial runs again, with longer epochs)
    evidence: str = "cpu"


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
        #: every task seen, by container id, and those that ended (latest last)
        self.lives: dict[str, TaskLife] = {}
        self.ends: list[TaskLife] = []
        self._last_step: float | None = None
        self._step_s = 0.0  # (the last step's spacing: what a duration is known to)
        self._last_mode: str | None = None
        #: epochs of trials that found nothing to judge are lengthened by this factor
        self.stretch = 1.0

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

    def epoch_length(self) -> float:
        """The next epoch's length: long enough for tasks to end within it."""
        recent = [life.duration for life in self.ends[-LEARN_ENDS:]]
        by_tasks = EPOCH_TASKS * statistics.median(recent) if recent else 0.0
        return min(MAX_EPOCH_S, max(self.epoch_s, by_tasks) * self.stretch)

    def _follow(self, containers: dict[str, set[int]], kinds: dict[str, str], ages: dict[str, float],
                now: float) -> None:
        """Count the time since the last step against the scheduling in effect; note new
        tasks (from their real start, ``ages``) and ended ones."""
        dt = now - self._last_step if self._last_step is not None else 0.0
        if dt > 0:
            self._step_s = dt
        for life in self.lives.values():
            if self._last_mode == "plan":
                life.plan_s += dt
            else:
                life.kernel_s += dt
        for c in list(self.lives):
            if c not in containers:
                life = self.lives.pop(c)
                life.ended = now
                if life.kind:
                    self.ends.append(life)
        del self.ends[:-1000]
        for c in containers:
            if c not in self.lives:
                age = max(0.0, ages.get(c, 0.0))
                life = TaskLife(kinds.get(c, ""), now - age)
                if self._last_mode == "plan":  # (its time before this step: under what ran then)
                    life.plan_s = age
                else:
                    life.kernel_s = age
                self.lives[c] = life
        self._last_step = now

    def _judge_completions(self, since: float, every_kind: bool = False) -> Verdict | None:
        """The trial judged by the durations of the tasks that ended in it, kind by kind
        (:func:`fit_gain`); None where no kind can be judged yet (``every_kind``: where one
        kind seen in the trial, ended or running, cannot). A plan is kept only if every
        kind seen in the trial is judged: one whose tasks stop ending under it may be the
        one it starves."""
        by_kind: dict[str, list[TaskLife]] = {}
        for life in self.ends:
            if life.ended is not None and life.ended > since and life.duration > 0:
                by_kind.setdefault(life.kind, []).append(life)
        seen = set(by_kind) | {life.kind for life in self.lives.values() if life.kind}
        ratios, noises = {}, []
        for kind, lives in by_kind.items():
            fit = fit_gain([(life.plan_share, life.duration) for life in lives], self._step_s)
            if fit is not None:
                ratios[kind], noise = fit
                noises.append(noise)
        if not ratios or (every_kind and len(ratios) < len(seen)):
            return None
        gain = geomean(list(ratios.values())) - 1
        # the geometric mean's noise: the kinds' own, as independent errors averaged
        noise = math.sqrt(sum(n * n for n in noises)) / len(noises)
        worst_loss = max(0.0, 1 - min(ratios.values()))
        keep = (len(ratios) == len(seen) and gain > max(KEEP_SE * noise, MIN_GAIN)
                and worst_loss <= max(noise, MIN_GAIN))
        return Verdict(keep=keep, gain=round(gain, 4), noise=round(noise, 4),
                       tasks=sum(len(lives) for lives in by_kind.values()), worst_loss=round(worst_loss, 4),
                       ratios={k: round(r, 4) for k, r in ratios.items()}, evidence="completions")

    def _close_trial(self) -> Verdict | None:
        """The trial's verdict once it can be given, else None (it goes on): on the tasks'
        durations as soon as every kind seen in it can be judged; on the CPU rate after K P K
        if no task ended within them; on whatever there is after :data:`MAX_TRIAL_EPOCHS`."""
        if len(self.trial) < 2:
            return None
        since = self.trial[0].started
        by_ends = self._judge_completions(since, every_kind=True)
        if by_ends is not None:
            return by_ends
        if len(self.trial) < 3:
            return None
        ended = any(life.ended is not None and life.ended > since for life in self.ends)
        if ended and len(self.trial) < MAX_TRIAL_EPOCHS:
            return None
        return self._judge_completions(since) or self._judge_cpu()

    def _judge_cpu(self) -> Verdict:
        """The trial judged by the CPU time each task received a second in K P K (tasks
        there throughout)."""
        k1, p, k2 = self.trial[:3]
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
                       worst_loss=round(worst_loss, 4), ratios={c: round(r, 4) for c, r in by_task.items()},
                       evidence="cpu" if common else "none")

    def _leave_mix(self) -> None:
        """Remember where the mix under trial was; a trial cut short counts as lost (the
        plan ran on no evidence)."""
        if self.mix is not None:
            in_trial = self.rest_epochs == 0 and (self.trial or (self.current and self.current.mode == "plan"))
            self.by_mix[self.mix] = (("kernel", self.backoff, min(self.backoff * 2, MAX_BACKOFF)) if in_trial
                                     else (self.resting, self.rest_epochs, self.backoff))

    def pause(self, containers: dict[str, set[int]] | None = None, kinds: dict[str, str] | None = None,
              ages: dict[str, float] | None = None) -> None:
        """There is no plan to try now (its plan is the kernel's every core): the epoch under
        way is dropped, and the next mix starts or resumes its trials as usual. The tasks
        (as :meth:`step` takes them) run under the kernel's scheduling meanwhile."""
        if containers is not None:
            self._follow(containers, kinds or {}, ages or {}, self.clock())
        self._last_mode = "kernel"
        self._leave_mix()
        self.mix, self.trial, self.current = None, [], None

    def step(self, containers: dict[str, set[int]], mix: tuple[int, int], kinds: dict[str, str] | None = None,
             ages: dict[str, float] | None = None) -> tuple[bool, Verdict | None]:
        """(apply the plan now?, the verdict of a trial that just ended). ``mix`` is how many
        tasks of each class there are: a new mix is a new plan, tried at once. ``kinds``: each
        task's kind (its command, :func:`task_kind`; a task without one is never a sample of
        its kind's durations); ``ages``: how long each task has run (seconds)."""
        now = self.clock()
        self._follow(containers, kinds or {}, ages or {}, now)
        verdict = None
        if mix != self.mix:
            self._leave_mix()
            self.resting, self.rest_epochs, self.backoff = self.by_mix.get(mix, ("kernel", 0, 1))
            self.mix, self.trial, self.current = mix, [], None
        if self.current is not None and now - self.current.started >= self.current.length:
            self._end(self.current, containers, now)
            if self.rest_epochs > 0:
                self.rest_epochs -= 1
            else:
                self.trial.append(self.current)
            self.current = None
            verdict = self._close_trial()
            if verdict is not None:
                self.verdicts.append(verdict)
                self.trial = []
                # nothing ran throughout and nothing ended: the next trial's epochs are longer;
                # meanwhile the kernel's scheduling, as after a lost trial (no evidence, no plan)
                self.stretch = (min(self.stretch * 2, MAX_EPOCH_S / max(self.epoch_s, 1e-9))
                                if verdict.evidence == "none" else 1.0)
                if verdict.keep:
                    self.resting, self.rest_epochs, self.backoff = "plan", RECHECK_EPOCHS, 1
                else:
                    self.resting, self.rest_epochs = "kernel", self.backoff
                    self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        if self.current is None:
            in_trial = self.rest_epochs == 0
            mode = self.resting if not in_trial else ("plan" if len(self.trial) % 2 == 1 else "kernel")
            # where tasks end, trial epochs last about a task (their lengths varied by the
            # pattern, so that tasks' shares of the plan spread) and rest epochs a few; where
            # none ended yet, epochs are read by the CPU rate and stay even
            factor = (1.0 if not self.ends else REST_EPOCHS if not in_trial
                      else EPOCH_PATTERN[len(self.trial) // 2 % len(EPOCH_PATTERN)])
            length = min(MAX_EPOCH_S, self.epoch_length() * factor)
            self.current = Epoch(mode, now, self._snapshot(containers), length=length)
        self._last_mode = self.current.mode
        return self.current.mode == "plan", verdict


def fit_gain(samples: list[tuple[float, float]], step_s: float = 0.0) -> tuple[float, float] | None:
    """A kind's speed under the plan over its speed under the kernel, and that ratio's
    standard error, from its tasks' (plan share, duration): the straight line 1/d = a + b s
    fitted by least squares gives (a + b) / a. None where there are fewer than
    :data:`MIN_FIT_ENDS` samples or their shares spread less than :data:`MIN_SPREAD`.
    A duration is known to a step (a task's end is seen at the step after it): the noise
    is never less than that granularity's."""
    n = len(samples)
    if n < MIN_FIT_ENDS:
        return None
    xs = [s for s, _ in samples]
    ys = [1.0 / d for _, d in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx < MIN_SPREAD:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    if a <= 0:
        return None
    var = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / (n - 2)
    # (a duration known to a step: an error uniform over it, as a fraction of 1/d)
    var = max(var, statistics.fmean((y * step_s / d) ** 2 for (_, d), y in zip(samples, ys)) / 12)
    var_b, var_a, cov = var / sxx, var * (1 / n + mx * mx / sxx), -mx * var / sxx
    ratio = max(1 + b / a, 1e-3)  # (a + b ≤ 0: the plan stopped the kind)
    se = math.sqrt(max(0.0, var_b / a**2 + b * b * var_a / a**4 - 2 * b * cov / a**3))
    return ratio, se


def task_kind(cmdline: list[str]) -> str:
    """What kind of task a command is, for grouping durations: its program and first two
    arguments (a shell's ``-c`` command read as the command; paths cut to their names;
    numbers as ``#``): ``stress-ng --futex 1 --futex-ops 9000`` → ``stress-ng --futex #``."""
    import os
    import re
    import shlex

    words = list(cmdline)
    if len(words) >= 3 and os.path.basename(words[0]) in ("sh", "bash", "dash") and words[1] == "-c":
        try:
            words = shlex.split(words[2])
        except ValueError:
            words = words[2].split()
    if len(words) > 1 and os.path.basename(words[0]).startswith("python"):
        words = words[1:]
    return " ".join(re.sub(r"\d+(\.\d+)?", "#", os.path.basename(w) if "/" in w else w) for w in words[:3])
