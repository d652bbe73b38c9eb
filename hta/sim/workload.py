"""Workloads for the simulator: WfCommons WfFormat instances and the built-in
generators (which write the same format).

A task's ``name`` is its category (``blast-3stage`` names them ``split``,
``align``, ``reduce``). Fields read, WfFormat 1.4 or 1.5:
``runtimeInSeconds`` (1.5) or ``runtime``; ``coreCount`` or ``cores``
(default 1); ``avgCPU`` in percent of its cores (default 100);
``memoryInBytes`` or ``memory`` (default 512 MB); ``parents``; the files a task
reads and writes with their sizes (1.5: ``inputFiles``/``outputFiles`` naming
``specification.files`` with ``sizeInBytes``; 1.4: a task's ``files`` with ``link``
and ``size`` in bytes), which the simulated master sends to a worker that has not
cached them yet, and brings back.
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CORES = 1
DEFAULT_AVG_CPU = 100.0
DEFAULT_MEMORY_MB = 512.0


@dataclass
class SimTask:
    id: str
    category: str
    runtime_s: float
    cores: int = DEFAULT_CORES
    memory_mb: float = DEFAULT_MEMORY_MB
    cpu_util: float = 1.0  # fraction of its cores it keeps busy
    parents: list[str] = field(default_factory=list)
    #: the files it reads: (name, MB); Work Queue sends each to a worker once, then caches it
    inputs: tuple[tuple[str, float], ...] = ()
    #: MB of the files it writes, brought back to the master when it ends
    output_mb: float = 0.0


@dataclass
class Workload:
    name: str
    tasks: list[SimTask]
    #: the tasks declare their cores and memory to Work Queue (a Makeflow with CORES and
    #: MEMORY per category), so each is given what it declares from the start; otherwise
    #: they declare nothing and a category's first tasks get a whole worker until the
    #: master has measured one
    declared: bool = False

    def by_id(self) -> dict[str, SimTask]:
        return {t.id: t for t in self.tasks}


#: the built-in BLAST's data (assumed; the thesis names no sizes): every align reads one
#: database and its own query chunk, and writes its hits
BLAST_DB_MB, BLAST_CHUNK_MB, BLAST_HITS_MB = 500.0, 1.0, 1.0


def blast_3stage(seed: int = 0, widths: tuple[int, ...] = (200, 34, 164), align_cores: int = 1) -> dict:
    """The thesis's 3-stage BLAST: per stage split → align × width → reduce;
    align ≈ 300 s ± 20 %, ``align_cores`` core(s), high CPU; split/reduce short. Every
    align reads the one database (``BLAST_DB_MB``) and its chunk; a reduce reads the hits."""
    rng = random.Random(seed)
    tasks, prev = [], None
    files = {"blast.db": BLAST_DB_MB}
    for s, w in enumerate(widths, start=1):
        split = f"split_{s}"
        chunks = [f"query_{s}_{i}" for i in range(w)]
        files.update({c: BLAST_CHUNK_MB for c in chunks})
        tasks.append(_wf(split, "split", rng.uniform(20, 30), 1, 90.0, 256, [prev] if prev else [],
                         [f"hits_{s - 1}"] if prev else [], chunks))
        files[f"hits_{s - 1}"] = BLAST_HITS_MB
        aligns = []
        for i in range(w):
            aid = f"align_{s}_{i}"
            aligns.append(aid)
            files[f"{aid}.hits"] = BLAST_HITS_MB
            tasks.append(_wf(aid, "align", 300 * rng.uniform(0.8, 1.2), align_cores, 95.0 * align_cores, 1024,
                             [split], ["blast.db", chunks[i]], [f"{aid}.hits"]))
        prev = f"reduce_{s}"
        tasks.append(_wf(prev, "reduce", rng.uniform(20, 30), 1, 90.0, 256, aligns,
                         [f"{a}.hits" for a in aligns], [f"hits_{s}"]))
    files[f"hits_{len(widths)}"] = BLAST_HITS_MB
    return _instance("blast-3stage" if align_cores == 1 else f"blast-3stage-{align_cores}core", tasks, files)


def blast_3stage_2core(seed: int = 0) -> dict:
    """BLAST with 2-core aligns: tasks that do not fit a third of a 3-core node (a guess
    that small pods hold never-measured tasks is wrong here)."""
    return blast_3stage(seed, align_cores=2)


def io_bound(seed: int = 0, n: int = 200) -> dict:
    """200 parallel ``dd``-like tasks: 1 core, ≈130 s, ≈15 % CPU."""
    rng = random.Random(seed)
    tasks = [_wf(f"dd_{i}", "dd", 130 * rng.uniform(0.9, 1.1), 1, 15.0, 256, []) for i in range(n)]
    return _instance("io-bound", tasks)


GENERATORS: dict[str, Callable[[int], dict]] = {"blast-3stage": blast_3stage, "io-bound": io_bound,
                                                "blast-3stage-2core": blast_3stage_2core}


def _wf(tid, name, runtime, cores, avg_cpu, mem_mb, parents, inputs=(), outputs=()) -> dict:
    return {"id": tid, "name": name, "parents": list(parents), "runtimeInSeconds": round(runtime, 3),
            "coreCount": cores, "avgCPU": avg_cpu, "memoryInBytes": int(mem_mb * 1024 * 1024),
            "inputFiles": list(inputs), "outputFiles": list(outputs)}


def _instance(name: str, tasks: list[dict], files: dict[str, float] | None = None) -> dict:
    spec = [{k: t[k] for k in ("id", "name", "parents", "inputFiles", "outputFiles")} for t in tasks]
    execution = [{k: t[k] for k in ("id", "runtimeInSeconds", "coreCount", "avgCPU", "memoryInBytes")}
                 for t in tasks]
    listed = [{"id": f, "sizeInBytes": int(mb * 2**20)} for f, mb in (files or {}).items()]
    return {"name": name, "schemaVersion": "1.5",
            "workflow": {"specification": {"tasks": spec, "files": listed}, "execution": {"tasks": execution}}}


class WorkloadError(ValueError):
    pass


def topological_order(w: Workload) -> list[SimTask]:
    """Parents before children (Kahn's algorithm, iterative: a chain of 100k tasks is
    fine); ties in the workload's order. A cycle is a :class:`WorkloadError` naming it."""
    by_id = w.by_id()
    left = {t.id: len(t.parents) for t in w.tasks}
    children: dict[str, list[str]] = {t.id: [] for t in w.tasks}
    for t in w.tasks:
        for p in t.parents:
            children[p].append(t.id)
    ready = deque(t.id for t in w.tasks if left[t.id] == 0)
    order: list[SimTask] = []
    while ready:
        tid = ready.popleft()
        order.append(by_id[tid])
        for c in children[tid]:
            left[c] -= 1
            if left[c] == 0:
                ready.append(c)
    if len(order) != len(w.tasks):
        cycle = find_cycle(w, {tid for tid, n in left.items() if n > 0})
        shown = " → ".join(cycle[:8] + (["…"] if len(cycle) > 9 else []) + [cycle[0]])
        raise WorkloadError(f"workflow {w.name!r} has a dependency cycle ({len(cycle)} tasks): {shown}; "
                            f"a task cannot wait for itself: remove one of these parent links")
    return order


def find_cycle(w: Workload, stuck: set[str]) -> list[str]:
    """A cycle among ``stuck`` (tasks Kahn's algorithm could not order: each has a
    stuck parent), as task ids, each the parent of the next."""
    by_id = w.by_id()
    start = next(t.id for t in w.tasks if t.id in stuck)
    seen: dict[str, int] = {}
    path: list[str] = []
    tid = start
    while tid not in seen:  # walk up stuck parents until a task repeats
        seen[tid] = len(path)
        path.append(tid)
        tid = next(p for p in by_id[tid].parents if p in stuck)
    return list(reversed(path[seen[tid]:]))


def parse_wfformat(data: dict, name: str | None = None) -> Workload:
    wf = data.get("workflow") if isinstance(data, dict) else None
    if not isinstance(wf, dict):
        raise WorkloadError("not a WfFormat instance: no 'workflow' object")
    sizes: dict[str, float] = {}  # file → MB (1.5)
    if "specification" in wf:  # WfFormat 1.5
        spec = wf["specification"].get("tasks", [])
        sizes = {str(f["id"]): float(f.get("sizeInBytes") or 0) / 2**20 for f in wf["specification"].get("files", [])
                 if isinstance(f, dict) and "id" in f}
        exe = {t["id"]: t for t in wf.get("execution", {}).get("tasks", [])}
        raw = [{**t, **exe.get(t["id"], {})} for t in spec]
    else:  # WfFormat 1.4 and older
        raw = wf.get("tasks") or wf.get("jobs") or []
    if not raw:
        raise WorkloadError("the workflow has no tasks")
    tasks: list[SimTask] = []
    for t in raw:
        tid = str(t.get("id") or t.get("name"))
        runtime = t.get("runtimeInSeconds", t.get("runtime"))
        if runtime is None:
            raise WorkloadError(f"task {tid!r} has no runtimeInSeconds/runtime")
        mem, mem_kb = t.get("memoryInBytes"), t.get("memory")
        mem_mb = mem / 2**20 if mem else (mem_kb / 1024 if mem_kb else DEFAULT_MEMORY_MB)
        cores = int(t.get("coreCount", t.get("cores", DEFAULT_CORES)) or DEFAULT_CORES)
        # avgCPU is a percentage of one core (WfCommons); over 100 means several cores
        avg = float(t.get("avgCPU", DEFAULT_AVG_CPU) or DEFAULT_AVG_CPU)
        util = avg / 100.0 / cores if avg > 100 else avg / 100.0
        inputs, output_mb = _files(t, sizes)
        tasks.append(SimTask(tid, str(t.get("name", tid)).split("_ID")[0], float(runtime), cores, mem_mb,
                             min(1.0, max(0.0, util)), [str(x) for x in t.get("parents", [])], inputs, output_mb))
    ids = {task.id for task in tasks}
    for task in tasks:
        missing = [p for p in task.parents if p not in ids]
        if missing:
            raise WorkloadError(f"task {task.id!r} names unknown parent {missing[0]!r}")
    wl = Workload(name or data.get("name", "workflow"), tasks)
    topological_order(wl)  # refuses a cycle here, in one line, before anything runs
    return wl


def _files(t: dict, sizes: dict[str, float]) -> tuple[tuple[tuple[str, float], ...], float]:
    """A task's inputs (name, MB) and the MB it writes: WfFormat 1.5 names files by id
    (``sizes``), 1.4 lists them in the task with their ``link`` and ``size`` in bytes."""
    if "inputFiles" in t or "outputFiles" in t:
        inputs = tuple((str(f), sizes.get(str(f), 0.0)) for f in t.get("inputFiles") or [])
        return inputs, sum(sizes.get(str(f), 0.0) for f in t.get("outputFiles") or [])
    listed = [f for f in t.get("files") or [] if isinstance(f, dict)]
    inputs = tuple((str(f.get("name")), float(f.get("size") or 0) / 2**20) for f in listed if f.get("link") == "input")
    return inputs, sum(float(f.get("size") or 0) / 2**20 for f in listed if f.get("link") == "output")


def load_workload(spec: str, seed: int = 0) -> Workload:
    """A generator name (``blast-3stage``, ``io-bound``) or a WfFormat JSON file."""
    if spec in GENERATORS:
        return parse_wfformat(GENERATORS[spec](seed), spec)
    p = Path(spec)
    if not p.is_file():
        raise WorkloadError(f"workload {spec!r} is neither a file nor one of {', '.join(GENERATORS)}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))  # (JSON is UTF-8, whatever the locale)
    except OSError as exc:  # (unreadable: it was taken for the --out error of hta simulate)
        raise WorkloadError(f"cannot read workflow file {spec!r} ({exc.strerror or exc}): "
                            f"make it readable or give another WfCommons JSON instance") from None
    except UnicodeDecodeError as exc:  # (a ValueError: it printed the codec's words, not the file)
        raise WorkloadError(f"{p}: not JSON (byte 0x{exc.object[exc.start]:02x} at offset {exc.start} is not "
                            f"UTF-8 text): give a WfCommons JSON instance") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        return parse_wfformat(data, p.stem)
    except WorkloadError as exc:
        raise WorkloadError(f"{p}: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError, ArithmeticError, RecursionError) as exc:  # (not WfFormat)
        raise WorkloadError(f"{p}: not a WfFormat instance ({type(exc).__name__}: {exc}): give a WfCommons "
                            f"JSON instance") from None
