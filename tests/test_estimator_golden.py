"""The estimator and HTA's policy give today's answers on a committed set of observations
(``tests/data/golden_estimates.json``, made by ``tests/golden_estimates.py``): a change
that moves any of them is a change of behaviour, to be made on purpose."""

from __future__ import annotations

import json

import pytest
from golden_estimates import LARGE, OPTIONS, PATH, POLICIES, answers, digest, large_observation

from hta.estimator import QueueDrainEstimator, expected_remaining, outrun_categories
from hta.estimator.forecast import runtime_of
from hta.model import Observation

GOLDEN = json.loads(PATH.read_text())


def test_the_golden_file_is_made_for_todays_option_sets():
    assert GOLDEN["options"] == OPTIONS and GOLDEN["policies"] == POLICIES
    assert len(GOLDEN["cases"]) >= 100


@pytest.mark.parametrize("chunk", range(4))
def test_same_answers_as_the_golden_file(chunk: int):
    for case in GOLDEN["cases"][chunk::4]:
        obs = Observation.model_validate(case["observation"])
        assert answers(obs, case["horizon"]) == case["answers"], case["seed"]


def test_same_answers_on_large_queues():
    for (n, w, seed), case in zip(LARGE, GOLDEN["large"]):
        assert case["args"] == [n, w, seed]
        assert digest(answers(large_observation(n, w, seed), case["horizon"])) == case["digest"], (n, w)


def running_inflight(obs: Observation, horizon: float) -> list[tuple[float, float]]:
    """Worked out apart from the play: (cores, seconds past the horizon) of each measured
    running task on a known worker that is expected to end after the horizon."""
    known, outrun = {w.id for w in obs.workers}, outrun_categories(obs)
    out = []
    for t in obs.running:
        model = obs.categories.get(t.category)
        if model is None or runtime_of(obs.categories, t.category) is None or t.worker not in known:
            continue
        at = obs.time + max(expected_remaining(obs.time - t.started_at, model, t.category in outrun), 0.0)
        if at > obs.time + horizon:
            out.append((t.allocation.cores, at - obs.time - horizon))
    return out


def test_inflight_of_running_tasks_is_what_they_hold_past_the_horizon() -> None:
    """With nothing waiting or upcoming the play starts no task: what it finds in flight at
    the horizon is the running tasks' part alone, worked out here apart from it."""
    checked = 0
    for case in GOLDEN["cases"]:
        obs, horizon = Observation.model_validate(case["observation"]), case["horizon"]
        bare = obs.model_copy(update={"waiting": [], "upcoming": []})
        got = sorted(QueueDrainEstimator().estimate(bare, horizon).inflight)
        want = sorted(running_inflight(bare, horizon))
        assert len(got) == len(want) and all(abs(a[0] - b[0]) < 1e-9 and abs(a[1] - b[1]) < 1e-6
                                             for a, b in zip(got, want)), case["seed"]
        checked += bool(want)
    assert checked >= 20


def test_the_golden_observations_reach_every_branch() -> None:
    """The golden answers hold the estimator to its behaviour only where the inputs make the
    play do everything."""
    seen = dict(releases=0, barrier=0, left=0, whole_left=0, unused=0, tail_capped=0, never_left=0, nothing_left=0,
                inflight_clamped=0, mixed_left=0, past_longest=0, part_of_worker=0, drains=0, buys=0)
    for case in GOLDEN["cases"]:
        obs, horizon = Observation.model_validate(case["observation"]), case["horizon"]
        e = QueueDrainEstimator().estimate(obs, horizon)
        seen["releases"] += bool(e.releases)
        seen["barrier"] += any(len([r for r in u.after if r.startswith("task:")]) >= 2 for u in obs.upcoming)
        seen["left"] += bool(e.left_waiting)
        seen["whole_left"] += any(g.whole_worker for g in e.left_waiting)
        seen["never_left"] += any(g.category == "never" for g in e.left_waiting)
        seen["unused"] += bool(e.unused_idle)
        seen["tail_capped"] += e.workers_needed < e.packed_need
        seen["nothing_left"] += not e.left_waiting
        r = [runtime_of(obs.categories, g.category) for g in e.left_waiting]
        seen["inflight_clamped"] += any(s > max((x for x in r if x), default=0.0) for _, s in e.inflight)
        seen["mixed_left"] += None in r and any(x is not None for x in r) and e.workers_needed < e.packed_need
        seen["past_longest"] += bool(outrun_categories(obs))
        measured = [(g, x) for g, x in zip(e.left_waiting, r) if x is not None]
        seen["part_of_worker"] += bool(measured) and QueueDrainEstimator._usable_share(measured, obs.worker_shape) < 1
        seen["drains"] += bool(case["answers"]["decisions"]["hta"]["drain"])
        seen["buys"] += case["answers"]["decisions"]["hta"]["add"] > 0
    assert all(n >= 4 for n in seen.values()), seen
