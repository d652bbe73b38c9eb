"""Effective capacity: what this worker really has, not what the host has.

Programs in containers see the host's CPUs and memory (Huang et al., HPDC
2019, "adaptive resource views"). A worker that advertised those would be
sent more tasks than its cgroup lets it run. So:

    cores  = min(CPU quota / period, |cpuset|, ⌈shares · host CPUs⌉)   (whole cores, at least 1)
    memory = the hard limit (memory.limit_in_bytes, memory.max), never above the host's
    soft   = memory.soft_limit_in_bytes / memory.high, reported beside it
    disk   = 90 % of the free space of the work directory's filesystem (see DISK_HEADROOM)

for cgroup v1 (cpu.cfs_quota_us, cpu.cfs_period_us, cpuset.cpus, cpu.shares)
and v2 (cpu.max, cpuset.cpus.effective, cpu.weight). Shares follow the
Kubernetes convention (1024 per requested CPU; v2 weight mapped back to
shares), and a cgroup left at the default share says nothing. Every value
comes with where it came from.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from workqueue_bridge.resources import whole_cores

UNLIMITED_BYTES = 2**60

#: share of the free disk not promised to the master. ``work_queue_worker`` rechecks its
#: ``--disk`` promise against the filesystem's free space (plus its own use) every 5 s
#: and quits when it falls short by even one MB; a node's filesystem is shared (container
#: logs, images, other pods), so promising all of it made a pod's worker quit at once
#: when anything else wrote a file (seen in CI: "73765 < 73764 MB")
DISK_HEADROOM = 0.10


@dataclass
class Capacity:
    cores: int
    memory_mb: int
    disk_mb: int
    soft_memory_mb: int | None = None
    sources: dict[str, str] = field(default_factory=dict)


def parse_cpuset(text: str) -> set[int]:
    """``"0-3,8,10-11"`` → {0, 1, 2, 3, 8, 10, 11}."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        else:
            cpus.add(int(part))
    return cpus


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def own_cgroups(proc_self_cgroup: Path) -> dict[str, str]:
    """controller → path from /proc/self/cgroup (``""`` is the v2 unified hierarchy)."""
    out = {}
    for line in (_read(proc_self_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _dir(root: Path, sub: str, path: str) -> Path:
    """The cgroup directory; in a container the cgroup is often mounted at the root itself."""
    full = root / sub / path.lstrip("/") if sub else root / path.lstrip("/")
    return full if full.is_dir() else (root / sub if sub else root)


def cgroup_dir(controller: str, root: Path = Path("/sys/fs/cgroup"),
               proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> Path:
    """This process's cgroup folder for ``controller`` (``""``: the v2 unified hierarchy)."""
    return _dir(root, controller, own_cgroups(proc_self_cgroup).get(controller, "/"))


def host_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def effective_capacity(
    root: Path = Path("/sys/fs/cgroup"),
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    host_cpus: int | None = None,
    host_mem_mb: int | None = None,
    workdir: Path = Path("."),
) -> Capacity:
    host_cpus = host_cpus or os.cpu_count() or 1
    host_mem_mb = host_mem_mb or host_memory_mb()
    groups = own_cgroups(proc_self_cgroup)
    v2 = (root / "cgroup.controllers").exists() and not (root / "cpu").is_dir()
    src: dict[str, str] = {}
    limits: list[tuple[float, str]] = [(float(host_cpus), f"host CPUs ({host_cpus})")]

    if v2:
        d = _dir(root, "", groups.get("", "/"))
        cpu_max = _read(d / "cpu.max")
        if cpu_max and not cpu_max.startswith("max"):
            quota, period = cpu_max.split()[:2]
            limits.append((int(quota) / int(period), f"{d / 'cpu.max'} ({cpu_max})"))
        cs = _read(d / "cpuset.cpus.effective") or _read(d / "cpuset.cpus")
        if cs:
            limits.append((float(len(parse_cpuset(cs))), f"{d / 'cpuset.cpus.effective'} ({cs})"))
        w = _read(d / "cpu.weight")
        if w and int(w) != 100:
            shares = 2 + (int(w) - 1) * 262142 / 9999
            limits.append((float(math.ceil(shares / 1024 - 1e-9)), f"{d / 'cpu.weight'} ({w})"))
        mem_dir = d
        hard, soft = _read(d / "memory.max"), _read(d / "memory.high")
        hard_name, soft_name = "memory.max", "memory.high"
    else:
        cpu = _dir(root, "cpu", groups.get("cpu", "/"))
        q, p = _read(cpu / "cpu.cfs_quota_us"), _read(cpu / "cpu.cfs_period_us")
        if q and p and int(q) > 0:
            limits.append((int(q) / int(p), f"{cpu / 'cpu.cfs_quota_us'} ({q}/{p})"))
        cset = _dir(root, "cpuset", groups.get("cpuset", "/"))
        cs = _read(cset / "cpuset.effective_cpus") or _read(cset / "cpuset.cpus")
        if cs:
            limits.append((float(len(parse_cpuset(cs))), f"{cset / 'cpuset.cpus'} ({cs})"))
        sh = _read(cpu / "cpu.shares")
        if sh and int(sh) != 1024:
            limits.append((float(math.ceil(int(sh) / 1024 - 1e-9)), f"{cpu / 'cpu.shares'} ({sh})"))
        mem_dir = _dir(root, "memory", groups.get("memory", "/"))
        hard, soft = _read(mem_dir / "memory.limit_in_bytes"), _read(mem_dir / "memory.soft_limit_in_bytes")
        hard_name, soft_name = "memory.limit_in_bytes", "memory.soft_limit_in_bytes"

    value, why = min(limits, key=lambda x: x[0])
    cores = whole_cores(value)
    src["cores"] = why

    memory_mb = host_mem_mb
    src["memory"] = f"host memory ({host_mem_mb} MB)"
    if hard and hard != "max" and int(hard) < UNLIMITED_BYTES and int(hard) // 2**20 < host_mem_mb:
        memory_mb = int(hard) // 2**20
        src["memory"] = f"{mem_dir / hard_name} ({hard})"
    soft_mb = None
    if soft and soft != "max" and int(soft) < UNLIMITED_BYTES:
        soft_mb = int(soft) // 2**20
        src["soft_memory"] = f"{mem_dir / soft_name} ({soft})"

    free_mb = shutil.disk_usage(workdir).free // 2**20
    disk_mb = int(free_mb * (1 - DISK_HEADROOM))
    src["disk"] = f"{1 - DISK_HEADROOM:.0%} of the free space of {Path(workdir).resolve()} ({free_mb} MB)"
    return Capacity(cores, memory_mb, disk_mb, soft_mb, src)
