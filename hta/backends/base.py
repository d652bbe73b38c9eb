"""The mechanism side: a :class:`WorkerBackend` makes workers exist or go away.

A backend never decides anything. It starts workers of a given shape, tells which master
connection (``ip:port``) is which of its workers, reports the life of each worker
(requested → connected → drained/lost) with the preparation latency it measured, and
removes workers: ``drain`` only those the master shows idle, ``remove`` (for rivals that
really do it) regardless. Every method a caller may use is declared here; the optional
ones have a default that says "this backend cannot".
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from hta.model import PendingWorker, Resources
from hta.scaling_log import WorkerRecord
from workqueue_bridge.snapshot import MasterSnapshot

#: observation fields a backend may be able to fill, beyond what the master tells;
#: a policy names the ones it needs in ``Policy.needs``
CPU_UTILIZATION = "cpu_utilization"


class WorkerBackend(ABC):
    name: str = "backend"
    #: the optional observation fields this backend fills (e.g. ``{CPU_UTILIZATION}``)
    signals: frozenset[str] = frozenset()
    #: why a signal this backend could fill is missing here (for the policy's refusal)
    signals_why: str = ""
    #: the master's port when the user names none (0: any free port)
    default_port: int = 0

    @property
    def fatal(self) -> str | None:
        """Set once no worker can ever start: one line naming the cause and the fix. The run
        ends with it."""
        return None

    @abstractmethod
    async def start(self, master_host: str, master_port: int) -> None:
        """Get ready to start workers that connect to this master."""

    @abstractmethod
    async def request(self, n: int, shape: Resources, now: float) -> list[str]:
        """Ask for ``n`` workers; returns their ids at once (they connect later)."""

    @abstractmethod
    async def refresh(self, snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        """Match the master's workers to ours; return the events since last time."""

    @abstractmethod
    def worker_ids(self) -> dict[str, str]:
        """Master address ``ip:port`` → worker id, for connected workers."""

    @abstractmethod
    def retired(self) -> set[str]:
        """Master addresses of workers this backend stopped: the master may list them for a
        while after they are gone; observations leave them out."""

    @abstractmethod
    def pending(self) -> list[PendingWorker]:
        """Workers asked for that have not connected yet."""

    @abstractmethod
    async def drain(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        """Stop the named workers that are idle in ``snap``; skip the others."""

    @abstractmethod
    async def remove(self, ids: list[str], snap: MasterSnapshot, now: float) -> list[WorkerRecord]:
        """Stop the named workers whether busy or not (their tasks go back to the queue)."""

    @abstractmethod
    async def stop_all(self, now: float) -> list[WorkerRecord]:
        """Stop every worker and cancel every request; leave nothing running."""

    def job_ceiling(self) -> tuple[float, str] | None:
        """The longest a worker may live (a batch job's time limit), and who says so; None:
        no limit."""
        return None

    def worker_ends(self) -> dict[str, float]:
        """Connected workers whose job ends at a time limit: when each stops taking tasks (its
        last call, :mod:`hta.node.last_call`), in controller time, by worker id."""
        return {}

    def configure_shape(self, shape: Resources) -> None:
        """The workers' shape as the user configured it (--worker-cores, --worker-memory,
        --worker-disk), told once before any :meth:`request`: a policy may ask for a part of it
        (a third: HTA's learned worker shape), and a line about a worker's shape names what
        the user gave and the cut the policy made."""
        return None

    def ask_job_time(self, seconds: float | None) -> None:
        """How long the next workers' jobs should live (the policy's choice, within
        :meth:`job_ceiling`; None: the backend's default)."""
        return None

    def expect_tasks(self, runtimes_s: dict[str, float]) -> None:
        """The longest each category's tasks have run so far (the controller's learning),
        for workers that end at a time limit: they take no task they cannot finish."""
        return None

    async def cpu_utilization(self) -> dict[str, float] | None:
        """Fraction of each connected worker's cores its processes keep busy, by worker id
        (what Kubernetes' HPA averages); None if this backend cannot measure it."""
        return None

    def worker_nodes(self) -> dict[str, str]:
        """The node each connected worker runs on, by worker id, where the backend knows it
        (several workers may share one): what a drain must empty to give a node back."""
        return {}

    def node_hold_s(self) -> float | None:
        """How long a node stays after its last worker left, as this backend has seen it (the
        node autoscaler's hold: the cluster-autoscaler's 10 min, Karpenter's 0), or None if
        it cannot tell or has not seen one empty yet. A worker bought back within the hold
        lands on the node in seconds; after it, it pays a whole latency."""
        return None

    def holding_back(self) -> str | None:
        """Why the last :meth:`request` started fewer workers than asked (a quota, pods that
        cannot be scheduled), in a few words; None if it did not, or cannot tell."""
        return None

    def task_peak_memory_mb(self, task_id: int) -> float | None:
        """The most memory the processes of the master's task ``task_id`` were seen using, or
        None if this backend does not sample tasks (a task the resource monitor stopped has no
        summary left to tell)."""
        return None
