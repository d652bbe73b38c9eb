"""The scaling log: JSON Lines, one record per observation, decision and
worker event, written by ``hta makeflow`` and ``hta simulate`` alike and read
by ``hta report``.

Every record has ``kind`` and ``t`` (seconds since the run started). The first
record is ``run`` (what ran, with ``started_at`` in Unix time), the last one
``end`` (absent while the run is in progress).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import IO, Annotated, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from hta.files import unreadable_kind
from hta.model import CategoryModel, DialPlan, Resources

FORMAT = "hta-scaling-log/1"

log = logging.getLogger("hta")


class RunRecord(BaseModel):
    kind: Literal["run"] = "run"
    t: float = 0.0
    format: str = FORMAT
    started_at: float
    workflow: str | None = None
    workload: str | None = None
    policy: str
    backend: str
    seed: int | None = None
    simulated: bool = False
    worker_shape: Resources
    min_workers: int = 0
    max_workers: int


class ObservationRecord(BaseModel):
    kind: Literal["observation"] = "observation"
    t: float
    supply_cores: float
    in_use_cores: float
    demand_cores: float
    #: cores of connected workers that run no task (0 in logs from before it was kept)
    idle_cores: float = 0.0
    waiting: int
    running: int
    workers: int
    pending: int
    tasks_done: int = 0
    tasks_failed: int = 0


class DecisionRecord(BaseModel):
    kind: Literal["decision"] = "decision"
    t: float
    add: int = 0
    drain: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    target: int | None = None
    latency_s: float | None = None
    next_decision_s: float
    reason: str = ""
    #: workers the policy wanted and did not get: the cap (``--max-workers``) or the backend
    #: (a quota, pods that cannot be scheduled) held them back; ``held_by`` says which
    held_back: int = 0
    held_by: str | None = None
    #: tasks waiting when it was made
    waiting: int | None = None
    #: the time–cost dial's plan (``--deadline``/``--budget``), when one was given
    plan: DialPlan | None = None


WorkerEventName = Literal["requested", "connected", "drained", "removed", "stopped", "lost", "failed"]


class WorkerRecord(BaseModel):
    kind: Literal["worker"] = "worker"
    t: float
    worker: str
    event: WorkerEventName
    cores: float | None = None
    #: request → connected, on ``connected`` records
    latency_s: float | None = None
    #: where the latency went (e.g. waiting for a node, pulling, starting, connecting)
    phases: dict[str, float] = Field(default_factory=dict)
    #: tasks the worker was running when it went away (only ``removed``/``lost``): the
    #: master runs them again
    tasks_lost: int = 0
    #: core·s those tasks had run when the worker went away (work to do again)
    lost_work_core_s: float = 0.0
    #: why a worker was ``lost`` or ``failed`` (e.g. its last words, or a stall), one line
    reason: str = ""
    #: what cost the lost work, where it is one of the causes a report counts apart (``time
    #: limit``, ``preemption``, ``node failure``, ``held at a last call``); None otherwise
    cause: str | None = None

    @property
    def took_work(self) -> bool:
        """It went away with work to do again: lost, removed or failed, or drained with tasks
        it held back at its last call (:mod:`hta.node.last_call`)."""
        return self.event in ("lost", "removed", "failed") or self.tasks_lost > 0
    #: the node it runs on, where known and shared with other workers (the simulator's
    #: several worker pods per node): node-seconds are then paid per node, not per worker
    node: str | None = None


class NodeRecord(BaseModel):
    """A node went, after its last worker: a node kept empty meanwhile (the cluster
    autoscaler's ``scale-down-unneeded-time``) is paid until then (``summary.paid_intervals``)."""

    kind: Literal["node"] = "node"
    t: float
    #: the node as worker records name it
    node: str


class CategoriesRecord(BaseModel):
    kind: Literal["categories"] = "categories"
    t: float
    categories: dict[str, CategoryModel]


class EndRecord(BaseModel):
    kind: Literal["end"] = "end"
    t: float
    exit_code: int
    runtime_s: float
    tasks_done: int
    tasks_failed: int = 0
    tasks_retried: int = 0
    lost_work_core_s: float = 0.0
    #: of ``tasks_done``, those an earlier run of the workflow had completed (makeflow
    #: counts them done again when it resumes a workflow)
    tasks_done_before: int = 0
    #: rules an earlier run had started and not completed that this one ran again
    tasks_resumed: int = 0


Record = Annotated[
    Union[RunRecord, ObservationRecord, DecisionRecord, WorkerRecord, NodeRecord, CategoriesRecord, EndRecord],
    Field(discriminator="kind"),
]
RECORD = TypeAdapter(Record)


class ScalingLogWriter:
    """Appends records, one line each, written at once so a live run can be read.

    Log trouble never stops a run: a record that cannot be written (disk full, I/O
    error) is counted in ``write_errors`` (the first cause in ``first_error``), warned
    about once, and the file is cut back to its last whole record, so it stays a
    valid log of what could be written. Every record is kept in ``records`` anyway,
    for the end-of-run summary. Only opening the file raises (``OSError``)."""

    def __init__(self, path: Path | str | None = None, stream: IO[str] | None = None):
        self.path = Path(path) if path else None
        self._stream: IO[str] | None = stream
        self._fd: int | None = None
        self._good = 0  # bytes of whole records in the file
        #: every record written, for the end-of-run summary
        self.records: list[BaseModel] = []
        self.write_errors = 0
        self.first_error: str | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def write(self, record: BaseModel) -> None:
        self.records.append(record)
        if self._fd is None and self._stream is None:
            return
        line = record.model_dump_json(exclude_defaults=False) + "\n"
        try:
            if self._fd is not None:
                data = line.encode()
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
                self._good += len(data)
            elif self._stream is not None:
                self._stream.write(line)
                self._stream.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.write_errors += 1
        why = exc.strerror or str(exc)
        if self.first_error is None:
            self.first_error = why
            log.warning("cannot write the scaling log %s (%s): autoscaling and the workflow go on; "
                        "the log will miss records", self.path or "(stream)", why)
        if self._fd is not None:
            try:  # a half-written line would make the whole log unreadable: cut it off
                os.ftruncate(self._fd, self._good)
                os.lseek(self._fd, self._good, os.SEEK_SET)
            except OSError:
                pass

    @property
    def trouble(self) -> str | None:
        """One line about the records that could not be written, if any."""
        if not self.write_errors:
            return None
        return (f"scaling log {self.path or '(stream)'} is incomplete: {self.write_errors} record(s) could not "
                f"be written ({self.first_error}); the summary above counts them all")

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                self._failed(exc)
        self._fd = None
        self._stream = None


class LogError(ValueError):
    """A scaling log that cannot be read, with the file and line at fault."""


def paths_for(workflow: Path) -> tuple[Path, Path]:
    """(run directory, latest scaling log) next to the makeflow logs of ``workflow``; the
    latest log is a link to the newest of the run directory's ``runs/run-NNN.scaling.jsonl``
    (``hta makeflow`` writes them, ``hta simulate`` reads a run's figures from them)."""
    wf = workflow.resolve()
    return wf.parent / f"{wf.name}.hta", wf.parent / f"{wf.name}.scaling.jsonl"


def _kind(data: object) -> str:
    kind = data.get("kind") if isinstance(data, dict) else None
    return f"'{kind}' " if isinstance(kind, str) else ""


def _first_problem(exc: ValidationError) -> str:
    """The first thing wrong with a record, in a few words ("started_at: field required"),
    and how many more: a pydantic dump names the union's every member."""
    errors = exc.errors()
    if not errors:
        return "not a record"
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ())]
    where = ".".join(loc[1:] if len(loc) > 1 else loc)  # (loc[0] is the union member's tag)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    msg = str(first.get("msg", "invalid"))
    return f"{where + ': ' if where else ''}{msg[:1].lower()}{msg[1:]}{more}"  # (the user's own words kept)


#: what to give ``hta report`` instead of a file that is no scaling log
GIVE_A_LOG = "give a scaling log (WORKFLOW.hta/runs/*.jsonl) or a workflow"

#: records written in time order, by the controller's one clock (worker and node records
#: may come late or early: a backend's adopted job, a node's hold that ends after the run)
_IN_TIME_ORDER = ("observation", "decision", "end")


def _read_file(p: Path) -> str:
    """The text of ``p``: a named pipe or a device (read forever) is refused before it is
    opened (:func:`hta.files.unreadable_kind`)."""
    kind = unreadable_kind(p)
    if kind is not None:
        raise LogError(f"{p}: not a regular file ({kind}): {GIVE_A_LOG}")
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LogError(f"{p}: cannot read it ({exc.strerror or exc})") from None


def _non_finite(data: object, where: str = "") -> tuple[str, str] | None:
    """Where in a record a number is NaN or infinite (``supply_cores``), and what it is, if
    anywhere: Python's json reads ``NaN``, ``Infinity`` and ``1e999``; HTA never writes them
    (pydantic writes a NaN as null)."""
    if isinstance(data, float) and not math.isfinite(data):
        return where or "value", "NaN" if math.isnan(data) else ("Infinity" if data > 0 else "-Infinity")
    items: list[tuple[object, object]] = []
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = list(enumerate(data))
    for k, v in items:
        found = _non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


def _not_a_log(p: Path, n: int, text: str, exc: json.JSONDecodeError) -> str:
    """Why a file whose first record is not JSON is no scaling log (a WfCommons instance,
    a JSON document over several lines, is JSON: says so)."""
    try:
        json.loads(text)
    except ValueError:
        return f"{p}:{n}: not JSON ({exc.msg}): not an HTA scaling log; {GIVE_A_LOG}"
    return f"{p}: a JSON document over several lines, not an HTA scaling log (a JSON record a line): {GIVE_A_LOG}"


def read_records(path: Path | str) -> tuple[list[BaseModel], list[str]]:
    """Read a scaling log; returns its records and the problems met.

    A truncated last line (a run still writing, or killed) is reported as a
    problem and the records before it are kept; so are records whose time
    ``t`` is negative or goes back (a clock set back while the run ran): they
    are left out, with one problem naming the first. A file that is missing,
    empty, not a regular file, of another format, or that holds a record with
    a NaN or infinite number or a second ``run`` record (two logs joined)
    raises :class:`LogError`.
    """
    p = Path(path)
    if not p.exists():
        raise LogError(f"{p}: no such file")
    if p.is_dir():
        raise LogError(f"{p}: is a directory: give a scaling log file (e.g. WORKFLOW.scaling.jsonl)")
    text = _read_file(p)
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise LogError(f"{p}: empty log (no records)")
    records: list[BaseModel] = []
    problems: list[str] = []
    skipped: list[tuple[int, str]] = []  # records out of time, left out: line, why
    clock_t, clock_n = 0.0, 0  # the latest time of the records in time order, and its line
    last = len(lines)
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == last and records:  # (a first line that is not JSON is not a scaling log)
                problems.append(f"{p}:{n}: truncated last line ignored ({exc.msg})")
                break
            if not records:
                raise LogError(_not_a_log(p, n, text, exc)) from None
            raise LogError(f"{p}:{n}: not JSON ({exc.msg}); is this an HTA scaling log?") from None
        if not records and (not isinstance(data, dict) or data.get("kind") != "run"):
            raise LogError(f"{p}:{n}: not an HTA scaling log (first record must be kind 'run'): {GIVE_A_LOG}")
        if records and isinstance(data, dict) and data.get("kind") == "run":
            raise LogError(f"{p}:{n}: a second 'run' record: two runs in one file (logs joined?): split it before "
                           f"line {n}; each run has its own log, WORKFLOW.hta/runs/*.jsonl")
        bad = _non_finite(data)
        if bad:
            raise LogError(f"{p}:{n}: bad {_kind(data)}record: {bad[0]} is {bad[1]}, not a number HTA writes: "
                           f"the log is damaged; correct or delete line {n}")
        try:
            record = RECORD.validate_python(data)
        except ValidationError as exc:
            raise LogError(f"{p}:{n}: bad {_kind(data)}record: {_first_problem(exc)}; is this an HTA scaling "
                           f"log?") from None
        t = getattr(record, "t", 0.0)
        kind = getattr(record, "kind", "")
        if kind != "run" and t < 0:
            skipped.append((n, f"'{kind}' record at t {t:g}, before the run started"))
            continue
        if kind in _IN_TIME_ORDER:
            if t < clock_t:
                skipped.append((n, f"'{kind}' record at t {t:g} goes back in time (line {clock_n} is at "
                                   f"t {clock_t:g})"))
                continue
            clock_t, clock_n = t, n
        records.append(record)
    if skipped and len(records) == 1:  # (the run record alone: no time in the log can be trusted)
        n, why = skipped[0]
        raise LogError(f"{p}:{n}: {why}, and every record after it is out of time order too: nothing to "
                       f"report; times are seconds since the run started (0 and up): correct them, or give another log")
    if skipped:
        (n, why), others = skipped[0], [m for m, _ in skipped[1:]]
        more = f", and {len(others)} more line(s) out of time order, up to line {others[-1]}" if others else ""
        problems.insert(0, f"{p}:{n}: {why}: left out of the report{more} (a clock set back during the run, "
                           f"or an edited log?)")
    return records, problems


def measured_categories(path: Path) -> dict[str, CategoryModel]:
    """The categories a run measured, as its log last wrote them (``hta makeflow
    --runtime-prior``). ``path``: the log, or a workflow, for the latest run of it (its
    ``WORKFLOW.scaling.jsonl``). :class:`LogError` if there is none to read."""
    try:
        records, _ = read_records(path)
    except LogError as exc:
        if not path.is_file() or "not an HTA scaling log" not in str(exc):
            raise  # (a log, broken: what is wrong with it)
        latest = paths_for(path)[1]
        if not latest.exists():
            raise LogError(f"{path}: not a scaling log, nor a workflow HTA has run (no {latest.name} beside it): "
                           f"give an earlier run's log (WORKFLOW.hta/runs/run-NNN.scaling.jsonl)") from None
        path = latest  # a workflow: its latest run's
        records, _ = read_records(path)
    written = [r for r in records if isinstance(r, CategoriesRecord)]
    measured = {n: m for n, m in (written[-1].categories if written else {}).items() if m.measured}
    if not measured:
        raise LogError(f"{path}: no task category was measured in that run (no task ended): give the log of a run "
                       f"whose tasks ran")
    return measured
