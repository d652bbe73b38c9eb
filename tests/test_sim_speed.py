"""The simulator's speed-ups answer exactly what the code they replace answers.

- :class:`~workqueue_bridge.dag.UpcomingIndex` (the lookahead by bundles of alike
  rules, kept up to date) against :func:`~workqueue_bridge.dag.upcoming_tasks` (the
  rule-by-rule original), on random DAGs and random node states;
- :func:`~workqueue_bridge.task_table.index_segments` (waiting tasks by runs of ids)
  against :func:`~workqueue_bridge.task_table.index_waiting` (task by task);
- the world's run-compressed queue against a one-by-one dispatch.
"""

from __future__ import annotations

import random

import pytest

from hta.model import Resources
from workqueue_bridge.dag import Dag, Rule, UpcomingIndex, upcoming_tasks
from workqueue_bridge.makeflow_log import NodeState
from workqueue_bridge.status_json import TaskStatus
from workqueue_bridge.task_table import index_segments, index_waiting, waiting_segments

REQS = [Resources(), Resources(cores=1, memory_mb=100), Resources(cores=2)]


def random_dag(rng: random.Random, n: int) -> Dag:
    """Layers of alike rules (same category and parents: the bundles), some rules with a
    subset of a layer as parents, some with several layers."""
    rules: list[Rule] = []
    layers: list[list[int]] = []
    while len(rules) < n:
        width = rng.choice([1, 1, 2, 3, 5, 8])
        cat = rng.choice("abc")
        req = rng.choice(REQS)
        parents: list[int] = []
        if layers and rng.random() < 0.8:
            for layer in rng.sample(layers, k=min(len(layers), rng.choice([1, 1, 2]))):
                parents += layer if rng.random() < 0.7 else rng.sample(layer, k=rng.randint(1, len(layer)))
        layer = []
        for _ in range(width):
            i = len(rules)
            own = sorted(set(parents)) if rng.random() < 0.9 or not parents else sorted(set(parents[:1]))
            rules.append(Rule(i, cat, req, own))
            layer.append(i)
        layers.append(layer)
    # file order need not be topological: shuffle the numbering
    perm = list(range(len(rules)))
    rng.shuffle(perm)
    out = [Rule(perm[r.node_id], r.category, r.request, sorted(perm[p] for p in r.parents)) for r in rules]
    out.sort(key=lambda r: r.node_id)
    return Dag(out)


STATES = [NodeState.WAITING, NodeState.RUNNING, NodeState.COMPLETE, NodeState.FAILED, NodeState.ABORTED]


@pytest.mark.parametrize("seed", range(150))
def test_upcoming_index_answers_as_upcoming_tasks(seed):
    rng = random.Random(seed)
    dag = random_dag(rng, rng.randint(1, 40))
    index = UpcomingIndex(dag)
    states: dict[int, tuple[NodeState, int]] = {}
    for _ in range(6):
        change = {}
        for r in rng.sample(dag.rules, k=rng.randint(0, len(dag.rules))):
            st = rng.choices(STATES, weights=[2, 5, 4, 1, 1])[0]
            change[r.node_id] = (st, 0 if st == NodeState.WAITING else 1000 + r.node_id + rng.choice([0, 0, 100]))
        states.update(change)
        index.update(change)
        submitted = [j for s, j in states.values() if s == NodeState.RUNNING]
        waiting = sorted(j for j in submitted if rng.random() < 0.5)
        running = {j for j in submitted if j not in waiting and rng.random() < 0.9}
        tasks = [TaskStatus(task_id=j, state="waiting", category=rng.choice("ab"), cores=rng.choice([None, 1]))
                 for j in waiting]
        groups, group_of = index_waiting(tasks)
        want = upcoming_tasks(dag, states, group_of, running)
        assert index(group_of, running) == want
        seg_groups, seg_map = index_segments(waiting_segments(tasks))
        assert seg_groups == groups
        assert index(seg_map, running) == want


@pytest.mark.parametrize("seed", range(50))
def test_waiting_by_runs_of_ids_is_waiting_task_by_task(seed):
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 60), k=rng.randint(0, 40)))
    tasks = [TaskStatus(task_id=i, state=rng.choice(["waiting", "waiting", "running"]), category=rng.choice("ab"),
                        cores=rng.choice([None, 1, 2])) for i in ids]
    rng.shuffle(tasks)
    groups, group_of = index_waiting(tasks)
    seg_groups, seg_map = index_segments(waiting_segments(tasks))
    assert seg_groups == groups
    assert dict(seg_map) == group_of and len(seg_map) == len(group_of)
    for i in range(0, 62):
        assert (i in seg_map) == (i in group_of) and seg_map.get(i) == group_of.get(i)


@pytest.mark.parametrize("seed", range(30))
def test_incremental_learner_builds_the_same_models(seed):
    from resource_monitor.categories import CategoryLearner
    from resource_monitor.incremental import IncrementalCategoryLearner
    from workqueue_bridge.monitor_summaries import TaskSummary

    rng = random.Random(seed)
    a, b = CategoryLearner(), IncrementalCategoryLearner()
    for _ in range(rng.randint(1, 300)):
        x = rng.choice([rng.uniform(0, 1e4), rng.choice([1.0, 2.5, 300.0]), rng.expovariate(0.01) * 1e-3,
                        rng.uniform(1e9, 1e10)])
        s = TaskSummary(category=rng.choice("ab"), exit_type=rng.choice(["normal", "normal", "limits"]),
                        exit_status=0, start=0.0, end=x, wall_time_s=x, cpu_time_s=x, cores=rng.choice([1, 2.5]),
                        memory_mb=rng.uniform(1, 1000))
        a.add(s)
        b.add(s)
        if rng.random() < 0.3:
            assert a.models() == b.models()
    assert a.models() == b.models()
