"""The policy contract and the registry of policies by name.

A policy is an object with a ``name`` and ``decide(obs) -> ScaleDecision``.
It may keep state between calls (HPA's stabilisation window, HTA's
hysteresis) but sees nothing but the :class:`~hta.model.Observation`: what
production can observe. It never acts; the controller (or the simulator)
carries the decision out and asks again after ``decision.next_decision_s``.

A policy that reads an observation field only some backends can fill names it
in ``needs`` (HPA: ``{"cpu_utilization"}``); :func:`check_signals` refuses to
run it where the backend cannot measure it, instead of feeding it zeros.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from hta.model import Observation, ScaleDecision


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> ScaleDecision: ...


#: what each optional observation field is, for the refusal message
SIGNAL_NAMES = {"cpu_utilization": "the workers' measured CPU utilisation"}


def check_signals(policy: Policy, backend_name: str, signals: frozenset[str], why: str = "") -> None:
    """Raise ValueError (one line) if ``policy`` needs a field the backend cannot fill."""
    missing = sorted(set(getattr(policy, "needs", frozenset())) - set(signals))
    if missing:
        what = ", ".join(SIGNAL_NAMES.get(m, m) for m in missing)
        raise ValueError(f"policy {policy.name} needs {what}, which the {backend_name} backend cannot measure"
                         f"{': ' + why if why else ''}; choose another policy (e.g. --policy hta)")


def _param(spec: str) -> float:
    try:
        return float(spec.split("-", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"policy {spec!r} needs a number, e.g. {spec.split('-')[0]}-20") from None


def _registry() -> dict[str, Callable[[str], Policy]]:
    from hta.policies.factory import FactoryPolicy
    from hta.policies.hpa import HPAPolicy
    from hta.policies.hta_policy import HTAPolicy
    from hta.policies.keda import KEDAPolicy
    from hta.policies.max_then_drain import MaxThenDrainPolicy
    from hta.policies.observe import ObservePolicy
    from hta.policies.static import StaticPolicy

    return {
        "hta": lambda spec: HTAPolicy(),
        "static": lambda spec: StaticPolicy(),
        "observe": lambda spec: ObservePolicy(),
        "hpa": lambda spec: HPAPolicy(target_percent=_param(spec)),
        "keda": lambda spec: KEDAPolicy(tasks_per_pod=_param(spec)),
        "factory": lambda spec: FactoryPolicy(),
        "max-then-drain": lambda spec: MaxThenDrainPolicy(),
    }


def policy_names() -> list[str]:
    return ["hta", "hpa-<cpu target %>", "keda-<tasks per pod>", "factory", "static", "max-then-drain", "observe",
            "<policy>:<setting>=<value>,...", "<policy>@<time scale k>"]


def _configure(policy: Policy, spec: str, settings: str) -> Policy:
    """Apply ``key=value,...`` to a policy's own settings (its dataclass fields), e.g.
    ``factory:tasks_per_worker=2,idle_timeout_s=60``; an unknown key or a bad value is a
    one-line ValueError listing what the policy has."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(policy) if not f.name.startswith("_") and f.name != "name"} \
        if dataclasses.is_dataclass(policy) else {}
    for item in filter(None, settings.split(",")):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            raise ValueError(f"policy {spec!r}: {key!r} is not a setting of {policy.name}; it has: "
                             f"{', '.join(sorted(k for k, f in fields.items() if _scalar(getattr(policy, k))))}")
        current = getattr(policy, key)
        try:
            value = (text.strip().lower() in ("1", "true", "yes", "on")) if isinstance(current, bool) else \
                text.strip() if isinstance(current, str) else int(text) if isinstance(current, int) else float(text)
        except ValueError:
            raise ValueError(f"policy {spec!r}: {key}={text!r} is not a {type(current).__name__}") from None
        setattr(policy, key, value)
    if "name" in {f.name for f in dataclasses.fields(policy)}:
        policy.name = spec  # the run record names the settings
    return policy


def _scalar(v: object) -> bool:
    return isinstance(v, (bool, int, float, str)) or v is None


def make_policy(spec: str) -> Policy:
    """``"hta"``, or a rival with its parameter, e.g. ``"hpa-20"``; ``"POLICY:key=value,..."``
    sets the policy's own settings (``factory:tasks_per_worker=2,idle_timeout_s=60``);
    ``"POLICY@K"`` runs POLICY in the time of an experiment compressed K times
    (:mod:`hta.policies.time_scale`)."""
    if "@" in spec:
        from hta.policies.time_scale import TimeScaled

        base, _, k = spec.rpartition("@")
        try:
            scale = float(k)
        except ValueError:
            scale = 0.0
        if scale <= 0:
            raise ValueError(f"policy {spec!r}: the time scale after @ must be a positive number, e.g. hta@10")
        return TimeScaled(make_policy(base), scale)
    if ":" in spec:
        base, _, settings = spec.partition(":")
        return _configure(make_policy(base), spec, settings)
    family = spec.split("-", 1)[0]
    reg = _registry()
    if spec in reg:
        return reg[spec](spec)
    if family in reg:
        return reg[family](spec)
    raise ValueError(f"unknown policy {spec!r}: choose one of {', '.join(policy_names())}")
