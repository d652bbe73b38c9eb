"""The master's queue as HTA reads it: waiting groups, running tasks, connected workers,
and the tasks the workflow's DAG has not released yet."""

from __future__ import annotations

from pydantic import BaseModel, Field

from workqueue_bridge.resources import Resources


class TaskGroup(BaseModel):
    """``count`` waiting tasks of one category, each asking ``request``.

    Groups are kept in task-id order, the master's submission order, oldest first (the
    master dispatches the newest first: :mod:`workqueue_bridge.dispatch`). A request of
    zero cores, memory and disk means "a whole worker", Work Queue's answer for a task that
    declares nothing.
    """

    category: str
    count: int
    request: Resources = Resources()
    #: names the group for DAG lookahead (an upcoming group may wait for it)
    id: str | None = None

    @property
    def whole_worker(self) -> bool:
        return self.request.declares_nothing


class RunningTask(BaseModel):
    task_id: int
    category: str
    allocation: Resources
    started_at: float
    worker: str | None = None
    #: it declared nothing, so Work Queue gave it a whole worker: ``allocation`` is the
    #: worker's size, not what the task uses
    whole_worker: bool = False


class WorkerInfo(BaseModel):
    """A worker connected to the master."""

    id: str
    capacity: Resources
    in_use: Resources = Resources()
    running: int = 0
    connected_at: float | None = None
    #: since when the worker has run nothing (None: busy, or unknown)
    idle_since: float | None = None
    #: fraction of the worker's cores its processes keep busy (for CPU-based rivals)
    cpu_utilization: float | None = None
    #: the workflow's shared inputs it holds in its cache: those of each category it ran a
    #: task of (:meth:`workqueue_bridge.dag.Dag.shared_inputs`; the master does not list a
    #: worker's cache, the tasks it ran tell it)
    cached_inputs: frozenset[str] = frozenset()

    @property
    def idle(self) -> bool:
        return self.running == 0

    @property
    def free(self) -> Resources:
        return self.capacity.minus(self.in_use)


class UpcomingTasks(BaseModel):
    """Tasks the workflow DAG has not released yet (Makeflow releases a task when all its
    parents completed).

    ``after`` names what they wait for: ids of waiting groups or of other upcoming groups,
    or ``"task:<id>"`` for a running task.
    """

    id: str
    category: str
    count: int
    request: Resources = Resources()
    after: list[str] = Field(default_factory=list)

    @property
    def whole_worker(self) -> bool:
        return self.request.declares_nothing
