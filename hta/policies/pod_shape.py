"""A policy given pods smaller than a node: the shape-fair comparison's rivals.

A rival written for whole-node workers (max-then-drain, HPA, KEDA, the factory) sees
an observation whose ``worker_shape`` is the pod its user gave it and whose
``max_workers`` counts those pods (the room left under the cap in nodes, in pods),
and every worker it buys is that pod. Under ``makeflow -T wq`` a task that declares
nothing takes a whole worker, so a 1-core pod runs one 1-core task where a 3-core
node ran the same one task: the shape, not the sizing, is what a whole-node rival
lost to HTA's pods.

``pods="learned"`` cuts nodes as HTA's default would for the tasks that wait now
(:func:`~hta.policies.pod_split.learned_split`: the same code, with HTA's
``probe_split`` for never-measured tasks); a number cuts every node into that many.
"""

from __future__ import annotations

from hta.model import Observation, ScaleDecision
from hta.policies.base import Policy
from hta.policies.pod_split import learned_split, pods_too_small

#: HTA's default pods for never-measured tasks: a third of a node
PROBE_SPLIT = 3
#: how long a pod idles beside waiting tasks before it is known too small (HTA's check)
CHECK_S = 5.0


class PodShaped(Policy):
    def __init__(self, policy: Policy, pods: int | str, probe_split: int = PROBE_SPLIT):
        if pods != "learned" and not (isinstance(pods, int) and pods >= 1):
            raise ValueError(f"pods must be a whole number ≥ 1 or 'learned', not {pods!r}")
        self.policy = policy
        self.pods = pods
        self.probe_split = probe_split
        self.name = f"{policy.name}[pods={pods}]"
        self.needs = policy.needs
        #: the last learned cut (kept while nothing waits to learn one from)
        self._k = probe_split
        #: categories whose tasks a pod could not hold (retried after going over a pod's
        #: memory): they need a whole node
        self._needs_node: set[str] = set()

    @property
    def worker_lifetime(self):
        return self.policy.worker_lifetime

    @property
    def packs_pods(self) -> bool:
        return self.policy.packs_pods

    def split(self, obs: Observation) -> int:
        """Pods per node for this decision."""
        if isinstance(self.pods, int):
            return self.pods
        if obs.waiting:
            self._k = learned_split(obs, obs.waiting, self.probe_split, self._needs_node)
        return self._k

    def decide(self, obs: Observation) -> ScaleDecision:
        pod = obs.worker_shape.split(self.split(obs))
        have = len(obs.workers) + len(obs.pending)
        seen = obs.model_copy(update={"worker_shape": pod.advertised(), "max_workers": have + obs.room_for(pod)})
        d = self.policy.decide(seen)
        update: dict = {"shape": pod} if d.add else {}
        # idle pods too small for what waits: no rival drains a worker while tasks wait, so
        # without this they would hold the cap's room for ever (HTA drains them too)
        stuck = pods_too_small(obs, obs.latency.estimate(), CHECK_S) if self.pods == "learned" else []
        if stuck:
            self._needs_node.update(g.category for g in obs.waiting if g.whole_worker)
            update["drain"] = sorted(set(d.drain) | set(stuck))
        return d.model_copy(update=update) if update else d


__all__ = ["PodShaped"]
