"""Scaling policies: HTA and the rivals it is measured against.

Every policy is called the same way by the simulator, the local backend and
Kubernetes: ``policy.decide(observation) -> ScaleDecision``.
"""

from hta.policies.base import Policy
from hta.policies.registry import make_policy, policy_names

__all__ = ["Policy", "make_policy", "policy_names"]
