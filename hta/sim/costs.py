"""What the simulated world charges every policy alike, each cost measured here.

:class:`~hta.sim.cluster.ClusterModel`'s own defaults are the bare world of the thesis
(nodes after a preparation latency, nothing else), which the simulator's rule tests
pin exactly. :data:`MEASURED` adds what real pods and nodes cost, with where each figure
comes from; ``bench/pareto.py`` and ``hta simulate --costs measured`` run in it, and
``bench/world_costs.py`` measures each figure again and fails when a default strays more
than 10 % from it.
"""

from __future__ import annotations

from pydantic import BaseModel


class WorldCosts(BaseModel):
    #: a worker pod bound to a node that is there: image present, container start, worker
    #: connect (``bench/world_costs.py`` on the test cluster's real kubelet node)
    pod_start_s: float
    #: the master's link for inputs and outputs, one transfer at a time, an input sent to a
    #: worker once (its cache): a real Work Queue transfer on this machine (``bench/world_costs.py``)
    transfer_mb_per_s: float
    #: how long the node autoscaler keeps a node whose last worker left, paid: the
    #: cluster-autoscaler's ``--scale-down-unneeded-time`` default, 10 min (its FAQ,
    #: "How does scale-down work?"); Karpenter's consolidation: 0
    empty_node_hold_s: float

    def cluster_update(self) -> dict[str, float]:
        """These costs as :class:`~hta.sim.cluster.ClusterModel` fields."""
        return {"pod_start_s": self.pod_start_s, "transfer_mb_per_s": self.transfer_mb_per_s,
                "empty_node_ttl_s": self.empty_node_hold_s}


#: ``bench/world_costs.py`` on this machine: a worker pod connected 0.35 s after its create
#: call (median of 5, range 0.33–0.47; containerd + runc, image present); a 16 MB input
#: sent at 427–479 MB/s (medians of two runs of 11), one transfer at a time
MEASURED = WorldCosts(pod_start_s=0.35, transfer_mb_per_s=450.0, empty_node_hold_s=600.0)
NONE = WorldCosts(pod_start_s=0.0, transfer_mb_per_s=0.0, empty_node_hold_s=0.0)
COSTS = {"measured": MEASURED, "none": NONE}
