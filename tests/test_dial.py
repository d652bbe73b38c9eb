"""The time–cost dial: the whole-workflow forecast on a pool of N nodes, and the plan a
deadline or a budget makes of it (the pool HTA's policy buys within)."""

import math

import pytest

from hta.estimator.workflow_end import forecast_end, node_share, unmeasured_guess
from hta.model import (
    CategoryModel,
    DialPlan,
    LatencyStats,
    Observation,
    PendingWorker,
    Resources,
    RunningTask,
    TaskGroup,
    UpcomingTasks,
    WorkerInfo,
)
from hta.plural import span
from hta.policies import make_policy
from hta.policies.dial import Dial, budget_spent
from hta.policies.hta_policy import HTAPolicy
from hta.sim.cluster import ClusterModel
from hta.sim.costs import COSTS
from hta.sim.run import Simulation
from hta.sim.workload import load_workload

NODE = Resources(cores=1, memory_mb=1000, disk_mb=1000)
WHOLE = Resources()  # declares nothing: a whole worker


def measured(name: str, runtime: float, p90: float | None = None, peak: Resources = NODE) -> CategoryModel:
    return CategoryModel(name=name, samples=5, peak=peak, runtime_mean_s=runtime, runtime_median_s=runtime,
                         runtime_p90_s=p90 or runtime, runtime_max_s=p90 or runtime)


def obs(**kw) -> Observation:
    base = dict(time=0.0, worker_shape=NODE, max_workers=10, latency=LatencyStats(samples=[50.0] * 3))
    base.update(kw)
    return Observation(**base)


def stage(count: int, runtime: float, **kw) -> Observation:
    """``count`` waiting tasks of one measured category, 1-node tasks, nothing connected."""
    return obs(waiting=[TaskGroup(id="g", category="work", count=count, request=WHOLE)],
               categories={"work": measured("work", runtime)}, **kw)


# -- the forecast ------------------------------------------------------------------------------

def test_a_stage_ends_after_a_latency_and_its_rounds():
    o = stage(20, 100.0)
    assert forecast_end(o, 10, 50.0).end_s == pytest.approx(50 + 2 * 100)  # 2 rounds on 10 nodes
    assert forecast_end(o, 20, 50.0).end_s == pytest.approx(50 + 100)
    assert forecast_end(o, 3, 50.0).end_s == pytest.approx(50 + 7 * 100)  # ⌈20/3⌉ rounds


def test_the_cost_counts_busy_nodes_a_latency_and_a_hold_for_each_node_bought():
    o = stage(20, 100.0)
    f = forecast_end(o, 10, 50.0, hold_s=600.0)
    assert f.node_s == pytest.approx(20 * 100 + 10 * (50 + 600))
    # a pool too large for the work pays for the nodes it buys, idle ones too
    assert forecast_end(o, 40, 50.0, hold_s=600.0).node_s > f.node_s


def test_the_dag_ahead_is_released_when_what_it_waits_for_ends():
    o = obs(waiting=[TaskGroup(id="a", category="work", count=4, request=WHOLE)],
            upcoming=[UpcomingTasks(id="b", category="merge", count=1, request=WHOLE, after=["a"]),
                      UpcomingTasks(id="c", category="work", count=4, request=WHOLE, after=["b"])],
            categories={"work": measured("work", 100.0), "merge": measured("merge", 10.0)})
    # 4 nodes: a (100 s), then merge (10 s), then c (100 s), after a latency
    assert forecast_end(o, 4, 50.0).end_s == pytest.approx(50 + 100 + 10 + 100)


def test_running_tasks_hold_their_share_until_their_expected_end():
    o = obs(time=100.0, workers=[WorkerInfo(id="w0", capacity=NODE, running=1)],
            running=[RunningTask(task_id=1, category="work", allocation=NODE, started_at=40.0, worker="w0",
                                 whole_worker=True)],
            waiting=[TaskGroup(id="g", category="work", count=1, request=WHOLE)],
            categories={"work": measured("work", 100.0)})
    # one node, there now: the running task ends at 140, the waiting one runs 140–240
    assert forecast_end(o, 1, 50.0).end_s == pytest.approx(240.0)


def test_pending_workers_arrive_a_latency_after_they_were_asked_for():
    o = stage(2, 100.0, time=30.0, pending=[PendingWorker(id="p", requested_at=0.0, shape=NODE)])
    f = forecast_end(o, 2, 50.0)
    # the pending node at 50 runs one task to 150; the one bought now comes at 80, ends at 180
    assert f.end_s == pytest.approx(180.0)


def test_tasks_share_a_node_by_their_measured_peak():
    big = Resources(cores=4, memory_mb=4000, disk_mb=4000)
    quarter = Resources(cores=1, memory_mb=1000, disk_mb=0)
    assert node_share(WHOLE, measured("x", 1.0, peak=quarter), big, probe_split=3) == pytest.approx(0.25)
    assert node_share(WHOLE, None, big, probe_split=3) == pytest.approx(1 / 3)  # a probe pod
    assert node_share(Resources(cores=2, memory_mb=1, disk_mb=0), None, big, 3) == pytest.approx(0.5)


def test_a_never_measured_category_is_guessed_from_the_measured_and_its_own_age():
    o = obs(time=500.0, categories={"a": measured("a", 10.0), "b": measured("b", 1000.0)},
            waiting=[TaskGroup(id="g", category="new", count=5, request=WHOLE)],
            upcoming=[UpcomingTasks(id="u", category="later", count=1, request=WHOLE, after=["g"])],
            running=[RunningTask(task_id=1, category="old", allocation=NODE, started_at=100.0)])
    g = unmeasured_guess(o)
    assert g["new"] == pytest.approx(100.0)  # the geometric mean of 10 s and 1000 s
    assert g["later"] == pytest.approx(100.0)
    assert g["old"] == pytest.approx(400.0)  # it has run 400 s: at least that
    assert unmeasured_guess(obs(waiting=[TaskGroup(id="g", category="new", count=1)])) is None


def test_nothing_measured_means_no_forecast():
    assert forecast_end(obs(waiting=[TaskGroup(id="g", category="new", count=1)]), 1, 50.0) is None


def test_an_earlier_runs_runtime_is_the_guess_until_this_run_measures_the_category():
    """``--runtime-prior``: the forecast stands before a first task ends, each category at
    the earlier run's mean; one this run has measured is its own."""
    prior = CategoryModel(name="new", prior_runtime_s=300.0)
    o = obs(waiting=[TaskGroup(id="g", category="new", count=5, request=WHOLE),
                     TaskGroup(id="h", category="none", count=1, request=WHOLE)],
            categories={"new": prior})
    assert unmeasured_guess(o) == {"new": 300.0, "none": pytest.approx(300.0)}  # (one never seen: the priors' mean)
    assert forecast_end(o, 5, 50.0).end_s == pytest.approx(50.0 + 300.0)  # (probe pods: one round)
    o.categories["new"] = measured("new", 100.0).model_copy(update={"prior_runtime_s": 300.0})
    assert unmeasured_guess(o) == {"none": pytest.approx(100.0)}


def test_a_deadline_with_an_earlier_runs_runtimes_sizes_the_pool_before_a_task_ends():
    o = obs(waiting=[TaskGroup(id="g", category="work", count=100, request=WHOLE)], max_workers=50,
            categories={"work": CategoryModel(name="work", prior_runtime_s=100.0)})
    plan = Dial(deadline_s=2000.0).decide_nodes(o, 50.0, probe_split=1)
    assert plan.nodes is not None and plan.nodes < 50  # not the cap: a pool the deadline needs
    without = obs(waiting=[TaskGroup(id="g", category="work", count=100, request=WHOLE)], max_workers=50)
    assert Dial(deadline_s=2000.0).decide_nodes(without, 50.0, probe_split=1).nodes is None


# -- the plan ------------------------------------------------------------------------------------

def test_a_deadline_buys_the_smallest_pool_that_ends_by_it():
    o = stage(100, 100.0, max_workers=50)
    plan = Dial(deadline_s=2000.0).decide_nodes(o, 50.0, probe_split=1)
    # 100 tasks of 100 s by 2000 s less a 5 % margin of what is ahead: 6 nodes (17 rounds,
    # 1,750 s) would end after 1,900 less the margin; 7 end at 50 + 15 × 100 = 1,550
    assert plan.nodes is not None and plan.feasible
    f = forecast_end(o, plan.nodes, 50.0)
    assert f.end_s * 1.05 <= 2000.0
    assert forecast_end(o, plan.nodes - 1, 50.0).end_s * 1.05 > 2000.0


def test_a_looser_deadline_never_buys_a_larger_pool():
    o = stage(100, 100.0, max_workers=50)
    pools = [Dial(deadline_s=d).decide_nodes(o, 50.0, probe_split=1).nodes for d in (600, 1000, 2000, 4000, 8000)]
    assert pools == sorted(pools, reverse=True) and pools[0] > pools[-1]


def test_a_deadline_the_cap_cannot_meet_is_said_once_with_the_earliest_end():
    o = stage(100, 100.0, max_workers=10)
    dial = Dial(deadline_s=600.0)
    plan = dial.decide_nodes(o, 50.0, probe_split=1)
    assert not plan.feasible and plan.nodes == 10
    assert plan.note == "deadline 10m cannot be met: the earliest end is 18m at 10 workers; running as fast as it can"
    later = dial.decide_nodes(o.model_copy(update={"time": 100.0}), 50.0, probe_split=1)
    assert not later.feasible and later.note is None  # (said once)


def test_a_budget_buys_the_largest_pool_it_affords():
    o = stage(100, 100.0, max_workers=50)
    # 10,000 node·s of work; each node bought pays a 50 s latency
    plan = Dial(budget_node_s=11_000).decide_nodes(o, 50.0, probe_split=1)
    assert plan.feasible and plan.nodes is not None
    assert forecast_end(o, plan.nodes, 50.0).node_s <= 11_000
    assert forecast_end(o, plan.nodes + 1, 50.0).node_s * 1.05 > 11_000
    tight = Dial(budget_node_s=10_200).decide_nodes(o, 50.0, probe_split=1).nodes
    assert tight is not None and tight < plan.nodes


def test_a_budget_below_the_cheapest_pace_is_said_and_the_run_goes_cheaply():
    o = stage(100, 100.0, max_workers=50)
    plan = Dial(budget_node_s=5_000).decide_nodes(o, 50.0, probe_split=1)
    assert not plan.feasible and plan.nodes == 1
    assert plan.note is not None and plan.note.startswith("budget 1.39 node·h cannot be kept: 1.39 node·h is left and "
                                                          "the rest needs 2.79 node·h at 1 worker, 5% more")


def test_a_spent_budget_buys_nothing_more_and_stops_no_busy_worker():
    workers = [WorkerInfo(id=f"w{i}", capacity=NODE, running=1) for i in range(3)]
    running = [RunningTask(task_id=i, category="work", allocation=NODE, started_at=0.0, worker=f"w{i}",
                           whole_worker=True) for i in range(3)]
    dial = Dial(budget_node_s=1000.0)
    first = stage(10, 100.0, workers=workers, running=running)
    dial.decide_nodes(first, 50.0, probe_split=1)
    plan = dial.decide_nodes(first.model_copy(update={"time": 400.0}), 50.0, probe_split=1)  # 1,200 node·s held
    assert plan.exhausted and plan.nodes == 3 and plan.spent_node_s == pytest.approx(1200.0)
    policy = HTAPolicy(budget_node_s=1000.0)
    policy._dial = dial
    d = policy.decide(first.model_copy(update={"time": 500.0}))
    assert d.add == 0 and d.drain == [] and d.remove == []


def test_the_policy_buys_within_the_dials_pool_and_says_why():
    o = stage(100, 100.0, max_workers=50)
    fast = HTAPolicy().decide(o)
    slow = HTAPolicy(deadline_s=4000.0).decide(o)
    assert fast.add > slow.add > 0
    assert slow.plan is not None and slow.add == slow.plan.nodes
    assert "deadline 1h07m:" in slow.reason and f"{slow.plan.nodes} workers end by" in slow.reason
    assert slow.wanted == slow.add  # what the dial holds back is the policy's choice, not the cap's


@pytest.mark.parametrize("bad, why", [
    ("hta:deadline_s=-1", "deadline_s must be"),
    ("hta:budget_node_s=-5", "budget_node_s must be"),
    ("hta:deadline_s=60,budget_node_s=60", "not both"),
])
def test_bad_dial_settings_are_refused_in_one_line(bad, why):
    with pytest.raises(ValueError, match=why):
        make_policy(bad)


def test_durations_read_as_a_user_writes_them():
    assert [span(s) for s in (45, 600, 5040, 7200, 2 * 86400 + 3 * 3600)] == ["45s", "10m", "1h24m", "2h", "2d3h"]


# -- in the simulated world ------------------------------------------------------------------------

def _run(spec: str) -> tuple[float, float]:
    # the measured world: an empty node is kept 10 min (the cluster-autoscaler), which every
    # node bought pays; without it a node costs its latency alone, and a smaller pool held
    # longer saves little (its drained pods leave nodes part-empty)
    cluster = ClusterModel(max_nodes=20, **COSTS["measured"].cluster_update())
    s = Simulation(load_workload("blast-3stage", 0), make_policy(spec), cluster, seed=0).run("blast-3stage")
    return s.runtime_s, s.node_s


def test_in_the_simulator_a_looser_deadline_ends_by_it_and_pays_less():
    default_runtime, default_cost = _run("hta")
    loose, loose_cost = _run(f"hta:deadline_s={3 * default_runtime:.0f}")
    assert loose <= 3 * default_runtime
    assert loose_cost < 0.9 * default_cost
    assert math.isfinite(loose_cost)


def test_in_the_simulator_an_earlier_runs_runtimes_let_a_deadline_save_from_the_start():
    """Without a prior the deadline has the cap until a first task ends: io-bound's one
    stage is all bought by then. With the last run's categories the pool is sized at once."""
    wl = load_workload("io-bound", 0)
    cluster = ClusterModel(max_nodes=20, **COSTS["measured"].cluster_update())
    first = Simulation(wl, make_policy("hta"), cluster, seed=0)
    default = first.run("io-bound")
    deadline = 2 * default.runtime_s
    blind = Simulation(wl, make_policy(f"hta:deadline_s={deadline:.0f}"), cluster, seed=0).run("io-bound")
    prior = {n: m.runtime_mean_s for n, m in first.controller.learner.models().items() if m.measured}
    told = Simulation(wl, make_policy(f"hta:deadline_s={deadline:.0f}"), cluster, seed=0,
                      runtime_prior=prior).run("io-bound")
    assert told.runtime_s <= deadline
    assert told.node_s < 0.8 * blind.node_s, (told.node_s, blind.node_s)


def test_stages_not_released_yet_are_guessed_at_their_own_earlier_runtime():
    """The master lists a stage's category once makeflow releases it; the forecast of the
    stages ahead takes each one's own earlier mean all the same."""
    from hta.sim.run import Simulation as Sim

    sim = Sim(load_workload("blast-3stage", 0), make_policy("hta:deadline_s=4000"),
              ClusterModel(max_nodes=20, **COSTS["measured"].cluster_update()), seed=0,
              runtime_prior={"split": 28.0, "align": 900.0, "reduce": 40.0})
    models = sim.controller.learner.models(with_prior=True)
    assert {n: m.prior_runtime_s for n, m in models.items()} == {"split": 28.0, "align": 900.0, "reduce": 40.0}
    assert sim.controller.learner.models() == {}  # (what the run itself saw: nothing yet)


def test_a_spent_budget_with_nothing_left_to_run_what_waits_ends_the_run():
    spent = DialPlan(budget_node_s=3600.0, spent_node_s=3700.0, exhausted=True)
    waiting = stage(5, 100.0)
    line = budget_spent(spent, waiting)
    assert line is not None and line.startswith("the budget of 1 node·h is spent (1.03 node·h by HTA's count) "
                                                 "with 5 tasks waiting and no worker left: give a larger --budget")
    busy = waiting.model_copy(update={"workers": [WorkerInfo(id="w", capacity=NODE, running=1)]})
    assert budget_spent(spent, busy) is None  # (it may still end well)
    assert budget_spent(spent.model_copy(update={"exhausted": False}), waiting) is None
    assert budget_spent(spent, obs()) is None  # nothing waits


def test_an_ask_the_forecast_cannot_keep_is_a_warning_the_live_view_does_not_hide(caplog):
    from hta.controller import dial_log

    assert not dial_log.name.startswith("hta.controller")  # (the view silences hta.controller's lines)
    caplog.set_level("WARNING", logger="hta.dial")
    cluster = ClusterModel(max_nodes=20, **COSTS["measured"].cluster_update())
    Simulation(load_workload("blast-3stage", 0), make_policy("hta:deadline_s=600"), cluster, seed=0).run("b")
    said = [r.getMessage() for r in caplog.records if r.name == "hta.dial"]
    assert len(said) == 1 and said[0].startswith("deadline 10m cannot be met: the earliest end is ")
