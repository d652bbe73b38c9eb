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

Each number read must be a finite JSON number ≥ 0 (not NaN, Infinity, true or a
string): a runtime of 0 s is a task that ends at once, a file of 0 bytes costs no
transfer, and a core count, memory or ``avgCPU`` of 0 or null is read as not recorded
(the default); a fractional core count is rounded up. ``parents``, ``children``, ``inputFiles``,
``outputFiles`` and the files are lists. Anything else is a :class:`WorkloadError`
naming the task, the field and what it must be.
"""

from __future__ import annotations

import json
import math
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


def _shown(v: object) -> str:
    """A value as the JSON file spells it (NaN, Infinity, true, "5"), cut short."""
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _bad(where: str, key: str, v: object, what: str) -> WorkloadError:
    return WorkloadError(f"{where + ': ' if where else ''}{key} must be {what}, not {_shown(v)}")


def _amount(v: object, where: str, key: str, what: str) -> float:
    """``v`` if it is a finite number ≥ 0 (JSON's true and false are no numbers)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            x = float(v)
        except OverflowError:  # (an integer of 400 digits)
            raise _bad(where, key, v, what) from None
        if 0.0 <= x < math.inf:  # (NaN fails both)
            return x
    raise _bad(where, key, v, what)


def _ids(v: object, where: str, key: str, what: str, null: bool = True) -> list[str]:
    """A list of ids (strings, or numbers as some ids are); null is none if ``null``."""
    if v is None and null:
        return []
    if isinstance(v, list):
        if all(type(x) is str for x in v):
            return list(v)  # (a copy: the task's own)
        if all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v):
            return [str(x) for x in v]
    example = _shown([v]) if isinstance(v, str) else '["t1", "t2"]'
    raise _bad(where, key, v, f"a list of {what}, e.g. {example}")


def parse_wfformat(data: dict, name: str | None = None) -> Workload:
    wf = data.get("workflow") if isinstance(data, dict) else None
    if not isinstance(wf, dict):
        raise WorkloadError("not a WfFormat instance: no 'workflow' object")
    sizes: dict[str, float] = {}  # file → MB (1.5)
    if "specification" in wf:  # WfFormat 1.5
        spec = wf["specification"].get("tasks", [])
        sizes = _spec_sizes(wf["specification"].get("files", []))
        exe = {t["id"]: t for t in wf.get("execution", {}).get("tasks", [])}
        raw = [{**t, **exe.get(t["id"], {})} for t in spec]
    else:  # WfFormat 1.4 and older
        raw = wf.get("tasks") or wf.get("jobs") or []
    if not raw:
        raise WorkloadError("the workflow has no tasks")
    tasks: list[SimTask] = []
    for t in raw:
        tid = str(t.get("id") or t.get("name"))
        where = f"task {tid!r}"
        key = "runtimeInSeconds" if "runtimeInSeconds" in t else "runtime"
        runtime = t.get(key)
        if runtime is None:
            raise WorkloadError(f"task {tid!r} has no runtimeInSeconds/runtime")
        runtime_s = _amount(runtime, where, key, "a finite number of seconds ≥ 0")
        mem_mb = 0.0  # (0 or null: not recorded)
        if (v := t.get("memoryInBytes")) is not None:
            mem_mb = _amount(v, where, "memoryInBytes", "a finite number of bytes ≥ 0") / 2**20
        if not mem_mb and (v := t.get("memory")) is not None:  # (WfFormat 1.4: KB)
            mem_mb = _amount(v, where, "memory", "a finite number of KB ≥ 0") / 1024
        key = "coreCount" if "coreCount" in t else "cores"
        cores = DEFAULT_CORES
        if (v := t.get(key)) is not None:  # (WfFormat 1.5: a number ≥ 1; a task of 1.5 cores takes 2)
            n = _amount(v, where, key, "a number of cores ≥ 1")
            if n and n < 1:
                raise _bad(where, key, v, "a number of cores ≥ 1")
            cores = math.ceil(n) or DEFAULT_CORES
        # avgCPU is a percentage of one core (WfCommons); over 100 means several cores
        avg = DEFAULT_AVG_CPU
        if (v := t.get("avgCPU")) is not None:
            avg = _amount(v, where, "avgCPU", "a finite percentage ≥ 0 (100: one core busy)") or DEFAULT_AVG_CPU
        util = avg / 100.0 / cores if avg > 100 else avg / 100.0
        parents = _ids(t.get("parents", []), where, "parents", "the ids of the tasks it waits for", null=False)
        if (v := t.get("children")) is not None:  # (not read, but a string here is no list of children)
            _ids(v, where, "children", "the ids of the tasks that wait for it")
        inputs, output_mb = _files(t, sizes, where)
        tasks.append(SimTask(tid, str(t.get("name", tid)).split("_ID")[0], runtime_s, cores, mem_mb or DEFAULT_MEMORY_MB,
                             min(1.0, max(0.0, util)), parents, inputs, output_mb))
    ids = {task.id for task in tasks}
    for task in tasks:
        missing = [p for p in task.parents if p not in ids]
        if missing:
            raise WorkloadError(f"task {task.id!r} names unknown parent {missing[0]!r}")
    wl = Workload(name or data.get("name", "workflow"), tasks)
    topological_order(wl)  # refuses a cycle here, in one line, before anything runs
    return wl


def _spec_sizes(files: object) -> dict[str, float]:
    """WfFormat 1.5's ``specification.files``: file id → MB."""
    if not isinstance(files, list):
        raise _bad("", "specification.files", files, 'a list of files, e.g. [{"id": "f", "sizeInBytes": 1024}]')
    sizes: dict[str, float] = {}
    for i, f in enumerate(files):
        if not isinstance(f, dict):
            raise _bad("", f"specification.files[{i}]", f, 'a file object, e.g. {"id": "f", "sizeInBytes": 1024}')
        if "id" in f:
            size = f.get("sizeInBytes")
            sizes[str(f["id"])] = 0.0 if size is None else _amount(
                size, f"specification.files: file {str(f['id'])!r}", "sizeInBytes", "a finite number of bytes ≥ 0") / 2**20
    return sizes


def _files(t: dict, sizes: dict[str, float], where: str) -> tuple[tuple[tuple[str, float], ...], float]:
    """A task's inputs (name, MB) and the MB it writes: WfFormat 1.5 names files by id
    (``sizes``), 1.4 lists them in the task with their ``link`` and ``size`` in bytes."""
    if "inputFiles" in t or "outputFiles" in t:
        ins = _ids(t.get("inputFiles"), where, "inputFiles", "file ids")
        outs = _ids(t.get("outputFiles"), where, "outputFiles", "file ids")
        return tuple((f, sizes.get(f, 0.0)) for f in ins), sum(sizes.get(f, 0.0) for f in outs)
    listed = t.get("files")
    if listed is None:
        return (), 0.0
    if not isinstance(listed, list):
        raise _bad(where, "files", listed, 'a list of files, e.g. [{"name": "f", "link": "input", "size": 1024}]')
    inputs: list[tuple[str, float]] = []
    output_mb = 0.0
    for i, f in enumerate(listed):
        if not isinstance(f, dict):
            raise _bad(where, f"files[{i}]", f, 'a file object, e.g. {"name": "f", "link": "input", "size": 1024}')
        link = f.get("link")
        if link != "input" and link != "output":
            continue
        size = f.get("size")
        mb = 0.0 if size is None else _amount(
            size, f"{where}: file {str(f.get('name'))!r}", "size", "a finite number of bytes ≥ 0") / 2**20
        if link == "input":
            inputs.append((str(f.get("name")), mb))
        else:
            output_mb += mb
    return tuple(inputs), output_mb


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
