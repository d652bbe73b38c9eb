"""CSS's do-no-harm guard (:mod:`hta.node.css.guard`) on a scripted world: each task's CPU
time grows at a rate set by whether the plan is applied."""

from __future__ import annotations

import pytest

from hta.node.css.guard import MIN_GAIN, RECHECK_EPOCHS, PlanGuard


class World:
    """Two tasks; under the plan task "a" gets ``plan_a`` CPU s/s, else ``kernel_a`` (task "b": 0.5)."""

    def __init__(self, kernel_a: float, plan_a: float, jitter: list[float] | None = None, plan_b: float = 0.5):
        self.t = 0.0
        self.cpu = {"a": 0.0, "b": 0.0}
        self.rates = {True: {"a": plan_a, "b": plan_b}, False: {"a": kernel_a, "b": 0.5}}
        self.jitter = list(jitter or [])
        self.guard = PlanGuard(3.0, cpu_of=lambda pids: self.cpu[next(iter(pids))], clock=lambda: self.t)
        self.modes: list[bool] = []

    def run(self, seconds: float, mix=(1, 1)) -> list:
        verdicts = []
        for _ in range(int(seconds)):
            applied, verdict = self.guard.step({"a": {"a"}, "b": {"b"}}, mix)
            if verdict is not None:
                verdicts.append(verdict)
            self.modes.append(applied)
            k = 1 + (self.jitter.pop(0) if self.jitter else 0.0)
            for task, rate in self.rates[applied].items():
                self.cpu[task] += rate * k
            self.t += 1.0
        return verdicts


def test_a_plan_that_slows_a_task_goes_back_to_the_kernel_and_is_tried_less_and_less_often():
    w = World(kernel_a=1.0, plan_a=0.8)
    verdicts = w.run(9 + 1)
    assert [v.keep for v in verdicts] == [False]
    assert verdicts[0].gain == pytest.approx((0.8 * 0.5) ** 0.5 / (1.0 * 0.5) ** 0.5 - 1, abs=1e-3)
    assert w.modes[:9] == [False] * 3 + [True] * 3 + [False] * 3  # K P K
    w.run(200)
    # after each lost trial, twice as many kernel epochs before the next: plan epochs thin out
    plan_s = sum(w.modes)
    assert plan_s < 0.2 * len(w.modes)
    assert all(not v.keep for v in w.guard.verdicts) and len(w.guard.verdicts) <= 6


def test_a_plan_that_helps_is_kept_and_tried_again_every_few_epochs():
    w = World(kernel_a=0.5, plan_a=0.8)
    w.run(9 + 1)
    assert [v.keep for v in w.guard.verdicts] == [True]
    w.run(3 * RECHECK_EPOCHS)
    assert all(w.modes[9:9 + 3 * RECHECK_EPOCHS])  # the plan runs until the next trial
    w.run(9)
    assert [v.keep for v in w.guard.verdicts] == [True, True]


def test_a_plan_that_feeds_one_task_by_starving_another_is_not_kept():
    # task a doubles, task b loses 20 %: the geometric mean gains 26 %, the makespan
    # (b, the slow one, ends last) would not
    w = World(kernel_a=0.5, plan_a=1.0, plan_b=0.4)
    (verdict,) = w.run(9 + 1)
    assert verdict.gain == pytest.approx((2.0 * 0.8) ** 0.5 - 1, abs=1e-3)
    assert verdict.worst_loss == pytest.approx(0.2, abs=1e-3)
    assert not verdict.keep


def test_a_gain_within_the_noise_of_the_kernel_epochs_is_not_kept():
    # the plan's 8 % is less than the 12 % the two kernel epochs differ by
    w = World(kernel_a=1.0, plan_a=1.31, jitter=[0.0] * 6 + [0.12] * 3)
    verdicts = w.run(10)
    assert verdicts and not verdicts[0].keep and verdicts[0].noise > verdicts[0].gain > MIN_GAIN


def test_a_new_mix_of_classes_is_tried_at_once():
    w = World(kernel_a=1.0, plan_a=0.8)
    w.run(10)
    w.run(4, mix=(2, 1))  # a new plan: its trial starts with a kernel epoch, then the plan
    w.run(6, mix=(2, 1))
    assert w.modes[10:16] == [False] * 3 + [True] * 3


def test_mixes_that_come_and_go_do_not_restart_trials_of_a_losing_plan():
    # the classes' mix flips every 4 s (a task's futex count under λ just after each
    # cleaning, tasks ending): each mix resumes its own backoff, and a trial cut short
    # counts as lost, so the losing plan runs less and less
    w = World(kernel_a=1.0, plan_a=0.5)
    for i in range(60):
        w.run(4, mix=(1, 1) if i % 2 else (0, 2))
    assert sum(w.modes) < 0.15 * len(w.modes)
