"""CSS's do-no-harm guard (:mod:`hta.node.css.guard`) on a scripted world: each task's CPU
time grows at a rate set by whether the plan is applied."""

from __future__ import annotations

import pytest

from hta.node.css.guard import MIN_GAIN, RECHECK_EPOCHS, PlanGuard, fit_gain


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


class Stream:
    """Lanes of short tasks run one after another, as a workflow's arrive: a task of kind
    "f" has 8 s of work, "c" 6 s (a step each second knows their ends to a second); under
    the plan each kind goes at ``plan_speed[kind]`` of its kernel speed, and the CPU time it
    receives stays the same (what the CPU rate sees)."""

    def __init__(self, plan_speed: dict[str, float], lanes=("f", "f", "c", "c"), epoch_s: float = 3.0):
        self.t = 0.0
        self.speed = {True: plan_speed, False: {"f": 1.0, "c": 1.0}}
        self.work = {"f": 8.0, "c": 6.0}
        self.lanes = list(lanes)
        self.seq = 0
        self.tasks: dict[str, list] = {}  # id → [kind, work left, started]
        for kind in self.lanes:
            self._start(kind)
        self.guard = PlanGuard(epoch_s, cpu_of=lambda pids: self.t, clock=lambda: self.t)
        self.modes: list[bool] = []

    def _start(self, kind: str) -> None:
        self.seq += 1
        self.tasks[f"task-{self.seq}"] = [kind, self.work[kind], self.t]

    def run(self, seconds: float) -> list:
        verdicts = []
        for _ in range(int(seconds * 10)):
            if abs(self.t - round(self.t)) < 1e-9:  # a management step each second
                containers = {c: {c} for c in self.tasks}
                kinds = {c: v[0] for c, v in self.tasks.items()}
                ages = {c: self.t - v[2] for c, v in self.tasks.items()}
                applied, verdict = self.guard.step(containers, (2, 2), kinds, ages)
                self.modes.append(applied)
                if verdict is not None:
                    verdicts.append(verdict)
            for c, task in list(self.tasks.items()):
                task[1] -= 0.1 * self.speed[bool(self.modes[-1])][task[0]]
                if task[1] <= 1e-9:
                    del self.tasks[c]
                    self._start(task[0])
            self.t = round(self.t + 0.1, 6)
        return verdicts


def test_a_plan_that_speeds_short_tasks_is_kept_on_their_durations():
    # the CPU-rate rule sees no task through a trial here; the tasks' ends show the plan's 25 %
    s = Stream({"f": 1.25, "c": 1.0})
    verdicts = [v for v in s.run(300) if v.evidence != "none"]  # (the first trial's epochs see no end)
    assert verdicts and verdicts[0].evidence == "completions"
    assert verdicts[0].keep and verdicts[0].ratios["f"] == pytest.approx(1.25, rel=0.1)
    assert sum(s.modes) > 0.6 * len(s.modes)  # the plan runs most of the time


def test_a_plan_that_slows_one_kind_of_short_task_is_dropped():
    s = Stream({"f": 1.25, "c": 0.8})
    verdicts = [v for v in s.run(300) if v.evidence != "none"]
    assert verdicts and all(v.evidence == "completions" and not v.keep for v in verdicts)
    assert sum(s.modes) < 0.3 * len(s.modes)


def test_a_plan_that_starves_a_kind_until_its_tasks_stop_ending_is_not_kept():
    # "c" nearly stops under the plan: its tasks end too rarely to fit, the other kind's
    # gain cannot speak for it
    s = Stream({"f": 1.3, "c": 0.05})
    verdicts = s.run(300)
    assert verdicts and not any(v.keep for v in verdicts)


def test_time_without_a_plan_to_try_counts_under_the_kernel():
    t = 0.0
    g = PlanGuard(2.0, cpu_of=lambda pids: t, clock=lambda: t)
    tasks, kinds = {"task-1": {1}}, {"task-1": "x"}
    while not g.step(tasks, (1, 1), kinds, {"task-1": t})[0]:  # (until the trial's plan epoch)
        t += 1.0
    for _ in range(50):  # one class for a while: nothing to try, every core
        t += 1.0
        g.pause(tasks, kinds, {"task-1": t})
    g.step(tasks, (1, 1), kinds, {"task-1": t})
    assert g.lives["task-1"].plan_share < 0.1


def test_epochs_grow_to_fit_the_tasks_and_a_trial_with_nothing_to_judge_runs_again_longer():
    s = Stream({"f": 1.0, "c": 1.0})
    s.run(30)
    # tasks of 6–8 s end: an epoch lasts about one, not the 3 s it was given
    assert 6.0 <= s.guard.epoch_length() / s.guard.stretch <= 8.2
    # one long task, no end, no CPU reading that moves: nothing to judge, not a loss
    g = PlanGuard(2.0, cpu_of=lambda pids: 0.0, clock=lambda: t)
    t = 0.0
    verdicts = []
    for t in range(0, 8):
        _, v = g.step({"task-1": {1}}, (1, 1), {"task-1": "x"}, {"task-1": float(t)})
        verdicts += [v] if v else []
    assert verdicts[0].evidence == "none" and g.stretch == 2 and g.backoff == 2  # (the kernel meanwhile)


def test_every_task_that_ends_is_a_sample_of_the_plans_gain_whatever_its_share():
    # work 10 at speed 1 under the kernel and 1.3 under the plan: d = 10 / (1 + 0.3 s)
    samples = [(s, 10 / (1 + 0.3 * s)) for s in (0.1, 0.35, 0.5, 0.65, 0.9)]
    ratio, noise = fit_gain(samples)
    assert ratio == pytest.approx(1.3, rel=1e-6) and noise < 1e-6
    # a second's resolution on 10-s tasks is noise the verdict must clear
    assert fit_gain(samples, step_s=1.0)[1] > 0.01
    # shares all alike cannot show a slope; three ends are too few
    assert fit_gain([(0.5, 8.0), (0.5, 8.1), (0.52, 7.9), (0.48, 8.0)]) is None
    assert fit_gain(samples[:3]) is None


def test_a_task_of_a_kind_seen_io_intensive_is_io_intensive_from_its_start():
    # a stream's new task has counted no futex calls yet: classed by its kind, the mix (and
    # the plan) does not change each time one starts
    from types import SimpleNamespace

    from hta.node.css.daemon import CSSDaemon

    d = SimpleNamespace(_io_kinds=set())
    classes = {"task-1": "io", "task-2": "cpu"}
    CSSDaemon._remember_io(d, classes, {"task-1": "stress-ng --futex #", "task-2": "stress-ng --cpu #"})
    assert classes == {"task-1": "io", "task-2": "cpu"}
    classes = {"task-3": "cpu", "task-4": "cpu", "cg": "cpu"}  # task-1's successor, just started
    CSSDaemon._remember_io(d, classes, {"task-3": "stress-ng --futex #", "task-4": "stress-ng --cpu #"})
    assert classes == {"task-3": "io", "task-4": "cpu", "cg": "cpu"}


def test_task_kind_reads_the_command_a_worker_runs():
    from hta.node.css.guard import task_kind

    assert task_kind(["stress-ng", "--futex", "1", "--futex-ops", "75000"]) == "stress-ng --futex #"
    assert task_kind(["/bin/sh", "-c", "./hold.sh 13.05 dd_7.out"]) == "hold.sh # dd_#.out"
    assert task_kind(["python3", "/w/blast/align.py", "db.fa", "q.fa"]) == "align.py db.fa q.fa"
