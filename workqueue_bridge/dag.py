"""The workflow DAG, imported ahead of time with ``makeflow_viz -D json``, so
the policy can see tasks Makeflow has not released yet (DAG lookahead).

Rules come out in file order, which is Makeflow's node numbering (the
``node_id`` of the makeflowlog); a rule's parents are the rules that produce
its inputs. Each rule's declared resources come from its category.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hta.model import Resources, UpcomingTasks
from workqueue_bridge.makeflow_log import MakeflowLog, NodeEvent, NodeState
from workqueue_bridge.status import clean_category


@dataclass
class Rule:
    node_id: int
    category: str
    request: Resources
    parents: list[int] = field(default_factory=list)


@dataclass
class Dag:
    rules: list[Rule]
    _order: list[Rule] | None = field(default=None, repr=False, compare=False)

    def topological(self) -> list[Rule]:
        """Parents before children (depth-first, iterative: a chain of 100k rules is fine);
        computed once, the rules do not change."""
        if self._order is None:
            seen: set[int] = set()
            order: list[Rule] = []
            for root in self.rules:
                if root.node_id in seen:
                    continue
                seen.add(root.node_id)
                stack = [(root, iter(root.parents))]
                while stack:
                    rule, parents = stack[-1]
                    nxt = next((p for p in parents if p not in seen), None)
                    if nxt is None:
                        order.append(rule)
                        stack.pop()
                    else:
                        seen.add(nxt)
                        stack.append((self.rules[nxt], iter(self.rules[nxt].parents)))
            self._order = order
        return self._order


def parse_dag(data: dict) -> Dag:
    cats = {}
    for name, c in (data.get("categories") or {}).items():
        cats[clean_category(name)] = Resources(cores=float(c.get("cores", 0) or 0),
                                               memory_mb=float(c.get("memory", 0) or 0),
                                               disk_mb=float(c.get("disk", 0) or 0))
    rules_json = data.get("rules") or []
    producer: dict[str, int] = {}
    for i, r in enumerate(rules_json):
        for out in r.get("outputs", []):
            producer[out if isinstance(out, str) else out.get("dag_name", "")] = i
    rules = []
    for i, r in enumerate(rules_json):
        cat = clean_category(r.get("category") or data.get("default_category"))
        ins = [x if isinstance(x, str) else x.get("dag_name", "") for x in r.get("inputs", [])]
        parents = sorted({producer[x] for x in ins if x in producer and producer[x] != i})
        rules.append(Rule(i, cat, cats.get(cat, Resources()), parents))
    return Dag(rules)


_BAD_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')


def viz_json(workflow: Path, format_options: Sequence[str] = (), cwd: Path | None = None,
             timeout_s: float = 120) -> dict:
    """The workflow as ``makeflow_viz -D json`` reads it: run where makeflow runs (``cwd``,
    default the workflow's folder) with the options that say the workflow's format
    (``--jx``, ``--json``, ``--jx-args``, ``--jx-define``), which a JX workflow needs."""
    wf = Path(workflow).resolve()
    out = subprocess.run(["makeflow_viz", "-D", "json", *format_options, str(wf)], cwd=cwd or wf.parent,
                         capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        from workqueue_bridge.makeflow import one_line_error

        said = out.stderr.strip() or out.stdout.strip()
        said = one_line_error(said) or " ".join(said.splitlines()[-2:])
        raise ValueError(f"makeflow_viz could not read {wf.name}: {said}")
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:  # makeflow_viz writes \' for a quote in a command
        return json.loads(_BAD_ESCAPE.sub(r"\\\\", out.stdout).replace("\\\\'", "'"))


def load_dag(workflow: Path, format_options: Sequence[str] = (), cwd: Path | None = None) -> Dag:
    """The workflow's DAG, from :func:`viz_json`."""
    return parse_dag(viz_json(workflow, format_options, cwd))


def node_states(events: list[NodeEvent]) -> dict[int, tuple[NodeState, int]]:
    """Latest (state, job id) of each node that makeflow has touched."""
    states: dict[int, tuple[NodeState, int]] = {}
    for e in events:
        states[e.node_id] = (e.state, e.job_id)
    return states


def upcoming_tasks(dag: Dag, states: dict[int, tuple[NodeState, int]], waiting_group_of: dict[int, str],
                   running_tasks: set[int]) -> list[UpcomingTasks]:
    """Rules not submitted yet, grouped by category and by what they wait for.

    A parent submitted to Work Queue as task ``j`` is referred to as its
    waiting group (``waiting_group_of[j]``) or as ``task:j`` while it runs;
    an unsubmitted parent by its own upcoming group; a completed one not at all.
    """
    ref: dict[int, str] = {}
    groups: dict[tuple, UpcomingTasks] = {}
    for r in dag.topological():
        state, job = states.get(r.node_id, (NodeState.WAITING, 0))
        if state == NodeState.COMPLETE:
            continue
        if state == NodeState.RUNNING:
            if job in waiting_group_of:
                ref[r.node_id] = waiting_group_of[job]
            elif job in running_tasks:
                ref[r.node_id] = f"task:{job}"
            continue
        if state in (NodeState.FAILED, NodeState.ABORTED):
            continue
        after = tuple(sorted({ref[p] for p in r.parents if p in ref}))
        if any(p not in ref and states.get(p, (NodeState.WAITING, 0))[0] != NodeState.COMPLETE for p in r.parents):
            continue  # a parent failed or is in an unknown state: nothing to foresee
        key = (r.category, after, r.request)
        g = groups.get(key)
        if g is None:
            g = groups[key] = UpcomingTasks(id=f"u{len(groups)}", category=r.category, count=0,
                                            request=r.request, after=list(after))
        g.count += 1
        ref[r.node_id] = g.id
    return list(groups.values())


class Lookahead:
    """The upcoming tasks of a running workflow: its DAG plus the node states
    read (incrementally) from its makeflowlog. Called by the observation builder."""

    def __init__(self, dag: Dag, log: MakeflowLog):
        self.dag = dag
        self.log = log
        self.states: dict[int, tuple[NodeState, int]] = {}

    def __call__(self, waiting_group_of: dict[int, str], running_tasks: set[int]) -> list[UpcomingTasks]:
        self.states.update(node_states(self.log.poll()))
        return upcoming_tasks(self.dag, self.states, waiting_group_of, running_tasks)
