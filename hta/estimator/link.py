"""The master's link in the forecast: how many more workers its transfers can feed.

Work Queue's master sends a task's inputs before it goes on to the next dispatch, one
transfer at a time, and a worker keeps what it was sent in its cache. So the link is a
serial server in front of every worker, and a worker bought beyond what it can serve
waits for its inputs, paid, while the runtime does not move: 1000Genome's 361 tasks of
1.7 GB each keep a 450 MB/s link busy for 23 minutes, however many workers wait.

Two limits, from what the observation knows (the link's learned bandwidth, each
category's input sizes, its learned runtime):

- **First inputs.** A worker bought now arrives one latency L later and first needs the
  inputs of its first task, the category's shared inputs included (m₁ MB): the k-th such
  worker gets them k·m₁/B after the link is free of what it already owes (each worker on
  its way needs its own first inputs before them). A worker is bought only if it gets
  them within the work it is bought for: the tasks' mean runtime where measured, else one
  latency, a new node's at least (the next decision can buy again).
- **Steady state.** Once running, a worker needs a task's own inputs (m MB, not cached)
  every runtime r, so the link keeps at most ⌈r·B/m⌉ + 1 workers busy (Little's law: the
  link's service time m/B against a worker's cycle r + m/B); workers beyond that wait for
  it in turn.

Where nothing is sent (no inputs of known size), neither limits anything.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from hta.estimator.forecast import runtime_of
from hta.model import Observation, TaskGroup


class LinkLimit(NamedTuple):
    #: at most this many more workers are worth buying
    workers: int
    #: the limit in a user's words, for the scaling log
    reason: str


def _gb(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


#: a task waits on the link when its inputs take at least this share of its runtime (or,
#: never measured, of a latency) on it
LINK_SHARE = 0.005


def waits_on_link(obs: Observation, group: TaskGroup, latency_s: float) -> bool:
    """Whether ``group``'s tasks move enough over the link for it to limit their workers: a
    new worker's first inputs take at least :data:`LINK_SHARE` of a task's runtime."""
    bandwidth = obs.link.mb_per_s
    first = obs.task_inputs_mb.get(group.category, 0.0) + sum(obs.shared_inputs.get(group.category, {}).values())
    if bandwidth <= 0 or first <= 0:
        return False
    work = runtime_of(obs.categories, group.category) or max(latency_s, obs.latency.prior_s)
    return first / bandwidth >= LINK_SHARE * work


def link_limit(obs: Observation, left: list[TaskGroup], latency_s: float) -> LinkLimit | None:
    """How many more workers the master's link can feed for the tasks ``left`` waiting at the
    horizon (None: the link sets no limit, e.g. nothing of known size is sent)."""
    bandwidth = obs.link.mb_per_s
    tasks = sum(g.count for g in left)
    if bandwidth <= 0 or tasks <= 0:
        return None
    first = own = work = 0.0
    measured = 0
    for g in left:
        mb = obs.task_inputs_mb.get(g.category, 0.0)
        own += g.count * mb
        first += g.count * (mb + sum(obs.shared_inputs.get(g.category, {}).values()))
        rt = runtime_of(obs.categories, g.category)
        if rt is not None:
            work += g.count * rt
            measured += g.count
    m_first, m_own = first / tasks, own / tasks
    if m_first <= 0:
        return None
    have = len(obs.workers) + len(obs.pending)
    runtime = work / measured if measured else None
    # (never-measured tasks: a latency of work, at least the latency a new node takes, for
    # a latency measured on room already there says nothing of how long they run)
    window = runtime if runtime is not None else max(latency_s, obs.latency.prior_s)
    owed_s = len(obs.pending) * m_first / bandwidth  # (each worker on its way: its own first inputs)
    free_at = max(latency_s, owed_s)
    cap = max(0, math.floor((latency_s + window - free_at) * bandwidth / m_first + 1e-9))
    feeds = None
    if runtime is not None and m_own > 0:
        feeds = math.ceil(runtime * bandwidth / m_own - 1e-9) + 1
        cap = min(cap, max(0, feeds - have))
    each_s = m_first / bandwidth
    reason = (f"link-bound: {_gb(m_first)} a task's inputs at {bandwidth:.0f} MB/s"
              f"{'' if obs.link.learned else ' (assumed)'}, {each_s:.1f} s each")
    if feeds is not None:
        reason += f"; the link keeps {feeds} workers busy, {have} here or coming"
    if owed_s > latency_s:
        reason += f"; it owes {owed_s:.0f} s to the workers on their way"
    return LinkLimit(cap, reason)
