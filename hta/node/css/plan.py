"""Analyse and plan: SBCC and CTBRA (Song, Yu & Lee, Appl. Sci. 2022).

SBCC (syscall-based container classification): a container whose futex
count since the last cleaning exceeds λ is IO-intensive, otherwise
CPU-intensive.

CTBRA (container-type-based resource allocation): when CPU containers exist,
the IO containers share μ cores and the CPU containers split the remaining
cores by Equal Allocation — N/M consecutive cores each, or core ``i mod N``
for the i-th container when there are more containers than cores. Without
CPU containers the IO containers share every core; without IO containers the
CPU containers split every core. On a machine with no more than μ cores the
IO share shrinks to leave CPU containers at least one core (the paper's
nodes always had more than μ).

That is the paper's ``partition``. CSS's default is ``confine``: the IO
containers are held to their μ cores as in CTBRA, the CPU containers keep every
core. Confining the futex-heavy tasks is what speeds them (waker and waiter on
one core wake each other without a cross-core interrupt); fencing the CPU tasks
off those cores only leaves the cores' idle time unused while the IO tasks wait.
On the paper's mix (2 ``stress-ng --futex`` beside 2 ``--cpu`` on 2 cores, 3
rounds with ``taskset``): the kernel 31.7 s, ``partition`` 28.5 s, ``confine``
27.1 s; and under ``partition`` the CPU tasks received a fifth less CPU time,
which CSS's guard refuses (``hta.node.css.guard``). With one class only,
``confine`` is the kernel's scheduling: there is nothing to separate.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["io", "cpu"]
#: how a plan places the classes: CTBRA's ``partition`` or the default ``confine``
PlanStyle = Literal["confine", "partition"]
PLAN_STYLES: tuple[PlanStyle, ...] = ("confine", "partition")


def classify(futex: dict[str, int], lam: float) -> dict[str, Kind]:
    """SBCC: ``io`` if the count exceeds λ."""
    return {c: ("io" if n > lam else "cpu") for c, n in futex.items()}


def equal_allocation(containers: list[str], cores: list[int]) -> dict[str, list[int]]:
    """Split ``cores`` among ``containers`` evenly (consecutive blocks), or one
    core each round-robin when containers outnumber cores."""
    n, m = len(cores), len(containers)
    if m == 0 or n == 0:
        return {}
    if m > n:
        return {c: [cores[i % n]] for i, c in enumerate(containers)}
    per, extra = divmod(n, m)
    out, start = {}, 0
    for i, c in enumerate(containers):
        k = per + (1 if i < extra else 0)
        out[c] = cores[start:start + k]
        start += k
    return out


def ctbra(kinds: dict[str, Kind], cores: list[int], mu: int = 2,
          style: PlanStyle = "partition") -> dict[str, list[int]]:
    """Cores for each container (sorted container ids give a stable plan)."""
    io = sorted(c for c, k in kinds.items() if k == "io")
    cpu = sorted(c for c, k in kinds.items() if k == "cpu")
    cores = sorted(cores)
    if not cpu:
        return {c: list(cores) for c in io}
    if not io:
        return {c: list(cores) for c in cpu} if style == "confine" else equal_allocation(cpu, cores)
    share = max(1, min(mu, len(cores) - 1)) if len(cores) > 1 else 1
    io_cores, cpu_cores = cores[:share], cores[share:] or cores[:1]
    plan = {c: list(io_cores) for c in io}
    if style == "confine":
        plan.update({c: list(cores) for c in cpu})
    else:
        plan.update(equal_allocation(cpu, cpu_cores))
    return plan
