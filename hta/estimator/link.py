"""The master's link in the forecast: how many more workers its transfers can feed.

Work Queue's master sends a task's inputs before it goes on to the next dispatch, one
transfer at a time, and a worker keeps what it was sent in its cache. So the link is a
serial server in front of every worker, and a worker bought beyond what it can serve
waits for its inputs, paid, while the runtime does not move: 1000Genome's 361 tasks of
1.7 GB each keep a 450 MB/s link busy for 23 minutes, however many workers wait.

Two limits, from what the observation knows (the link's learned bandwidth, each
category's input sizes, its learned runtime):

- **First inputs.** A worker bought now arrives one latency L later and first needs the
  inputs of its first round of tasks, the category's shared inputs included (m₁ MB): the
  k-th such worker gets them k·m₁/B after the link is free of what it already owes (each
  worker on its way needs its own first inputs before them). A worker is bought only if
  it gets them within the work it is bought for: the tasks' mean runtime where measured,
  else one latency, a new node's at least (the next decision can buy again); and one
  worker always, while none is here or coming.
- **Steady state.** Once running, each task slot needs a task's own inputs (m MB, not
  cached) every runtime r, so the link keeps at most ⌈r·B/m⌉ + 1 tasks busy (Little's
  law: the link's service time m/B against a task's cycle r + m/B); workers whose slots
  go beyond that wait for it in turn.

Only tasks that wait on the link are limited so (:func:`waits_on_link`: their first
inputs take :data:`LINK_SHARE` of their runtime on it); the workers for the others are
bought as they would be.

Where nothing is sent (no inputs of known size), neither limits anything.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from hta.estimator.forecast import runtime_of
from hta.estimator.play import fit_in
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
    horizon (None: the link sets no limit, e.g. nothing of known size is sent).

    The link feeds tasks, not workers: a worker that holds k of them at once needs k tasks'
    inputs for its first round (its category's shared inputs once), and counts k times
    against what the link keeps busy. Never fewer than one worker while none is here or
    coming: a stage that only the link limits still needs one."""
    bandwidth = obs.link.mb_per_s
    tasks = sum(g.count for g in left)
    if bandwidth <= 0 or tasks <= 0:
        return None
    own = shared = work = slots = 0.0
    measured = 0
    for g in left:
        own += g.count * obs.task_inputs_mb.get(g.category, 0.0)
        shared += g.count * sum(obs.shared_inputs.get(g.category, {}).values())
        slots += g.count * max(1, fit_in(g.request, obs.worker_shape))
        rt = runtime_of(obs.categories, g.category)
        if rt is not None:
            work += g.count * rt
            measured += g.count
    m_own, per_worker = own / tasks, slots / tasks  # (MB a task's own inputs; tasks a worker holds)
    m_first = per_worker * m_own + shared / tasks  # a new worker's first round
    if m_first <= 0:
        return None
    categories = {g.category for g in left}
    have = len(obs.workers) + len(obs.pending)
    busy_here = sum(1 for t in obs.running if t.category in categories)  # (tasks the link feeds now)
    runtime = work / measured if measured else None
    # a worker is bought if its first inputs come within the work it is bought for: a round
    # of its tasks (never measured: a latency, at least a new node's, for a latency measured on
    # room already there says nothing of how long they run), and at least one transfer's time
    window = max(runtime if runtime is not None else max(latency_s, obs.latency.prior_s), m_first / bandwidth)
    owed_s = len(obs.pending) * m_first / bandwidth  # (each worker on its way: its own first inputs)
    free_at = max(latency_s, owed_s)
    cap = max(0, math.floor((latency_s + window - free_at) * bandwidth / m_first + 1e-9))
    feeds = None
    if runtime is not None and m_own > 0:
        feeds = math.ceil(runtime * bandwidth / m_own - 1e-9) + 1  # tasks the link keeps busy
        coming = len(obs.pending) * per_worker  # (their tasks, as the workers on their way will hold them)
        cap = min(cap, max(0, math.floor((feeds - busy_here - coming) / per_worker + 1e-9)))
    if have == 0:
        cap = max(cap, 1)
    each_s = m_first / bandwidth
    reason = (f"link-bound: {_gb(m_first)} a worker's first inputs at {bandwidth:.0f} MB/s"
              f"{'' if obs.link.learned else ' (assumed)'}, {each_s:.1f} s each")
    if feeds is not None:
        reason += f"; the link keeps {feeds} tasks busy, {busy_here} running"
    if owed_s > latency_s:
        reason += f"; it owes {owed_s:.0f} s to the workers on their way"
    return LinkLimit(cap, reason)
