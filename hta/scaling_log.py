"""The scaling log: JSON Lines, one record per observation, decision and
worker event, written by ``hta makeflow`` and ``hta simulate`` alike and read
by ``hta report``.

Every record has ``kind`` and ``t`` (seconds since the run started). The first
record is ``run`` (what ran, with ``started_at`` in Unix time), the last one
``end`` (absent while the run is in progress).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, IO, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from hta.model import CategoryModel, Resources

FORMAT = "hta-scaling-log/1"


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
    #: tasks the worker was running when it went away (only ``removed``/``lost``)
    tasks_lost: int = 0


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


Record = Annotated[
    Union[RunRecord, ObservationRecord, DecisionRecord, WorkerRecord, CategoriesRecord, EndRecord],
    Field(discriminator="kind"),
]
RECORD = TypeAdapter(Record)


class ScalingLogWriter:
    """Appends records, one line each, flushed so a live run can be read."""

    def __init__(self, path: Path | str | None = None, stream: IO[str] | None = None):
        self.path = Path(path) if path else None
        self._fh: IO[str] | None = stream
        #: every record written, for the end-of-run summary
        self.records: list[BaseModel] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8")

    def write(self, record: BaseModel) -> None:
        self.records.append(record)
        if self._fh is None:
            return
        self._fh.write(record.model_dump_json(exclude_defaults=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None and self.path is not None:
            self._fh.close()
        self._fh = None


class LogError(ValueError):
    """A scaling log that cannot be read, with the file and line at fault."""


def read_records(path: Path | str) -> tuple[list[BaseModel], list[str]]:
    """Read a scaling log; returns its records and the problems met.

    A truncated last line (a run still writing, or killed) is reported as a
    problem and the records before it are kept. A file that is missing, empty
    or of another format raises :class:`LogError`.
    """
    p = Path(path)
    if not p.exists():
        raise LogError(f"{p}: no such file")
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    if not any(line.strip() for line in lines):
        raise LogError(f"{p}: empty log (no records)")
    records: list[BaseModel] = []
    problems: list[str] = []
    last = len(lines)
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == last:
                problems.append(f"{p}:{n}: truncated last line ignored ({exc.msg})")
                break
            raise LogError(f"{p}:{n}: not JSON ({exc.msg}); is this an HTA scaling log?") from None
        if n == 1 and (not isinstance(data, dict) or data.get("kind") != "run"):
            raise LogError(f"{p}:1: not an HTA scaling log (first record must be kind 'run')")
        try:
            records.append(RECORD.validate_python(data))
        except Exception as exc:  # pydantic.ValidationError, with the first cause
            first = str(exc).splitlines()[0:3]
            raise LogError(f"{p}:{n}: bad record: {' '.join(first)}") from None
    return records, problems
