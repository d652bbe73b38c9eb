"""``hta makeflow``'s configuration: defaults < config file < environment < command line.

Every option has one name, the command line's (``max-workers``); a config
file (YAML, or TOML by its ``.toml`` suffix) uses the same names, with dashes
or underscores, and the environment ``HTA_`` and the name in capitals
(``HTA_MAX_WORKERS=8``; ``HTA_CONFIG`` names a config file). That is how
``makeflow -T hta`` reaches HTA's options. The result is validated by one
pydantic model, :class:`hta.submit.options.MakeflowOptions`; an error is one line
that names the key, where it came from and what is allowed.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as _field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hta.errors import UsageError
from hta.files import unreadable_kind

#: option name → (section, field) of MakeflowOptions ("" the top level, "backend" its backend_options)
KEYS: dict[str, tuple[str, str]] = {
    "workflow": ("", "workflow"),
    "backend": ("", "backend"),
    "policy": ("", "policy"),
    "deadline": ("", "deadline"),
    "budget": ("", "budget"),
    "port": ("", "port"),
    "min-workers": ("", "min_workers"),
    "max-workers": ("", "max_workers"),
    "worker-cores": ("", "worker_cores"),
    "worker-memory": ("", "worker_memory_mb"),
    "worker-disk": ("", "worker_disk_mb"),
    "poll-interval": ("", "poll_interval_s"),
    "min-interval": ("", "min_interval_s"),
    "max-interval": ("", "max_interval_s"),
    "latency-prior": ("", "latency_prior_s"),
    "runtime-prior": ("", "runtime_prior"),
    "log": ("", "log"),
    "record": ("", "record"),
    "worker-stall-timeout": ("", "stall_timeout_s"),
    "status-port": ("", "status_port"),
    "status-host": ("", "status_host"),
    "status-token": ("", "status_token"),
    "control-token": ("", "control_token"),
    "status": ("", "status"),
    "makeflow-args": ("", "makeflow_args"),
    "idle-timeout": ("backend", "idle_timeout_s"),
    "css": ("backend", "css"),
    "provision-delay": ("backend", "provision_delay_s"),
    "provision-jitter": ("backend", "provision_jitter_s"),
    "kubeconfig": ("backend", "kubeconfig"),
    "namespace": ("backend", "namespace"),
    "image": ("backend", "image"),
    "master-host": ("backend", "master_host"),
    "host-network": ("backend", "host_network"),
    "worker-start-timeout": ("backend", "start_timeout_s"),
    "partition": ("backend", "partition"),
    "account": ("backend", "account"),
    "qos": ("backend", "qos"),
    "time-limit": ("backend", "time_limit"),
    "max-task-losses": ("backend", "max_task_losses"),
    "sbatch-args": ("backend", "sbatch_args"),
}


#: ``HTA_*`` variables HTA reads that are not options of ``hta makeflow`` (see
#: :func:`misspelled_variables`): the k8s backend's start timeout, the identity of the pod HTA runs in
OTHER_VARIABLES = frozenset({"HTA_K8S_START_TIMEOUT_S", "HTA_POD_NAME", "HTA_POD_UID", "HTA_VERBOSE", "HTA_QUIET"})


def variable_of(key: str) -> str:
    """The environment variable of an option: ``max-workers`` → ``HTA_MAX_WORKERS``."""
    return f"HTA_{key.upper().replace('-', '_')}"


def truthy(text: str | None) -> bool:
    """``HTA_VERBOSE=1`` (or yes, true, on) asks for it; unset, empty, 0, no, false, off do not."""
    return (text or "").strip().lower() in ("1", "yes", "true", "on")


def key_of(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def read_file(path: Path, given_by: str = "--config") -> dict[str, Any]:
    """A config file's keys (YAML, or TOML for ``*.toml``), checked against :data:`KEYS`;
    ``given_by`` (``--config`` or ``HTA_CONFIG``) is named in the error line."""
    kind = unreadable_kind(path)
    if kind is not None:
        raise UsageError(f"config file {path} is not a regular file ({kind}): give a YAML or TOML file to {given_by}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the config file {path} ({exc.strerror or exc}): give a readable YAML or "
                         f"TOML file to {given_by}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"config file {path} is not UTF-8 text (byte {exc.start}): give a YAML or TOML file "
                         f"to {given_by}") from None
    try:
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 — yaml and tomllib raise their own kinds
        where = _parse_error(exc)
        raise UsageError(f"config file {path} is not valid {'TOML' if path.suffix == '.toml' else 'YAML'} "
                         f"({where})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold keys and values (e.g. `max-workers: 8`)")
    return _checked(data, f"config file {path}")


def _parse_error(exc: Exception) -> str:
    """A parser's complaint in one line, with where it was found: tomllib puts "(at line
    L, column C)" in its message; PyYAML keeps it in ``problem_mark`` (0-based) after its
    ``context`` ("expected a single document in the stream"), and its message's first
    line ("while parsing a block mapping") says neither what nor where; a character it
    cannot read is a ``ReaderError`` with its ``position`` in the text instead."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is not None and problem:
        context = getattr(exc, "context", None)
        said = f"{context}, {problem}" if context and not context.startswith("while ") else problem
        return f"{said} at line {mark.line + 1}, column {mark.column + 1}"
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    position = getattr(exc, "position", None)
    return f"{first} (character {position + 1})" if isinstance(position, int) else first


def from_environment(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``HTA_MAX_WORKERS=8`` → ``{"max-workers": "8"}`` (pydantic converts the strings)."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for var, value in env.items():
        if var.startswith("HTA_") and var != "HTA_CONFIG":
            key = key_of(var[4:])
            if key in KEYS:
                out[key] = value.split() if key == "makeflow-args" else value
    return out


def misspelled_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``HTA_*`` variable that is not a setting but nearly spells one
    (``HTA_MAX_WORKES``): :func:`from_environment` ignores it, as the shell passes on
    every variable, so a typo would otherwise silently leave the default in force. Only
    near misses are named: other ``HTA_*`` variables (a pod's ``HTA_POD_NAME``,
    the test cluster's ``HTA_K8S_CACHE``) are not HTA's options and are none of its
    business."""
    env = os.environ if env is None else env
    known = [f"HTA_{key.upper().replace('-', '_')}" for key in KEYS] + ["HTA_CONFIG", *sorted(OTHER_VARIABLES)]
    out = []
    for var in sorted(env):
        if var.startswith("HTA_") and var not in known:
            near = difflib.get_close_matches(var, known, n=1, cutoff=0.8)
            if near:
                out.append(f"{var} is not an HTA setting and is ignored: did you mean {near[0]}?")
    return out


def _checked(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        key = key_of(str(k))
        if key not in KEYS:
            near = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.75)
            if near:
                raise UsageError(f"unknown key {k!r} in the {source}: did you mean {near[0]!r}?")
            raise UsageError(f"unknown key {k!r} in the {source}: allowed keys are {', '.join(sorted(KEYS))}")
        out[key] = v
    return out


#: the names of the layers above a config file (:func:`build` words its errors by them)
FROM_ENVIRONMENT = "the environment"
FROM_FLAGS = "the command line"


@dataclass
class Layers:
    """A configuration as it was read, before it is built: its layers, lowest first, each
    named by where it came from, the values no layer may set (the workflow), and the
    config file read, if any. Kept so that SIGHUP can read the file again and tell which
    layer a setting comes from (:mod:`hta.submit.reload`)."""

    layers: list[tuple[str, Mapping[str, Any]]]
    fixed: dict[str, Any] = _field(default_factory=dict)
    file: Path | None = None

    def build(self):
        return build(self.layers, **self.fixed)

    def file_values(self) -> Mapping[str, Any]:
        """What the config file says (empty: no file)."""
        return next((values for source, values in self.layers if source.startswith("config file ")), {})

    def winner(self, key: str) -> str | None:
        """Where ``key``'s value comes from: the highest layer that sets it (None: the default)."""
        return next((source for source, values in reversed(self.layers) if key in values), None)


def build(layers: list[tuple[str, Mapping[str, Any]]], **fixed: Any):
    """:class:`~hta.submit.options.MakeflowOptions` from layers of ``{key: value}`` (later layers win),
    each named by where it came from, for the error line."""
    from hta.backends import BackendOptions
    from hta.submit.options import MakeflowOptions

    top: dict[str, Any] = dict(fixed)
    backend: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, values in layers:
        for key, value in values.items():
            section, field = KEYS[key]
            (backend if section == "backend" else top)[field] = value
            if source == FROM_ENVIRONMENT:
                origin[field] = f"HTA_{key.upper().replace('-', '_')} (from the environment)"
            elif source == FROM_FLAGS:
                origin[field] = f"--{key}"
            else:
                origin[field] = f"{key} (from {source})"
    for model, values in ((MakeflowOptions, top), (BackendOptions, backend)):
        for field, value in values.items():  # (pydantic reads true as 1; YAML reads yes, on, no as booleans)
            wants = str(model.model_fields[field].annotation)
            if isinstance(value, bool) and "bool" not in wants:
                what = "a number" if "int" in wants or "float" in wants else \
                    "text (YAML reads yes, no, on, off as true or false: quote it)"
                raise UsageError(f"{origin.get(field, field)} must be {what}, not {value!r} (see: hta makeflow "
                                 f"--help)")
    try:
        return MakeflowOptions(**top, backend_options=BackendOptions(**backend))
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][-1]) if e["loc"] else ""
        raise UsageError(f"{origin.get(field, field)}{_what_is_wrong(e)}") from None


def _what_is_wrong(e: Any) -> str:
    """pydantic's error in the command line's words (" must be at most 65535, not 70000 (see: …)"),
    or a validator's own line, which names its fix (": unknown policy 'x': choose one of …")."""
    fix = " (see: hta makeflow --help)"
    got, kind, ctx = e.get("input"), e["type"], e.get("ctx") or {}
    bounds = {"greater_than_equal": ("at least", "ge"), "greater_than": ("more than", "gt"),
              "less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}
    numeric = kind in bounds or kind.startswith(("int_", "float_", "finite_"))  # (a number's field, not text's)
    try:
        number = float(got)
    except (TypeError, ValueError):
        number = None
    if numeric and number is not None and not math.isfinite(number):
        return f" must be a finite number, not {got!r}{fix}"
    if kind in bounds:
        words, key = bounds[kind]
        return f" must be {words} {ctx[key]}, not {got}{fix}"
    if kind.startswith("int_"):
        return f" must be a whole number, not {got!r}{fix}"
    if kind.startswith("float_"):
        return f" must be a number, not {got!r}{fix}"
    if kind.startswith("bool_"):
        return f" must be true or false, not {got!r}{fix}"
    msg = str(e["msg"]).removeprefix("Value error, ")  # (pydantic's prefix to a validator's own words)
    shown = "" if repr(got) in msg else f" (got {got!r})"  # (quoted in the message already)
    return f": {msg}{shown}"


def as_keys(options) -> dict[str, Any]:
    """The options under their config-file names (what ``hta config`` prints: a valid config
    file), the workflow first."""
    data = options.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key, (section, field) in KEYS.items():
        out[key] = data["backend_options"][field] if section == "backend" else data[field]
    return out
