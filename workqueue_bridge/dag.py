"""The workflow, read once with ``makeflow_viz -D json``: its rules, what each declares and
what it waits for.

Rules come out in file order, which is Makeflow's node numbering (the ``node_id`` of the
makeflowlog); a rule's parents are the rules that produce its inputs. Each rule's declared
resources come from its category. :func:`parse_dag` is the one reader of makeflow_viz's
JSON: the DAG lookahead (:class:`Lookahead`, tasks Makeflow has not released yet) and the
rules named in messages (:func:`read_rules`) both build on it, so a category is spelled the
same everywhere (``CATEGORY="align"`` is ``align``, as the master reports it).
"""

from __future__ import annotations

import bisect
import math
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workqueue_bridge import cctools_json
from workqueue_bridge.cctools_output import one_line_error
from workqueue_bridge.makeflow_log import MakeflowLog, NodeEvent, NodeState
from workqueue_bridge.queue import UpcomingTasks
from workqueue_bridge.resources import Resources
from workqueue_bridge.status_json import clean_category


@dataclass
class Rule:
    node_id: int
    category: str
    #: what its category declares (CORES, MEMORY and DISK in MB; 0: not declared)
    request: Resources
    parents: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    command: str = ""
    #: the files it reads (makeflow_viz's ``dag_name``s)
    inputs: list[str] = field(default_factory=list)
    #: rules that need this one's outputs, directly or not (filled by :func:`read_rules`)
    dependents: int = 0

    @property
    def name(self) -> str:
        shown = " ".join(self.outputs[:3]) + (" …" if len(self.outputs) > 3 else "")
        return shown or f"#{self.node_id}"

    @property
    def limits(self) -> dict[str, float] | None:
        """What its category declares, by makeflow's names (``cores``, ``memory``, ``disk``);
        None if nothing."""
        out = {k: v for k, v in (("cores", self.request.cores), ("memory", self.request.memory_mb),
                                 ("disk", self.request.disk_mb)) if v > 0}
        return out or None


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

    def count_dependents(self) -> None:
        """Fill each rule's ``dependents``: the rules that need its outputs, directly or not."""
        children: dict[int, list[int]] = {}
        for r in self.rules:
            for p in r.parents:
                children.setdefault(p, []).append(r.node_id)
        for r in self.rules:
            seen: set[int] = set()
            stack = list(children.get(r.node_id, ()))
            while stack:
                c = stack.pop()
                if c not in seen:
                    seen.add(c)
                    stack.extend(children.get(c, ()))
            r.dependents = len(seen)

    def shared_inputs(self) -> dict[str, list[str]]:
        """Category → the files every one of its rules reads, for categories of two rules or
        more (a BLAST align's database). Makeflow sends a task's inputs to Work Queue as
        cacheable, so a worker that ran one task of such a category holds those files
        for the next: it is worth more than a new worker, which must fetch them again."""
        common: dict[str, set[str]] = {}
        rules: dict[str, int] = {}
        for r in self.rules:
            rules[r.category] = rules.get(r.category, 0) + 1
            if r.category in common:
                common[r.category].intersection_update(r.inputs)
            else:
                common[r.category] = set(r.inputs)
        return {c: sorted(files) for c, files in common.items() if files and rules[c] >= 2}

    def shared_input_sizes(self, size_mb: Callable[[str], float | None]) -> dict[str, dict[str, float]]:
        """:meth:`shared_inputs` with each file's MB by ``size_mb`` (:func:`sizes_in` for a
        folder): a file of unknown size (None) or of none is left out."""
        out: dict[str, dict[str, float]] = {}
        for category, files in self.shared_inputs().items():
            sized = {f: mb for f in files if (mb := size_mb(f))}
            if sized:
                out[category] = sized
        return out


    def task_input_sizes(self, size_mb: Callable[[str], float | None]) -> dict[str, float]:
        """Category → the mean MB of what one of its rules reads beyond :meth:`shared_inputs`,
        by ``size_mb`` (files of unknown size count nothing): what the master sends for every
        task of it, where a shared input is sent once to each worker."""
        shared = {c: set(files) for c, files in self.shared_inputs().items()}
        total: dict[str, float] = {}
        rules: dict[str, int] = {}
        for r in self.rules:
            own = shared.get(r.category, set())
            total[r.category] = total.get(r.category, 0.0) + sum(size_mb(f) or 0.0 for f in r.inputs if f not in own)
            rules[r.category] = rules.get(r.category, 0) + 1
        return {c: mb / rules[c] for c, mb in total.items() if mb > 0}


def sizes_in(folder: Path) -> Callable[[str], float | None]:
    """A file's MB as it lies in ``folder`` (the workflow's own) now; None if it is not there
    (yet: a rule makes it) or cannot be read."""
    def size_mb(name: str) -> float | None:
        try:
            return (folder / name).stat().st_size / 2**20
        except OSError:
            return None
    return size_mb


def _amount(v: Any) -> float:
    """A declared amount (a number above 0), else 0: not declared."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return 0.0
    return x if x > 0 and math.isfinite(x) else 0.0


def _file_name(f: Any) -> str:
    return f if isinstance(f, str) else str((f or {}).get("dag_name", ""))


def parse_dag(data: dict) -> Dag:
    """The rules of makeflow_viz's JSON, in file order."""
    cats = {}
    for name, c in (data.get("categories") or {}).items():
        c = c if isinstance(c, dict) else {}
        cats[clean_category(name)] = Resources(cores=_amount(c.get("cores")), memory_mb=_amount(c.get("memory")),
                                               disk_mb=_amount(c.get("disk")))
    rules_json = [r if isinstance(r, dict) else {} for r in data.get("rules") or []]
    producer: dict[str, int] = {}
    for i, r in enumerate(rules_json):
        for out in r.get("outputs") or []:
            producer[_file_name(out)] = i
    rules = []
    for i, r in enumerate(rules_json):
        cat = clean_category(r.get("category") or data.get("default_category"))
        ins = [_file_name(x) for x in r.get("inputs") or []]
        parents = sorted({producer[x] for x in ins if x in producer and producer[x] != i})
        rules.append(Rule(i, cat, cats.get(cat, Resources()), parents,
                          outputs=[_file_name(f) for f in r.get("outputs") or []],
                          command=str(r.get("command", "")), inputs=ins))
    return Dag(rules)


#: makeflow_viz's answers, by (workflow, its size and mtime, options, folder): a run asks for
#: the same workflow up to three times (the empty check, the lookahead, the failed-rule names)
_VIZ_CACHE: dict[tuple, dict] = {}


def viz_json(workflow: Path, format_options: Sequence[str] = (), cwd: Path | None = None,
             timeout_s: float = 120) -> dict:
    """The workflow as ``makeflow_viz -D json`` reads it: run where makeflow runs (``cwd``,
    default the workflow's folder) with the options that say the workflow's format
    (``--jx``, ``--json``, ``--jx-args``, ``--jx-define``), which a JX workflow needs. Read
    once per version of the file (callers must not change what it returns)."""
    wf = Path(workflow).resolve()
    st = wf.stat()
    key = (str(wf), st.st_size, st.st_mtime_ns, tuple(format_options), str(cwd or wf.parent))
    if key not in _VIZ_CACHE:
        _VIZ_CACHE[key] = _run_viz(wf, format_options, cwd, timeout_s)
    return _VIZ_CACHE[key]


def _run_viz(wf: Path, format_options: Sequence[str], cwd: Path | None, timeout_s: float) -> dict:
    out = subprocess.run(["makeflow_viz", "-D", "json", *format_options, str(wf)], cwd=cwd or wf.parent,
                         capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        said = out.stderr.strip() or out.stdout.strip()
        said = one_line_error(said) or " ".join(said.splitlines()[-2:])
        raise ValueError(f"makeflow_viz could not read {wf.name}: {said}")
    return cctools_json.loads(out.stdout)  # (makeflow_viz writes \' for a quote in a command)


def load_dag(workflow: Path, format_options: Sequence[str] = (), cwd: Path | None = None) -> Dag:
    """The workflow's DAG, from :func:`viz_json`."""
    return parse_dag(viz_json(workflow, format_options, cwd))


def read_rules(workflow: Path, format_options: Sequence[str] = (), cwd: Path | None = None,
               timeout_s: float = 60.0) -> dict[int, Rule]:
    """Every rule by node id, with its dependents counted; empty if the workflow cannot be
    read (this is for messages and for runtimes learned from makeflow's log)."""
    try:
        dag = parse_dag(viz_json(workflow, format_options, cwd, timeout_s))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}
    dag.count_dependents()
    return {r.node_id: r for r in dag.rules}


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
        self.index: UpcomingIndex | None = None

    def __call__(self, waiting_group_of: Mapping[int, str], running_tasks: set[int]) -> list[UpcomingTasks]:
        """:func:`upcoming_tasks` on the states read so far, answered by an :class:`UpcomingIndex`
        (the same answer, without a pass over every rule at each call)."""
        new = node_states(self.log.poll())
        self.states.update(new)
        if self.index is None:
            self.index = UpcomingIndex(self.dag)
            new = self.states
        self.index.update(new)
        return self.index(waiting_group_of, running_tasks)


_UNSUB, _SUB, _DONE, _BAD = 0, 1, 2, 3


def _kind(state: NodeState) -> int:
    """How :func:`upcoming_tasks` treats a rule in ``state``."""
    if state == NodeState.RUNNING:
        return _SUB
    if state == NodeState.COMPLETE:
        return _DONE
    if state in (NodeState.FAILED, NodeState.ABORTED):
        return _BAD
    return _UNSUB


@dataclass(eq=False)
class _Bundle:
    """Rules alike for the lookahead: same category, request and parents. Its
    unsubmitted rules always land in one upcoming group (or are all skipped)."""

    category: str
    request: Resources
    members: list[int] = field(default_factory=list)
    #: parent bundles all of whose rules are parents, and parents taken one by one
    parents_whole: list[int] = field(default_factory=list)
    parents_single: list[int] = field(default_factory=list)
    unsub: list[int] = field(default_factory=list)  # topological positions, sorted
    sub_jobs: list[int] = field(default_factory=list)  # jobs of submitted rules, sorted
    bad: int = 0


class UpcomingIndex:
    """:func:`upcoming_tasks`, kept up to date as node states change: the same
    answer (``tests/test_dag_index.py`` compares them on random DAGs and states),
    at a cost per call that grows with the number of *bundles* of alike rules
    (same category, request and parents: a stage's thousand aligns are one)
    rather than with the number of rules.

    Feed it each change of a rule's (state, job) with :meth:`update`; call it
    with the waiting group of each waiting task and the running task ids. A
    ``waiting_group_of`` with a ``segments`` attribute (ranges of waiting task
    ids, :class:`~workqueue_bridge.task_table.SegmentMap`) is read by range.
    """

    def __init__(self, dag: Dag):
        order = dag.topological()
        self.pos = {r.node_id: i for i, r in enumerate(order)}
        self.state: dict[int, tuple[NodeState, int]] = {}
        self.bundle_of: dict[int, int] = {}
        self.bundles: list[_Bundle] = []
        by_key: dict[tuple, int] = {}
        for r in order:
            key = (r.category, r.request, tuple(sorted(set(r.parents))))
            b = by_key.get(key)
            if b is None:
                b = by_key[key] = len(self.bundles)
                self.bundles.append(_Bundle(r.category, r.request))
            self.bundles[b].members.append(r.node_id)
            self.bundles[b].unsub.append(self.pos[r.node_id])
            self.bundle_of[r.node_id] = b
        for key, b in by_key.items():
            per: dict[int, list[int]] = {}
            for p in key[2]:
                per.setdefault(self.bundle_of[p], []).append(p)
            bundle = self.bundles[b]
            for pb, ps in per.items():
                if len(ps) == len(self.bundles[pb].members):
                    bundle.parents_whole.append(pb)
                else:
                    bundle.parents_single.extend(ps)
        self._with_unsub: set[int] = set(range(len(self.bundles)))
        self._with_sub: set[int] = set()
        self._job_node: dict[int, int] = {}

    def update(self, states: dict[int, tuple[NodeState, int]]) -> None:
        """Take new (state, job) of rules (later entries win, as in :func:`node_states`)."""
        for node, (state, job) in states.items():
            b = self.bundle_of.get(node)
            if b is None:
                continue
            old = self.state.get(node)
            if old == (state, job):
                continue
            bundle = self.bundles[b]
            if old is not None:
                self._leave(bundle, b, node, *old)
            else:
                self._leave(bundle, b, node, NodeState.WAITING, 0)
            self.state[node] = (state, job)
            kind = _kind(state)
            if kind == _UNSUB:
                bisect.insort(bundle.unsub, self.pos[node])
                self._with_unsub.add(b)
            elif kind == _SUB:
                bisect.insort(bundle.sub_jobs, job)
                self._job_node[job] = node
                self._with_sub.add(b)
            elif kind == _BAD:
                bundle.bad += 1

    def _leave(self, bundle: _Bundle, b: int, node: int, state: NodeState, job: int) -> None:
        kind = _kind(state)
        if kind == _UNSUB:
            del bundle.unsub[bisect.bisect_left(bundle.unsub, self.pos[node])]
            if not bundle.unsub:
                self._with_unsub.discard(b)
        elif kind == _SUB:
            del bundle.sub_jobs[bisect.bisect_left(bundle.sub_jobs, job)]
            if self._job_node.get(job) == node:
                del self._job_node[job]
            if not bundle.sub_jobs:
                self._with_sub.discard(b)
        elif kind == _BAD:
            bundle.bad -= 1

    def _submitted_refs(self, waiting_group_of, running_tasks: set[int]) -> tuple[dict[int, set[str]], set[int]]:
        """The refs of each bundle's submitted rules, and the bundles with a submitted
        rule that has none (its task is neither waiting nor running)."""
        refs: dict[int, set[str]] = {b: set() for b in self._with_sub}
        found: dict[int, int] = dict.fromkeys(self._with_sub, 0)
        segments = getattr(waiting_group_of, "segments", None)
        if segments is None:
            for b in self._with_sub:
                for job in self.bundles[b].sub_jobs:
                    g = waiting_group_of.get(job)
                    if g is not None:
                        refs[b].add(g)
                        found[b] += 1
        else:
            for b in self._with_sub:
                jobs = self.bundles[b].sub_jobs
                for lo, hi, g in segments:
                    n = bisect.bisect_right(jobs, hi) - bisect.bisect_left(jobs, lo)
                    if n:
                        refs[b].add(g)
                        found[b] += n
        for job in running_tasks:
            node = self._job_node.get(job)
            if node is None or job in waiting_group_of:
                continue
            b = self.bundle_of[node]
            refs[b].add(f"task:{job}")
            found[b] += 1
        broken = {b for b in self._with_sub if found[b] < len(self.bundles[b].sub_jobs)}
        return refs, broken

    def __call__(self, waiting_group_of, running_tasks: set[int]) -> list[UpcomingTasks]:
        refs, broken = self._submitted_refs(waiting_group_of, running_tasks)
        group_id: dict[int, str] = {}  # bundle → its unsubmitted rules' group (absent: skipped)
        groups: dict[tuple, UpcomingTasks] = {}
        for b in sorted(self._with_unsub, key=lambda b: self.bundles[b].unsub[0]):
            bundle = self.bundles[b]
            after: set[str] = set()
            ok = True
            for pb in bundle.parents_whole:
                parent = self.bundles[pb]
                if parent.bad or pb in broken or (parent.unsub and pb not in group_id):
                    ok = False
                    break
                if parent.sub_jobs:
                    after |= refs[pb]
                if parent.unsub:
                    after.add(group_id[pb])
            if ok:
                for p in bundle.parents_single:
                    state, job = self.state.get(p, (NodeState.WAITING, 0))
                    kind = _kind(state)
                    if kind == _DONE:
                        continue
                    if kind == _SUB:
                        g = waiting_group_of.get(job)
                        if g is None and job in running_tasks:
                            g = f"task:{job}"
                    elif kind == _UNSUB:
                        g = group_id.get(self.bundle_of[p])
                    else:
                        g = None
                    if g is None:
                        ok = False
                        break
                    after.add(g)
            if not ok:
                continue
            key = (bundle.category, tuple(sorted(after)), bundle.request)
            g = groups.get(key)
            if g is None:
                g = groups[key] = UpcomingTasks(id=f"u{len(groups)}", category=bundle.category, count=0,
                                                request=bundle.request, after=list(key[1]))
            g.count += len(bundle.unsub)
            group_id[b] = g.id
        return list(groups.values())
