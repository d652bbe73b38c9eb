"""A policy's own settings from text: ``POLICY:key=value,...``.

A dataclass policy's number, string and bool fields are its settings, and the fields of its
dataclass-valued fields too (HTA's estimator options: ``hta:busy_runtimes=3``).
"""

from __future__ import annotations

import math

from hta.policies.base import PluginPolicy, Policy


def configure(policy: Policy, spec: str, settings: str) -> Policy:
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
        out.update({name: obj for name in own if scalar(getattr(obj, name))})
        return out

    items = [item for item in settings.split(",") if item.strip()]
    if not items:  # ("mymod:make:", "factory:"): no settings, the policy as it was made
        return policy
    target = policy.inner if isinstance(policy, PluginPolicy) else policy  # a user's own object
    holders = settable(target)
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
        value: bool | str | int | float
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
    # (a dataclass: a setting was found in it)
    if "name" in {f.name for f in dataclasses.fields(target)}:  # type: ignore[arg-type]
        target.name = spec  # type: ignore[attr-defined] # the run record names the settings
        policy.name = spec
    try:
        policy.validate()
    except ValueError as exc:
        raise ValueError(f"policy {spec!r}: {exc}") from None
    if nonfinite is not None:  # (a nan timeout never expires; a nan interval never comes)
        raise ValueError(f"policy {spec!r}: {nonfinite}")
    return policy


def scalar(v: object) -> bool:
    return isinstance(v, (bool, int, float, str)) or v is None
