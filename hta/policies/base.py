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

import math

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

from hta.model import Observation, ScaleDecision


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> ScaleDecision: ...


@dataclass(frozen=True)
class WorkerLifetime:
    """What the workers a policy starts do on their own, whatever the policy decides later.

    A policy whose workers run to completion (KEDA's ScaledJob: one Kubernetes Job per
    worker) says so in a ``worker_lifetime`` attribute; the simulator's world then lets
    each worker leave by itself, never while it runs a task: after ``max_tasks`` tasks
    (it accepts no more), or after ``idle_timeout_s`` without one (``work_queue_worker
    -t``). ``None``: no such limit. Policies without the attribute start workers that
    stay until the policy drains or removes them."""

    max_tasks: int | None = None
    idle_timeout_s: float | None = None


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
        value = float(spec.split("-", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"policy {spec!r} needs a number, e.g. {spec.split('-')[0]}-20") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"policy {spec!r} needs a number above 0, e.g. {spec.split('-')[0]}-20")
    return value


def _registry() -> dict[str, Callable[[str], Policy]]:
    from hta.policies.factory import FactoryPolicy
    from hta.policies.hpa import HPAPolicy
    from hta.policies.hta_policy import make_hta
    from hta.policies.keda import KEDAScaledObjectPolicy
    from hta.policies.keda_job import KEDAJobPolicy
    from hta.policies.max_then_drain import MaxThenDrainPolicy
    from hta.policies.observe import ObservePolicy
    from hta.policies.static import StaticPolicy

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
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def policy_names() -> list[str]:
    return ["hta", "hta-time", "hta-cost", "hpa-<cpu target %>", "keda-job[-<tasks per job>] (ScaledJob)",
            "keda-<tasks per pod> (ScaledObject: deletes busy pods)", "factory", "static", "max-then-drain",
            "observe", *sorted(_entry_points()), "<policy>:<setting>=<value>,...", "<policy>@<time scale k>",
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
    if not isinstance(policy, Policy):
        raise ValueError(f"policy {spec!r}: {what} returned {type(policy).__name__}, not a Policy "
                         f"(an object with a name and decide(observation) -> ScaleDecision)")
    return policy


def load_plugin(spec: str) -> Policy:
    """``"mypkg.mymod:make_policy"``: import ``mypkg.mymod`` and call ``make_policy()`` (a class
    with defaults is a callable too); the result must be a :class:`Policy`."""
    import importlib

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


def _configure(policy: Policy, spec: str, settings: str) -> Policy:
    """Apply ``key=value,...`` to a policy's own settings (its dataclass fields), e.g.
    ``factory:tasks_per_worker=2,idle_timeout_s=60``. A key may also name a field of one
    of its dataclass-valued fields (HTA's estimator options: ``hta:busy_runtimes=3``).
    An unknown key or a bad value is a one-line ValueError listing what the policy has; nan
    and inf are bad values (``float()`` reads them, no setting means them)."""
    import dataclasses

    def settable(obj: object) -> dict[str, object]:
        """name → the object that holds it, the policy's own fields first."""
        if not dataclasses.is_dataclass(obj):
            return {}
        own = [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_") and f.name != "name"]
        out: dict[str, object] = {}
        for name in own:
            value = getattr(obj, name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                out.update({k: v for k, v in settable(value).items() if k not in own})
        out.update({name: obj for name in own if _scalar(getattr(obj, name))})
        return out

    items = [item for item in settings.split(",") if item.strip()]
    if not items:  # ("mymod:make:", "factory:"): no settings, the policy as it was made
        return policy
    holders = settable(policy)
    #: the first nan or inf setting, refused after ``validate()`` (whose message names the range, if it has one)
    nonfinite: str | None = None
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or key not in holders:
            if not holders:  # (a policy that is not a dataclass, or has no scalar fields)
                raise ValueError(f"policy {spec!r}: {policy.name} has no settings: settings after the colon set "
                                 f"the fields of a dataclass policy (its number, string and bool fields)")
            raise ValueError(f"policy {spec!r}: {key!r} is not a setting of {policy.name}; it has: "
                             f"{', '.join(sorted(holders))}")
        holder = holders[key]
        current = getattr(holder, key)
        try:
            if isinstance(current, bool):
                word = text.strip().lower()
                if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                    raise ValueError(word)
                value = word in ("1", "true", "yes", "on")
            else:
                value = text.strip() if isinstance(current, str) else int(text) if isinstance(current, int) \
                    else float(text)
        except ValueError:
            kind = {"int": "an int (a whole number)", "float": "a float (a number)", "bool": "a bool (true or false)"}.get(
                type(current).__name__, f"a {type(current).__name__}")
            raise ValueError(f"policy {spec!r}: {key}={text!r} is not {kind}") from None
        if isinstance(value, float) and not math.isfinite(value) and nonfinite is None:
            example = current if isinstance(current, float) and math.isfinite(current) else 1
            nonfinite = f"{key}={text!r} is not a finite number: give a number, e.g. {key}={example:g}"
        setattr(holder, key, value)
    if "name" in {f.name for f in dataclasses.fields(policy)}:  # (a dataclass: a setting was found in it)
        policy.name = spec  # the run record names the settings
    if callable(getattr(policy, "validate", None)):
        try:
            policy.validate()
        except ValueError as exc:
            raise ValueError(f"policy {spec!r}: {exc}") from None
    if nonfinite is not None:  # (a nan timeout never expires; a nan interval never comes)
        raise ValueError(f"policy {spec!r}: {nonfinite}")
    return policy


def _scalar(v: object) -> bool:
    return isinstance(v, (bool, int, float, str)) or v is None


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
    no such callable, not a Policy, an error inside it) is a one-line ValueError."""
    if "@" in spec:
        from hta.policies.time_scale import TimeScaled

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
        return _configure(policy, spec, settings.partition(":")[2]) if ":" in settings else policy
    if ":" in spec:
        base, _, settings = spec.partition(":")
        return _configure(make_policy(base), spec, settings)
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
