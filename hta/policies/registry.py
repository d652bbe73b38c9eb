"""The policies by name: the built-in ones, a user's own (``module:callable``), the
``hta.policies`` entry-point group, settings (``POLICY:key=value``) and a time scale
(``POLICY@K``). :func:`make_policy` is the one way a policy is made from text."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from importlib.metadata import entry_points

from hta.policies.base import PluginPolicy, Policy
from hta.policies.factory import FactoryPolicy
from hta.policies.hpa import HPAPolicy
from hta.policies.hta_policy import make_hta
from hta.policies.keda import KEDAScaledObjectPolicy
from hta.policies.keda_job import KEDAJobPolicy
from hta.policies.max_then_drain import MaxThenDrainPolicy
from hta.policies.observe import ObservePolicy
from hta.policies.pod_shape import PodShaped
from hta.policies.settings import configure
from hta.policies.static import StaticPolicy
from hta.policies.time_scale import TimeScaled


def _param(spec: str) -> float:
    try:
        value = float(spec.split("-", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"policy {spec!r} needs a number, e.g. {spec.split('-')[0]}-20") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"policy {spec!r} needs a number above 0, e.g. {spec.split('-')[0]}-20")
    return value


def _registry() -> dict[str, Callable[[str], Policy]]:
    return {
        "hta": make_hta,
        "static": lambda spec: StaticPolicy(),
        "observe": lambda spec: ObservePolicy(),
        "hpa": lambda spec: HPAPolicy(target_percent=_param(spec)),
        "keda": lambda spec: KEDAScaledObjectPolicy(tasks_per_pod=_param(spec)),
        "keda-job": lambda spec: KEDAJobPolicy() if spec == "keda-job" else
        KEDAJobPolicy(tasks_per_job=_int_after(spec, "keda-job-")),
        "factory": lambda spec: FactoryPolicy(),
        "max-then-drain": lambda spec: MaxThenDrainPolicy(),
    }


def _int_after(spec: str, prefix: str) -> int:
    text = spec[len(prefix):]
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"policy {spec!r} needs a whole number ≥ 1 after {prefix!r}, e.g. {prefix}3")
    return int(text)


#: the entry-point group a package registers its policies in (name → a callable returning a Policy)
ENTRY_POINT_GROUP = "hta.policies"


def _entry_points() -> dict:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def policy_names() -> list[str]:
    return ["hta", "hta-time", "hta-cost", "hpa-<cpu target %>", "keda-job[-<tasks per job>] (ScaledJob)",
            "keda-<tasks per pod> (ScaledObject: deletes busy pods)", "factory", "static", "max-then-drain",
            "observe", *sorted(_entry_points()), "<policy>:<setting>=<value>,...", "<policy>@<time scale k>",
            "<policy>[pods=<k>|learned]",
            "<module>:<callable>[:<setting>=<value>,...]"]


def _is_plugin(spec: str) -> bool:
    """``module.path:callable[:settings]``: the text between the first and second ``:`` is a
    Python name (settings always hold ``=``, so ``factory:idle_timeout_s=60`` is not one)."""
    base, colon, rest = spec.partition(":")
    return bool(colon) and rest.split(":", 1)[0].isidentifier() and base not in _registry()


def _built(spec: str, what: str, make: Callable[[], object]) -> Policy:
    """Call a user's factory; its errors and a result that is no Policy are one-line ValueErrors."""
    try:
        policy = make()
    except Exception as exc:  # noqa: BLE001 — the user's code: say what failed, in one line
        raise ValueError(f"policy {spec!r}: {what} raised {type(exc).__name__}: {exc}") from None
    if isinstance(policy, Policy):
        return policy
    if not (isinstance(getattr(policy, "name", None), str) and callable(getattr(policy, "decide", None))):
        raise ValueError(f"policy {spec!r}: {what} returned {type(policy).__name__}, not a Policy "
                         f"(an object with a name and decide(observation) -> ScaleDecision)")
    return PluginPolicy(policy)


def load_plugin(spec: str) -> Policy:
    """``"mypkg.mymod:make_policy"``: import ``mypkg.mymod`` and call ``make_policy()`` (a class
    with defaults is a callable too); the result must be a :class:`Policy`."""
    module_name, _, attr = spec.partition(":")
    attr = attr.split(":", 1)[0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        ours = exc.name is None or module_name == exc.name or module_name.startswith(exc.name + ".")
        where = "" if ours else f" (it imports {exc.name!r}, which is missing)"
        raise ValueError(f"policy {spec!r}: no module named {module_name!r}{where}; "
                         f"is it installed or on PYTHONPATH?") from None
    except Exception as exc:  # noqa: BLE001 — the user's module failed to import
        raise ValueError(f"policy {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ValueError(f"policy {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise ValueError(f"policy {spec!r}: {module_name}.{attr} is a {type(factory).__name__}, not a callable "
                         f"returning a Policy")
    return _built(spec, f"{module_name}.{attr}()", factory)


def make_policy(spec: str) -> Policy:
    """``"hta"``, or a rival with its parameter, e.g. ``"hpa-20"``; ``"POLICY:key=value,..."``
    sets the policy's own settings (``factory:tasks_per_worker=2,idle_timeout_s=60``);
    ``"POLICY@K"`` runs POLICY in the time of an experiment compressed K times
    (:mod:`hta.policies.time_scale`).

    A user's own policy: ``"MODULE:CALLABLE"`` (``"mypkg.mymod:make_policy"``) imports MODULE
    and calls CALLABLE with no arguments; settings follow a second colon,
    ``"mypkg.mymod:make_policy:key=value,..."`` (fields of the returned dataclass, as above).
    A name a package registers in the ``hta.policies`` entry-point group works like a
    built-in one (``"mypolicy"``, ``"mypolicy:key=value"``). Every failure (no such module,
    no such callable, not a Policy, an error inside it) is a one-line ValueError.

    ``"POLICY[pods=K]"`` gives POLICY workers of 1/K of a node, ``"POLICY[pods=learned]"``
    pods cut as HTA's default would for the tasks that wait (:mod:`hta.policies.pod_shape`)."""
    if spec.endswith("]") and "[pods=" in spec:
        base, _, pods = spec[:-1].rpartition("[pods=")
        if pods != "learned" and not (pods.isdigit() and int(pods) >= 1):
            raise ValueError(f"policy {spec!r}: [pods=K] needs a whole number ≥ 1 or 'learned', e.g. "
                             f"max-then-drain[pods=3]")
        return PodShaped(make_policy(base), pods if pods == "learned" else int(pods))
    if "@" in spec:
        base, _, k = spec.rpartition("@")
        try:
            scale = float(k)
        except ValueError:
            scale = 0.0
        if not (scale > 0 and math.isfinite(scale)):  # (nan and inf passed `<= 0`: no decision ever came again)
            raise ValueError(f"policy {spec!r}: the time scale after @ must be a finite positive number, e.g. hta@10")
        return TimeScaled(make_policy(base), scale)
    if _is_plugin(spec):
        module_attr, _, settings = spec.partition(":")
        module_attr += ":" + settings.partition(":")[0]
        policy = load_plugin(module_attr)
        return configure(policy, spec, settings.partition(":")[2]) if ":" in settings else policy
    if ":" in spec:
        base, _, settings = spec.partition(":")
        return configure(make_policy(base), spec, settings)
    reg = _registry()
    if spec in reg:
        return reg[spec](spec)
    # the longest registered family the spec starts with: "keda-job-3" is keda-job's, "keda-3" keda's
    for family in sorted(reg, key=len, reverse=True):
        if spec.startswith(family + "-"):
            return reg[family](spec)
    eps = _entry_points()
    if spec in eps:
        ep = eps[spec]
        try:
            factory = ep.load()
        except Exception as exc:  # noqa: BLE001 — the package's code
            raise ValueError(f"policy {spec!r}: entry point {ep.value!r} ({ENTRY_POINT_GROUP}) failed to load: "
                             f"{type(exc).__name__}: {exc}") from None
        return _built(spec, f"entry point {ep.value!r}", factory)
    raise ValueError(f"unknown policy {spec!r}: choose one of {', '.join(policy_names())}")
