"""A simulator workload as a real Makeflow, compressed ``k`` times in time.

The same generators and seeds the simulator uses (``blast-3stage``,
``io-bound``, any WfFormat instance) become a Makeflow file in which every
task is a real process: ``hold.sh`` sleeps the task's runtime ÷ k, holding
the cores and memory it declares (its category's ``CORES``, ``MEMORY``;
``DISK`` 10 MB), then writes its output, ``<task>.out``: its name and the
md5 of its parents' outputs. Makeflow's dependencies, Work Queue's transfers
and dispatch and the resource monitor are all real; the outputs can be
checked byte for byte (:func:`expected_outputs`).

    python3 workflows/replay/generate.py blast-3stage --seed 0 --k 10 DIR
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DISK_MB = 10


def _file(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", task_id) + ".out"


def write_makeflow(workload, k: float, directory: Path) -> Path:
    """Write ``Makeflow`` and ``hold.sh`` into ``directory``; returns the Makeflow's path."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "hold.sh", directory / "hold.sh")
    files = {t.id: _file(t.id) for t in workload.tasks}
    lines = [f"# {workload.name}: {len(workload.tasks)} tasks, runtimes compressed {k:g}x (workflows/replay)"]
    last = None
    for t in workload.tasks:
        declared = (t.category, t.cores, int(t.memory_mb))
        if declared != last:
            lines += ["", f'CATEGORY="{t.category}"', f"CORES={t.cores}", f"MEMORY={int(t.memory_mb)}",
                      f"DISK={DISK_MB}"]
            last = declared
        parents = " ".join(files[p] for p in t.parents)
        lines += ["", f"{files[t.id]}: hold.sh {parents}".rstrip(),
                  f"\t./hold.sh {t.runtime_s / k:.3f} {files[t.id]} {parents}".rstrip()]
    path = directory / "Makeflow"
    path.write_text("\n".join(lines) + "\n")
    return path


def expected_outputs(workload) -> dict[str, bytes]:
    """What every output must hold after a correct run, by file name."""
    files = {t.id: _file(t.id) for t in workload.tasks}
    tasks = workload.by_id()
    out: dict[str, bytes] = {}

    def content(tid: str) -> bytes:
        if files[tid] not in out:
            parents = b"".join(content(p) for p in tasks[tid].parents)
            out[files[tid]] = f"{files[tid]}\n{hashlib.md5(parents).hexdigest()}  -\n".encode()
        return out[files[tid]]

    for t in workload.tasks:  # in file order, so parents are always done first for generated workloads
        content(t.id)
    return out


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE.parent.parent))
    from hta.sim.workload import load_workload

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", help="blast-3stage, io-bound or a WfFormat JSON file")
    ap.add_argument("directory", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=float, default=10.0, help="time compression (runtimes ÷ k)")
    a = ap.parse_args(argv)
    print(write_makeflow(load_workload(a.workload, a.seed), a.k, a.directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
