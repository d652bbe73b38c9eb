"""Reader for the ``*.summary`` files ``makeflow --monitor=DIR`` writes, one per task.

Values are ``[value, "unit"]`` pairs. CCTools writes the task's command into
the JSON without escaping it properly (:mod:`workqueue_bridge.cctools_json`
repairs it).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from workqueue_bridge import cctools_json
from workqueue_bridge.status_json import clean_category


class TaskSummary(BaseModel):
    category: str
    command: str = ""
    exit_status: int | None = None
    exit_type: str = ""
    start: float | None = None  # Unix seconds
    end: float | None = None
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    cores: float = 0.0  # peak cores
    cores_avg: float = 0.0
    memory_mb: float = 0.0  # peak resident memory
    disk_mb: float = 0.0
    limits_exceeded: bool = False
    #: the resources whose limits were exceeded (when the summary names them)
    exceeded: list[str] = []
    #: the signal that ended the task (``exit_type`` "signal")
    signal: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_type in ("", "normal") and not self.exit_status


def _value(d: dict, key: str) -> float:
    v = d.get(key)
    if isinstance(v, list) and v:
        v = v[0]
    try:
        return float(v)  # type: ignore[arg-type]  # anything else is refused below
    except (TypeError, ValueError):
        return 0.0


def parse_summary(text: str) -> TaskSummary:
    """Parse one summary; raises ValueError if it is not (yet) complete JSON."""
    d = cctools_json.loads(text)
    if not isinstance(d, dict):
        raise ValueError("summary is not a JSON object")
    status = d.get("exit_status")
    over = d.get("limits_exceeded")
    sig = d.get("signal")
    return TaskSummary(
        category=clean_category(d.get("category")),
        command=str(d.get("command", "")),
        exit_status=int(status) if isinstance(status, (int, float)) else None,
        exit_type=str(d.get("exit_type", "")),
        start=_value(d, "start") or None,
        end=_value(d, "end") or None,
        wall_time_s=_value(d, "wall_time"),
        cpu_time_s=_value(d, "cpu_time"),
        cores=_value(d, "cores"),
        cores_avg=_value(d, "cores_avg"),
        memory_mb=_value(d, "memory"),
        disk_mb=_value(d, "disk"),
        limits_exceeded=bool(over),
        exceeded=sorted(over) if isinstance(over, dict) else [],
        signal=int(sig) if isinstance(sig, (int, float)) else None,
    )


class SummaryDirectory:
    """Yields each new summary in a monitor directory once, as it appears.

    A summary is a file per rule (``resource-rule-N.summary``) that makeflow writes again
    when a later run of the workflow runs the rule again: a file is new when its name, or
    its modification time and size, are (a rewritten one is read again, or a re-run would
    learn only what the run before measured). A file that does not parse yet (still being
    written) is tried again on the next poll, up to ``max_tries`` polls; then it is
    reported in ``broken``.
    """

    def __init__(self, path: Path | str, max_tries: int = 5):
        self.path = Path(path)
        self.max_tries = max_tries
        self._done: dict[str, tuple[int, int]] = {}
        self._tries: dict[str, int] = {}
        self.broken: list[str] = []

    def poll(self) -> list[TaskSummary]:
        if not self.path.is_dir():
            return []
        new = []
        for f in sorted(self.path.glob("*.summary")):
            try:
                st = f.stat()
            except OSError:
                continue
            version = (st.st_mtime_ns, st.st_size)
            if self._done.get(f.name) == version:
                continue
            try:
                new.append(parse_summary(f.read_text(errors="replace")))
                self._done[f.name] = version
                self._tries.pop(f.name, None)
            except (ValueError, OSError):
                n = self._tries[f.name] = self._tries.get(f.name, 0) + 1
                if n >= self.max_tries:
                    self._done[f.name] = version
                    self.broken.append(f.name)
        return new
