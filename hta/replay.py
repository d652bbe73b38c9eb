"""Record what a live controller read, and play it back through a fresh one.

``hta makeflow --record FILE`` wraps each of the controller's dependencies
(master, backend, monitor summaries, DAG lookahead, clock) so that every
answer it gives is written to FILE (JSON Lines, one answer per line, in call
order). :func:`replay` builds a new :class:`~hta.controller.Controller` with
the same configuration and policy over dependencies that give those answers
back in the same order, and steps it as often as the live one stepped. The
controller is deterministic given its inputs, so it must make the decisions
the live run logged; a call the tape does not hold at that point (the
controller asked something else, e.g. for workers the live one did not
request) raises :class:`ReplayDiverged`.

It is how the claim "the simulator runs production's control path" stays
checked against a real run, and how a surprising decision in a real run can
be studied later with a debugger.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from hta.backends.base import WorkerBackend
from hta.controller import Controller, ControllerConfig
from hta.model import PendingWorker, Resources, UpcomingTasks
from hta.policies.base import Policy
from hta.scaling_log import DecisionRecord, ScalingLogWriter, WorkerRecord
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.monitor_summaries import TaskSummary
from workqueue_bridge.snapshot import MasterSnapshot


class ReplayDiverged(AssertionError):
    """The replayed controller asked for something the live one did not, at that point."""


class ReplayedFailure(RuntimeError):
    """A call that failed in the live run fails again at the same point of the replay."""


class Tape:
    """The answers, in call order (writing: one JSON line each, flushed)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._fh: IO[str] | None = open(self.path, "w", encoding="utf-8")

    def put(self, call: str, value: Any) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps({"call": call, "value": value}, separators=(",", ":")) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _dump(models: list) -> list:
    return [m.model_dump(mode="json") for m in models]


# -- recording -----------------------------------------------------------------------

#: a call that raised is written as its name plus this mark, with the error's text
FAILED = "!"


class RecordingMaster:
    def __init__(self, inner, tape: Tape):
        self.inner, self.tape = inner, tape
        if hasattr(inner, "full_tasks"):  # a replay reads the waiting tasks from ``tasks``
            inner.full_tasks = True

    async def snapshot(self, now: float) -> MasterSnapshot:
        try:
            snap = await self.inner.snapshot(now)
        except Exception as exc:  # the controller reports and retries; the replay must too
            self.tape.put("snapshot" + FAILED, f"{type(exc).__name__}: {exc}")
            raise
        self.tape.put("snapshot", snap.model_dump(mode="json"))
        return snap


class RecordingSummaries:
    def __init__(self, inner, tape: Tape):
        self.inner, self.tape = inner, tape

    def poll(self) -> list[TaskSummary]:
        new = self.inner.poll()
        self.tape.put("summaries", _dump(new))
        return new


class RecordingUpcoming:
    def __init__(self, inner, tape: Tape):
        self.inner, self.tape = inner, tape

    def __call__(self, waiting_group_of: Mapping[int, str], running: set[int]) -> list[UpcomingTasks]:
        ups = self.inner(waiting_group_of, running)
        self.tape.put("upcoming", _dump(ups))
        return ups


class RecordingClock:
    """The control path's clock, each read written down. Observers (the live status page,
    the panel's error lines) read :attr:`unrecorded` instead (``Controller.now``): their
    reads come when a person or a failure makes them, and a replay plays back only the
    control path's (a CI run's panel logged a failed step's time, two clock reads the
    replay never asked for, and the replay diverged there)."""

    def __init__(self, inner: Callable[[], float], tape: Tape):
        self.inner, self.tape = inner, tape

    @property
    def unrecorded(self) -> Callable[[], float]:
        return self.inner

    def __call__(self) -> float:
        t = self.inner()
        self.tape.put("clock", t)
        return t


class RecordingBackend(WorkerBackend):
    """Passes every call to the real backend and writes down what the controller reads."""

    def __init__(self, inner: WorkerBackend, tape: Tape):
        self.inner, self.tape = inner, tape
        self.name, self.signals = inner.name, inner.signals
        self.signals_why, self.default_port = inner.signals_why, inner.default_port

    @property
    def fatal(self) -> str | None:
        return self.inner.fatal

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        return self.inner.task_peak_memory_mb(task_id)

    def holding_back(self) -> str | None:
        return self.inner.holding_back()

    async def start(self, master_host: str, master_port: int) -> None:
        await self.inner.start(master_host, master_port)

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        return await self.inner.stop_all(now)

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        ids = await self.inner.request(n, shape, now)
        self.tape.put("request", ids)
        return ids

    async def refresh(self, snap, now: float) -> list[WorkerRecord]:
        return self._events("refresh", await self.inner.refresh(snap, now))

    async def drain(self, ids: list[str], snap, now: float) -> list[WorkerRecord]:
        return self._events("drain", await self.inner.drain(ids, snap, now))

    async def remove(self, ids: list[str], snap, now: float) -> list[WorkerRecord]:
        return self._events("remove", await self.inner.remove(ids, snap, now))

    def _events(self, call: str, events: list[WorkerRecord]) -> list[WorkerRecord]:
        self.tape.put(call, _dump(events))
        return events

    def worker_ids(self) -> dict[str, str]:
        out = self.inner.worker_ids()
        self.tape.put("worker_ids", out)
        return out

    def retired(self) -> set[str]:
        out = self.inner.retired()
        self.tape.put("retired", sorted(out))
        return out

    def pending(self) -> list[PendingWorker]:
        out = self.inner.pending()
        self.tape.put("pending", _dump(out))
        return out

    async def cpu_utilization(self) -> dict[str, float] | None:
        out = await self.inner.cpu_utilization()
        self.tape.put("cpu_utilization", out)
        return out

    def node_hold_s(self) -> float | None:
        out = self.inner.node_hold_s()
        self.tape.put("node_hold_s", out)
        return out

    def worker_nodes(self) -> dict[str, str]:
        out = self.inner.worker_nodes()
        self.tape.put("worker_nodes", out)
        return out

    def job_ceiling(self) -> tuple[float, str] | None:
        out = self.inner.job_ceiling()
        self.tape.put("job_ceiling", out)
        return out

    def worker_ends(self) -> dict[str, float]:
        out = self.inner.worker_ends()
        self.tape.put("worker_ends", out)
        return out

    def configure_shape(self, shape: Resources) -> None:
        self.inner.configure_shape(shape)

    def ask_job_time(self, seconds: float | None) -> None:
        self.inner.ask_job_time(seconds)

    def expect_tasks(self, runtimes_s: dict[str, float]) -> None:
        self.inner.expect_tasks(runtimes_s)


def record_header(tape: Tape, config: ControllerConfig, policy: Policy, epoch: float) -> None:
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields["worker_shape"] = config.worker_shape.model_dump()
    tape.put("start", {"config": fields, "policy": policy.name, "epoch": epoch})


# -- playing back ----------------------------------------------------------------------

class PlayedTape:
    def __init__(self, path: Path | str):
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        self.entries = [json.loads(line) for line in lines if line.strip()]
        self.pos = 0

    def take(self, call: str) -> Any:
        if self.pos >= len(self.entries):
            raise ReplayDiverged(f"the replay asked for {call!r} after the tape's end")
        entry = self.entries[self.pos]
        if entry["call"] == call + FAILED:
            self.pos += 1
            raise ReplayedFailure(entry["value"])
        if entry["call"] != call:
            raise ReplayDiverged(f"entry {self.pos}: the replay asked for {call!r}, the live run for "
                                 f"{entry['call']!r}")
        self.pos += 1
        return entry["value"]

    def next_call(self) -> str | None:
        return self.entries[self.pos]["call"] if self.pos < len(self.entries) else None


class _Played:
    """The controller's master, summaries, lookahead and clock, answering from the tape."""

    def __init__(self, tape: PlayedTape):
        self.tape = tape

    async def snapshot(self, now: float) -> MasterSnapshot:
        return MasterSnapshot.model_validate(self.tape.take("snapshot"))

    def poll(self) -> list[TaskSummary]:
        return [TaskSummary.model_validate(s) for s in self.tape.take("summaries")]

    def upcoming(self, waiting_group_of: Mapping[int, str], running: set[int]) -> list[UpcomingTasks]:
        return [UpcomingTasks.model_validate(u) for u in self.tape.take("upcoming")]

    def clock(self) -> float:
        return float(self.tape.take("clock"))



class _PlayedBackend(WorkerBackend):
    """The controller's backend, answering from the tape."""

    name = "replayed"
    signals: frozenset[str] = frozenset({"cpu_utilization"})

    def __init__(self, tape: PlayedTape):
        self.tape = tape

    async def start(self, master_host: str, master_port: int) -> None:
        return None

    async def stop_all(self, now: float) -> list[WorkerRecord]:
        return []

    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        return list(self.tape.take("request"))

    async def refresh(self, snap, now: float) -> list[WorkerRecord]:
        return [WorkerRecord.model_validate(e) for e in self.tape.take("refresh")]

    async def drain(self, ids, snap, now: float) -> list[WorkerRecord]:
        return [WorkerRecord.model_validate(e) for e in self.tape.take("drain")]

    async def remove(self, ids, snap, now: float) -> list[WorkerRecord]:
        return [WorkerRecord.model_validate(e) for e in self.tape.take("remove")]

    def worker_ids(self) -> dict[str, str]:
        return dict(self.tape.take("worker_ids"))

    def retired(self) -> set[str]:
        return set(self.tape.take("retired"))

    def pending(self) -> list[PendingWorker]:
        return [PendingWorker.model_validate(p) for p in self.tape.take("pending")]

    async def cpu_utilization(self) -> dict[str, float] | None:
        return self.tape.take("cpu_utilization")

    def node_hold_s(self) -> float | None:
        # (a recording made before backends told it has none: what they told then)
        return self.tape.take("node_hold_s") if self.tape.next_call() == "node_hold_s" else None

    def worker_nodes(self) -> dict[str, str]:
        return dict(self.tape.take("worker_nodes")) if self.tape.next_call() == "worker_nodes" else {}

    def job_ceiling(self) -> tuple[float, str] | None:
        # (a recording made before backends told it: no time limit)
        if self.tape.next_call() != "job_ceiling":
            return None
        out = self.tape.take("job_ceiling")
        return None if out is None else (float(out[0]), str(out[1]))

    def worker_ends(self) -> dict[str, float]:
        return dict(self.tape.take("worker_ends")) if self.tape.next_call() == "worker_ends" else {}


def replay(path: Path | str, policy: Policy, lookahead: bool = True) -> list[DecisionRecord]:
    """Play a recorded run back through a fresh controller and ``policy`` (made as the live
    one was); returns the decisions it made. Raises :class:`ReplayDiverged` if it asked
    for anything the live controller did not."""
    from hta.sim.run import run_now

    tape = PlayedTape(path)
    head = tape.take("start")
    config = ControllerConfig(**{**head["config"], "worker_shape": Resources(**head["config"]["worker_shape"])})
    played = _Played(tape)
    controller = Controller(master=played, backend=_PlayedBackend(tape), policy=policy, learner=CategoryLearner(),
                            summaries=played, scaling_log=ScalingLogWriter(), config=config,
                            epoch=head["epoch"], upcoming=played.upcoming if lookahead else None,
                            clock=played.clock)
    while tape.next_call() is not None:
        try:
            run_now(controller.step())
        except ReplayedFailure:
            pass  # the live loop logged it and stepped again
    return controller.decisions
