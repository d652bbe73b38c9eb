"""A makeflow command line, read as makeflow 8.0 reads it.

HTA starts the real ``makeflow -T wq`` with the user's own makeflow options,
so it must know what those options mean to makeflow: which token is the
workflow (GNU getopt permutes, so options may follow it), where makeflow
writes its log (``-l``, and ``-X DIR`` makes it relative to DIR), which
format the workflow is in (``--jx``, ``--json``, ``--jx-args``,
``--jx-define``: ``makeflow_viz`` needs them too), a workflow named inside
``--argv FILE``, and the options HTA must own itself (``-T``, ``-p``, ``-N``,
…), in every spelling getopt accepts (``-Tlocal``, ``--batch-type=local``,
``--batch=local``).

The option table follows ``makeflow/src/makeflow.c`` (cctools 8.0:
``option_string_run`` and ``long_options_run``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

#: getopt's option string: a letter followed by ``:`` takes a value, by ``::`` an optional one
_SHORT = "aAB:c::C:d:Ef:F:g:G:hj:J:l:L:m:M:N:o:Op:P:r:RS:t:T:u:vW:X:zZ:"
NONE, REQUIRED, OPTIONAL = 0, 1, 2


def _short_table(spec: str) -> dict[str, int]:
    table, i = {}, 0
    while i < len(spec):
        letter, i = spec[i], i + 1
        kind = NONE
        if spec[i:i + 2] == "::":
            kind, i = OPTIONAL, i + 2
        elif spec[i:i + 1] == ":":
            kind, i = REQUIRED, i + 1
        table[letter] = kind
    return table


SHORT = _short_table(_SHORT)

_LONG_NONE = """advertise disable-afs-check disable-cache enable_hook_example help ignore-memory-spec
monitor-measure-dir monitor-with-opened-files monitor-with-time-series retry do-not-save-failed-output
safe-submit-mode sandbox send-environment show-output vc3-builder version log-verbose skip-file-check
wq-estimate-capacity zero-length-error json jx enforcement archive archive-read archive-write
verbose-jobnames keep-wrapper-stdout""".split()
_LONG_OPTIONAL = "clean archive-s3 archive-s3-no-check".split()
_LONG_REQUIRED = """allocation argv auth batch-log batch-options batch-type cache catalog-server debug debug-file
debug-rotate-max email wait-for-files-upto gc gc-size gc-count batch-mem-type local-cores local-memory local-disk
makeflow-log max-local max-remote monitor monitor-exe monitor-interval monitor-log-name monitor-log-fmt mounts
password port port-file priority project-name retry-count shared-fs storage-type storage-limit storage-print
submission-timeout summary-log tickets vc3-exe vc3-log vc3-options working-dir umbrella-binary umbrella-log-prefix
umbrella-mode umbrella-spec work-queue-preferred-connection wq-fast-abort wq-keepalive-interval
wq-keepalive-timeout wq-schedule wq-wait-queue-size wrapper wrapper-input wrapper-output change-directory docker
docker-tar docker-opt amazon-config lambda-config amazon-batch-img amazon-batch-config jx-context jx-args jx-define
parrot-path env-replace-path singularity singularity-opt s3-hostname s3-keyid s3-secretkey archive-dir mesos-master
mesos-path mesos-preload k8s-image mpi-cores mpi-memory tlq file-status file-status-interval""".split()
LONG: dict[str, int] = {**{n: NONE for n in _LONG_NONE}, **{n: OPTIONAL for n in _LONG_OPTIONAL},
                        **{n: REQUIRED for n in _LONG_REQUIRED}}
#: short letter → its long name (for options HTA reads or owns)
SHORT_NAMES = {"T": "batch-type", "p": "port", "Z": "port-file", "N": "project-name", "M": "project-name",
               "C": "catalog-server", "l": "makeflow-log", "L": "batch-log", "X": "change-directory", "c": "clean",
               "h": "help", "v": "version", "u": "wq-keepalive-interval", "t": "wq-keepalive-timeout",
               "j": "max-local", "J": "max-remote", "r": "retry-count", "R": "retry", "g": "gc", "d": "debug"}

#: what HTA sets itself, and what to do instead
OWNED = {
    "batch-type": "HTA runs makeflow -T wq itself: leave the batch type out",
    "port": "HTA picks the master's port: use hta's --port",
    "port-file": "HTA picks the master's port and reads it itself: leave it out",
    "project-name": "HTA names the Work Queue project to find its own master: leave it out",
    "catalog-server": "HTA runs its master without a public catalog: leave it out",
    "password": "HTA cannot yet hand the password to the workers it starts and to its status reader, so no "
                "worker could connect: leave it out",
}
#: options under which makeflow 8.0 cannot run with --monitor (a segfault with the storage
#: hooks; ./cctools-monitor not found with --shared-fs): HTA then runs without it
MONITOR_BREAKERS = ("shared-fs", "storage-type", "storage-limit", "storage-print")
JX_OPTIONS = ("json", "jx", "jx-args", "jx-context", "jx-define")


class ArgsError(ValueError):
    """A makeflow command line HTA cannot run; the message is one line for the user."""


@dataclass
class Option:
    name: str  # the long name, or the letter of a short option without one
    value: str | None
    tokens: list[str]


@dataclass
class MakeflowArgs:
    """Options (in order, with the tokens they came from) and the workflow."""

    options: list[Option] = field(default_factory=list)
    dagfile: str | None = None
    #: where makeflow is started (its working directory)
    cwd: Path = field(default_factory=Path.cwd)
    #: options given inside --argv FILE (makeflow reads them there; not in :meth:`tokens`)
    from_argv_file: list[Option] = field(default_factory=list)
    #: the workflow was named by MAKEFLOW in the --argv file (makeflow finds it there itself)
    dag_from_argv: bool = False

    @classmethod
    def parse(cls, argv: list[str], cwd: Path | None = None) -> MakeflowArgs:
        """Read ``argv`` (makeflow's arguments, without the program name) as getopt does."""
        out = cls(cwd=Path(cwd) if cwd else Path.cwd())
        positional: list[str] = []
        i = 0
        while i < len(argv):
            tok = argv[i]
            i += 1
            if tok == "--":
                positional.extend(argv[i:])
                break
            if tok.startswith("--") and len(tok) > 2:
                body, eq, value = tok[2:].partition("=")
                name = _long_name(body)
                kind = LONG[name]
                tokens = [tok]
                if kind == NONE and eq:
                    raise ArgsError(f"makeflow option --{name} takes no value (got {tok!r})")
                if kind == REQUIRED and not eq:
                    if i >= len(argv):
                        raise ArgsError(f"makeflow option --{name} needs a value")
                    value = argv[i]
                    tokens.append(argv[i])
                    i += 1
                out.options.append(Option(name, value if (eq or kind == REQUIRED) else None, tokens))
            elif tok.startswith("-") and len(tok) > 1:
                j = 1
                while j < len(tok):
                    letter = tok[j]
                    if letter not in SHORT:
                        raise ArgsError(f"unknown makeflow option -{letter} (in {tok!r}): see makeflow --help")
                    kind = SHORT[letter]
                    name = SHORT_NAMES.get(letter, letter)
                    rest = tok[j + 1:]
                    if kind == NONE:
                        out.options.append(Option(name, None, [tok]))
                        j += 1
                        continue
                    if rest:
                        out.options.append(Option(name, rest, [tok]))
                    elif kind == REQUIRED:
                        if i >= len(argv):
                            raise ArgsError(f"makeflow option -{letter} needs a value")
                        out.options.append(Option(name, argv[i], [tok, argv[i]]))
                        i += 1
                    else:
                        out.options.append(Option(name, None, [tok]))
                    break
            else:
                positional.append(tok)
        if len(positional) > 1:
            raise ArgsError(f"makeflow takes one workflow, got {len(positional)}: {' '.join(positional)}")
        out.dagfile = positional[0] if positional else None
        for path in out.values("argv"):
            out._read_argv_file(path)
        return out

    def _read_argv_file(self, path: str) -> None:
        """makeflow's ``--argv FILE``: a JSON object of long options; ``MAKEFLOW`` names the workflow."""
        f = self.cwd / path
        try:
            data = json.loads(f.read_text())
        except OSError as exc:
            raise ArgsError(f"cannot read the --argv file {path} ({exc.strerror or exc})") from None
        except ValueError:
            raise ArgsError(f"the --argv file {path} is not JSON: HTA reads it as a JSON object of makeflow "
                            f"options") from None
        if not isinstance(data, dict):
            raise ArgsError(f"the --argv file {path} must hold a JSON object, as makeflow requires")
        dag = data.pop("MAKEFLOW", None)
        if dag is not None:
            if self.dagfile is not None:
                raise ArgsError(f"the workflow is named twice ({self.dagfile} and MAKEFLOW in {path}): give one")
            if not isinstance(dag, str):
                raise ArgsError(f"MAKEFLOW in {path} must be a file name")
            self.dagfile = dag
            self.dag_from_argv = True
        for key, value in data.items():
            name = _long_name(str(key))
            v = None if value is True else str(value)
            self.from_argv_file.append(Option(name, v, []))

    # -- what the options say --------------------------------------------------------
    def all_options(self) -> list[Option]:
        return self.options + self.from_argv_file

    def values(self, name: str) -> list[str]:
        return [o.value for o in self.all_options() if o.name == name and o.value is not None]

    def has(self, name: str) -> bool:
        return any(o.name == name for o in self.all_options())

    def last(self, name: str) -> str | None:
        v = self.values(name)
        return v[-1] if v else None

    def tokens(self) -> list[str]:
        """The options as given, for makeflow's command line (the workflow left out)."""
        return [t for o in self.options for t in o.tokens]

    def without(self, *names: str) -> list[str]:
        return [t for o in self.options if o.name not in names for t in o.tokens]

    def owned(self) -> list[tuple[str, str]]:
        """(option as given, why HTA refuses it) for each option HTA sets itself."""
        return [(o.tokens[0] if o.tokens else f"{o.name} (in the --argv file)", OWNED[o.name])
                for o in self.all_options() if o.name in OWNED]

    @property
    def workdir(self) -> Path:
        """Where makeflow runs the rules and opens a relative log: ``-X DIR`` or its cwd."""
        x = self.last("change-directory")
        return (self.cwd / x) if x else self.cwd

    @property
    def workflow_path(self) -> Path | None:
        """The workflow file (makeflow reads it before it changes directory)."""
        return None if self.dagfile is None else self.cwd / self.dagfile

    @property
    def log_path(self) -> Path | None:
        """The makeflowlog: ``-l FILE`` or ``WORKFLOW.makeflowlog``, relative to :attr:`workdir`."""
        name = self.last("makeflow-log") or (None if self.dagfile is None else self.dagfile + ".makeflowlog")
        return None if name is None else self.workdir / name

    @property
    def batch_log_path(self) -> Path | None:
        """The batch system's log: ``-L FILE`` or ``WORKFLOW.wqlog`` (with ``-T wq``, which
        HTA runs), relative to :attr:`workdir`, like the makeflowlog."""
        name = self.last("batch-log") or (None if self.dagfile is None else self.dagfile + ".wqlog")
        return None if name is None else self.workdir / name

    @property
    def transactions_log_path(self) -> Path | None:
        """The Work Queue master's transactions log: makeflow names it after the batch log, plus ``.tr``."""
        batch = self.batch_log_path
        return None if batch is None else batch.with_name(batch.name + ".tr")

    def format_options(self) -> list[str]:
        """The options that say how to read the workflow (for ``makeflow_viz``)."""
        out = []
        for o in self.all_options():
            if o.name in JX_OPTIONS:
                name = "jx-args" if o.name == "jx-context" else o.name
                out.append(f"--{name}" if o.value is None else f"--{name}={o.value}")
        return out

    def monitor_breaker(self) -> str | None:
        """The first option under which makeflow cannot run with ``--monitor``."""
        for o in self.all_options():
            if o.name in MONITOR_BREAKERS:
                return f"--{o.name}"
        return None

    def ends_before_master(self) -> bool:
        """Options with which makeflow does its job and exits without running a master."""
        return any(self.has(n) for n in ("clean", "help", "version", "storage-print"))


def _long_name(body: str) -> str:
    """A long option's full name; getopt accepts any unambiguous prefix."""
    if body in LONG:
        return body
    matches = [n for n in LONG if n.startswith(body)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ArgsError(f"unknown makeflow option --{body}: see makeflow --help")
    raise ArgsError(f"makeflow option --{body} is ambiguous ({', '.join('--' + m for m in sorted(matches)[:4])})")


def real_makeflow() -> str | None:
    """The CCTools makeflow on PATH, past HTA's own ``makeflow`` (``hta.makeflow_shim``)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", "makeflow")
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        try:
            with open(candidate, "rb") as fh:
                head = fh.read(2048)
        except OSError:
            continue
        if b"hta.makeflow_shim" not in head:
            return candidate
    return None
