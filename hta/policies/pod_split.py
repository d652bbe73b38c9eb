"""Into how many equal pods a node is cut for the tasks that wait: the learned worker shape.

HTA buys pods of what its tasks measured (``worker_shape=learned``); the shape-fair
comparison gives a rival the same pods (the benchmarks' rival shapes). Both ask
this one function, so "the same learned sizes" means the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hta.model import Observation, TaskGroup


def learned_split(obs: Observation, left: Sequence[TaskGroup], probe_split: int,
                  needs_node: Iterable[str] = ()) -> int:
    """The most equal pods a node is cut into (1: a whole node) that still hold one of each
    measured task of ``left``; never-measured ones (a whole worker each) allow at most
    ``probe_split``.

    Where the master allocates a measured task its category's peak, a measured task that
    still takes a whole worker was retried after going over its allocation and needs a
    whole node (so does one of a category in ``needs_node``); where it does not (makeflow
    without ``--allocation``, ``obs.auto_allocation`` false), every task that declares
    nothing takes a whole worker, and a pod of its category's peak is the worker it fits.
    A task given its request must fit what the pod's worker advertises, whole cores
    (``Resources.advertised``): halves of a 3-core node connect with 1 core each, so a
    1.2-core task needs a whole node; a whole-worker task runs on the pod's quota."""
    if not left:
        return 1
    needs_node = set(needs_node)
    measured = {name: m.peak for name, m in obs.categories.items() if m.samples > 0}
    if any(g.whole_worker and (g.category in needs_node or (obs.auto_allocation and g.category in measured))
           for g in [*left, *obs.waiting]):
        return 1
    # (request, held to the pod's quota): a whole-worker task may use the pod's CPU limit;
    # a task given its request fits the whole cores the pod's worker advertises
    sized = [(g.request, False) if not g.whole_worker else (measured[g.category], True)
             for g in left if not g.whole_worker or g.category in measured]
    node = obs.worker_shape

    def holds(k: int) -> bool:
        part = node.split(k)
        told = part.advertised()
        return all(r.cores <= (part.cores if quota else told.cores) + 1e-9  # (memory has no quota to borrow)
                   and r.memory_mb <= told.memory_mb + 1e-9 and r.disk_mb <= part.disk_mb + 1e-9
                   for r, quota in sized)

    k = max(1, int(node.cores + 1e-9))
    while k > 1 and not holds(k):
        k -= 1
    if len(sized) < len(left):  # never-measured tasks left
        k = min(k, max(1, probe_split))
    return k


def pods_too_small(obs: Observation, latency: float, check_s: float) -> list[str]:
    """Pods smaller than a node that idle for a whole check while tasks wait: none of those
    tasks fits them (else the master would have given them one), and they hold a share of
    the cap a larger worker needs. A pod that a waiting task's declared request fits is
    only not served yet (a loaded master had not dispatched to pods that had just
    connected when a 0.1 s check was over, and draining them bought them again a moment
    later, on new nodes); unless it stays unserved for a whole preparation latency: then the
    master will not give it what waits, whatever the requests say, and its share of the cap
    goes to a node."""
    if not obs.waiting:
        return []
    node = obs.worker_shape
    declared = {g.request for g in obs.waiting if not g.whole_worker}
    # (a pod that has not told its cores yet, 0, is not known to be small)
    return sorted(w.id for w in obs.workers if w.idle and 0 < w.capacity.cores < node.cores - 1e-9
                  and w.idle_since is not None and obs.time - w.idle_since >= check_s
                  and (obs.time - w.idle_since >= latency or not any(r.fits_in(w.capacity) for r in declared)))
