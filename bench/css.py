"""Benchmark: what CSS does to a node, side by side in one run.

1. **Overhead.** The daemon's CPU per futex backend while it watches a process with
   220 threads at the paper's 5 s management interval (goal: < 1 % of a core in the
   steady state).
2. **Effect.** Each workload run to completion under the kernel's own scheduling, under
   CSS as every worker runs it (the plan kept only while the tasks progress faster under
   it: ``hta.node.css.guard``), and under CSS applying its plan (style ``confine``)
   always, as the paper applies CTBRA. Rounds interleave the three; median makespan and
   spread (min–max) over ``--rounds`` (5).

   Streams, as a workflow's tasks arrive: lanes of short tasks, each lane's run one after
   another by one parent process (as ``work_queue_worker`` runs its tasks), which CSS
   watches as it watches a worker (``--worker-pid``), so it sees each task start and end:

   - futex stream: per 2 cores, 2 lanes of short ``stress-ng --futex`` beside 2 of short
     ``stress-ng --cpu``;
   - thread pools beside CPU loops: per 2 cores, 2 lanes of a Python pool of 8 threads
     handing work through a queue beside 2 lanes of a CPU loop;
   - one class stream: per 2 cores, 4 lanes of short ``stress-ng --cpu``.

   Long processes, started together (no task ends in a trial: the guard falls back to the
   CPU time the tasks receive):

   - the paper's mix: 2 × ``stress-ng --futex`` beside 2 × ``stress-ng --cpu``;
   - the project's own workflow tasks packed into one worker: 2 BLAST aligns
     (``workflows/blast/align.py``) beside 2 of the I/O workflow's ``dd`` tasks;
   - a CANU-like mix: CANU's overlap store as fio's POSIX asynchronous I/O (completion
     threads on futexes) beside its overlap computation as BLAST aligns;
   - an NPB-like OpenMP kernel (``gcc -fopenmp``: a loop with a barrier each
     iteration) run as 3 tasks of 2 threads, which oversubscribe the cores;
   - one class only: 4 × ``stress-ng --cpu``.

   The tasks run as plain processes that ``hta css --pid`` watches, as ``hta worker``
   watches its worker's children.

3. **A real workflow** (``--workflow``): ``workflows/blast`` run by ``hta makeflow`` with
   local workers, each run in a fresh copy, with ``--css off``, ``--css on`` and ``--css
   dry-run`` (CSS watches and classifies but never pins), rounds interleaved; runtime is the
   run's own (its scaling log), and ``hta report``'s CSS table of the last CSS run is printed:
   which trials kept a plan, and on what evidence. Goals: CSS on and CSS watching each ≤
   1.01 × the run without CSS.

``--cores N`` (default: this machine's) scales every workload to a node of N cores (lanes
and long tasks per 2 cores, as above) and CSS shares N cores; on 16 cores it is the paper's setting.

Goals (exit 1 on a miss): with CSS, every workload's median makespan ≤ 1.01 × without, and
within 1.02 × the better of the kernel and the plan always; on the futex stream CSS keeps
at least two thirds of what the plan always gains over the kernel; the steady-state
overhead < 1 % of a core.

    .venv/bin/python bench/css.py [--rounds 5] [--skip-overhead] [--cores N] [--only NAME]
    .venv/bin/python bench/css.py --workflow [--rounds 5]      # section 3 only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hta.node.css.monitor import available

ROOT = Path(__file__).resolve().parent.parent
HTA = str(ROOT / ".venv" / "bin" / "hta")
THREADS = 220
WATCH_S = 30.0
NO_HARM = 1.01
OVERHEAD_PCT = 1.0
#: guarded CSS keeps at least this much of what the plan always gains on the futex stream
CAPTURE = 2 / 3
#: ... and is within this of the better of the kernel and the plan always, on every workload
NEAR_BEST = 1.02
#: short tasks a lane runs one after another
LANE_TASKS = 6
#: the real workflow of section 3, and how each of its runs sets CSS
WORKFLOW = ROOT / "workflows" / "blast"
WORKFLOW_MODES = {"without CSS": "off", "CSS": "on", "CSS watching only": "dry-run"}

#: runs each lane (a list of commands) one task after another, the lanes side by side, every
#: task a child of this process: a worker's tasks, as CSS sees them
LANES = """
import json, subprocess, sys, threading
lanes = json.loads(sys.argv[1])
def run(cmds):
    for c in cmds:
        subprocess.run(c, stdout=subprocess.DEVNULL)
ts = [threading.Thread(target=run, args=(lane,)) for lane in lanes]
[t.start() for t in ts]
[t.join() for t in ts]
"""

#: a task of Python threads handing work to each other through a queue (futex-heavy, as a
#: thread pool is), for a given number of items
POOL = """
import queue, sys, threading
q, n = queue.Queue(), int(sys.argv[1])
def work():
    while True:
        x = q.get()
        if x is None:
            return
        sum(i * i for i in range(200))
ts = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in ts]
for i in range(n):
    q.put(i)
for _ in ts:
    q.put(None)
[t.join() for t in ts]
"""
CPU_LOOP = "import sys\ns = 0\nfor i in range(int(sys.argv[1])): s += i * i"

THREADED = f"""
import threading, time
evs = [threading.Event() for _ in range({THREADS})]
for e in evs:
    threading.Thread(target=e.wait, daemon=True).start()
time.sleep(3600)
"""

OPENMP = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long iters = atol(argv[1]);
    double s = 0;
    #pragma omp parallel reduction(+:s)
    for (long i = 0; i < iters; i++) {
        double x = 0;
        for (int j = 0; j < 200000; j++) x += j * 0.5;
        s += x;
        #pragma omp barrier
    }
    printf("%g\n", s);
    return 0;
}
"""

DD = ("for r in 1 2 3 4; do dd if=/dev/zero of=blk{i} bs=1M count=1024 conv=fsync status=none && "
      "dd if=blk{i} of=/dev/null bs=1M status=none && md5sum < blk{i} > /dev/null && rm -f blk{i}; done")


#: CANU's overlap-store phase, as its I/O: fio with POSIX asynchronous I/O, whose completion
#: threads wait on futexes (futex-heavy, as DESIGN's facts found), a fixed amount of it
CANU_IO = ["fio", "--name=ovl", "--ioengine=posixaio", "--rw=randrw", "--bs=4k", "--size=64m", "--io_size=384m",
           "--iodepth=16", "--direct=0", "--fsync=64", "--output=/dev/null"]


def workloads(work: Path, cores: int) -> dict[str, tuple[str, Callable[[], list]]]:
    """Name → ("lanes", each lane's commands) or ("together", the commands of long tasks
    started together), in ``work``; streams scaled to ``cores``."""
    blast = ROOT / "workflows" / "blast"
    subprocess.run([sys.executable, str(blast / "gendb.py"), str(work / "db.fa"), "300", "400"], check=True)
    subprocess.run([sys.executable, str(blast / "gendb.py"), str(work / "q.fa"), "200", "400"], check=True)
    omp = work / "omp"
    (work / "omp.c").write_text(OPENMP)
    subprocess.run(["gcc", "-O1", "-fopenmp", "-o", str(omp), str(work / "omp.c")], check=True)
    futex = ["stress-ng", "--futex", "1", "--futex-ops", "750000", "-q"]
    cpu = ["stress-ng", "--cpu", "1", "--cpu-ops", "25000", "-q"]
    align = [sys.executable, str(blast / "align.py"), str(work / "db.fa"), str(work / "q.fa")]
    per = max(1, cores // 2)
    # (tasks of about 8 s each on a 2-core node: a task's end is seen to the 1 s step)
    short_futex = ["stress-ng", "--futex", "1", "--futex-ops", "200000", "-q"]
    short_cpu = ["stress-ng", "--cpu", "1", "--cpu-ops", "6500", "-q"]
    pool = [sys.executable, "-c", POOL, "160000"]
    loop = [sys.executable, "-c", CPU_LOOP, "16000000"]
    return {
        "futex stream: lanes of short futex + cpu stress-ng": (
            "lanes", lambda: [[short_futex] * LANE_TASKS] * (2 * per) + [[short_cpu] * LANE_TASKS] * (2 * per)),
        "thread pools beside CPU loops (stream)": (
            "lanes", lambda: [[pool] * LANE_TASKS] * (2 * per) + [[loop] * LANE_TASKS] * (2 * per)),
        "one class stream: cpu stress-ng": ("lanes", lambda: [[short_cpu] * LANE_TASKS] * (4 * per)),
        "paper's mix, long processes: 2 futex + 2 cpu stress-ng": (
            "together", lambda: [futex] * (2 * per) + [cpu] * (2 * per)),
        "workflow tasks: 2 BLAST align + 2 dd": (
            "together", lambda: [align] * (2 * per) + [["sh", "-c", DD.format(i=i)] for i in range(2 * per)]),
        "OpenMP barrier loop (NPB-like): 3 tasks x 2 threads": ("together", lambda: [[str(omp), "2000"]] * (3 * per)),
        "CANU-like: asynchronous I/O beside overlap compute": (
            "together", lambda: [[*CANU_IO, f"--filename=canu{i}"] for i in range(per)] + [align] * (2 * per)),
    }


MODES = {"kernel": None, "CSS": [], "CSS, plan always": ["--no-guard"]}
EVIDENCE_WORDS = {"completions": "task durations", "cpu": "CPU time", "none": "nothing, retried"}


def overhead(backend: str, duration: float = WATCH_S) -> None:
    target = subprocess.Popen([sys.executable, "-c", THREADED])
    time.sleep(1.0)
    try:
        p = subprocess.Popen([HTA, "css", "--pid", str(target.pid), "--backend", backend, "--interval", "5",
                              "--duration", str(duration), "--dry-run"], stderr=subprocess.DEVNULL)
        p.wait()
    finally:
        target.kill()
        target.wait()


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(how: str, cmds: list, mode: list[str] | None, backend: str, work: Path,
        cores: list[int]) -> tuple[float, list[dict]]:
    """Makespan of the workload, and CSS's trial records (if it ran). ``how``: "lanes" (one
    parent runs each lane's tasks in turn; CSS watches it as a worker) or "together"."""
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    if how == "lanes":
        procs = [subprocess.Popen([sys.executable, "-c", LANES, json.dumps(cmds)], cwd=work, env=env)]
        watch = ["--worker-pid", str(procs[0].pid)]
    else:
        procs = [subprocess.Popen(c, cwd=work, env=env, stdout=subprocess.DEVNULL) for c in cmds]
        watch = sum((["--pid", str(p.pid)] for p in procs), [])
    t0 = time.monotonic()
    css = None
    log = work / "css.jsonl"
    log.unlink(missing_ok=True)
    if mode is not None:
        css = subprocess.Popen([HTA, "css", *watch, "--backend", backend, "--cores", ",".join(map(str, cores)),
                                "--interval", "1", "--log", str(log), *mode], stderr=subprocess.DEVNULL)
    for p in procs:
        p.wait()
    makespan = time.monotonic() - t0
    if css is not None:
        css.terminate()
        css.wait()
    trials = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    return makespan, [t for t in trials if "trial" in t]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=_rounds, default=5, help="rounds, interleaved (default 5)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--cores", type=int, default=None, help="the node's cores the workloads are sized for "
                    "and CSS shares (default: this machine's)")
    ap.add_argument("--only", default=None, help="run only the workloads whose name contains this")
    ap.add_argument("--workflow", action="store_true",
                    help="run only section 3: workflows/blast with --css off, on and dry-run")
    args = ap.parse_args()
    online = sorted(os.sched_getaffinity(0))
    cores = args.cores or len(online)
    if not 1 <= cores <= len(online):
        print(f"bench/css.py: --cores {cores}: this machine has {len(online)}: give 1 to {len(online)}",
              file=sys.stderr)
        return 2
    missing = [t for t in ("stress-ng", "gcc", "dd") if shutil.which(t) is None]
    if missing:
        print(f"bench/css.py: needs {', '.join(missing)}: run ./scripts/setup.sh", file=sys.stderr)
        return 2
    if args.workflow:
        return workflow_section(args.rounds)
    backends = available()
    missed: list[str] = []
    print(f"machine: {os.cpu_count()} cores; futex backends available here: {', '.join(backends)}")
    if not args.skip_overhead:
        print(f"\n1. daemon CPU while watching a process with {THREADS} threads, 5 s interval, {WATCH_S:.0f} s:")
        for b in backends:
            before = children_cpu()
            overhead(b, 0.1)  # start-up and one step: Python imports, backend set-up
            startup = children_cpu() - before
            before = children_cpu()
            overhead(b)
            total = children_cpu() - before
            steady = 100 * max(0.0, total - startup) / WATCH_S
            ok = steady < OVERHEAD_PCT
            print(f"   {b:9s} {total:5.2f} s CPU in {WATCH_S:.0f} s; start-up {startup:.2f} s; steady state "
                  f"{steady:4.2f} % of a core   goal < {OVERHEAD_PCT:g} %: {'met' if ok else 'MISS'}")
            if not ok:
                missed.append(f"overhead of the {b} backend {steady:.2f} %")

    best = backends[0]
    print(f"\n2. makespan, {args.rounds} rounds interleaved, CSS backend {best}, 1 s interval, {cores} cores "
          f"(median, min–max):")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (how, make) in workloads(work, cores).items():
            if args.only and args.only not in name:
                continue
            res: dict[str, list[float]] = {m: [] for m in MODES}
            kept = trials = 0
            evidence: dict[str, int] = {}
            for _ in range(args.rounds):
                for mode, flags in MODES.items():
                    makespan, t = run(how, make(), flags, best, work, online[:cores])
                    res[mode].append(makespan)
                    if mode == "CSS":
                        trials += len(t)
                        kept += sum(1 for x in t if x["trial"] == "plan kept")
                        for x in t:
                            evidence[x.get("evidence", "cpu")] = evidence.get(x.get("evidence", "cpu"), 0) + 1
            base = statistics.median(res["kernel"])
            print(f"   {name}")
            for mode, times in res.items():
                med = statistics.median(times)
                print(f"      {mode:17s} {med:7.2f} s ({min(times):.2f}–{max(times):.2f})  {med / base:.3f} ×"
                      + ((f"   plan kept in {kept} of {trials} trials (decided by "
                          + ", ".join(f"{EVIDENCE_WORDS[e]} {n}" for e, n in sorted(evidence.items())) + ")"
                          if trials else "   no trial ended") if mode == "CSS" else ""))
            ratio = statistics.median(res["CSS"]) / base
            always = statistics.median(res["CSS, plan always"]) / base
            ok = ratio <= NO_HARM
            print(f"      goal {'met ' if ok else 'MISS'}: CSS ≤ {NO_HARM:g} × the kernel's makespan ({ratio:.3f} ×)")
            if not ok:
                missed.append(f"{name}: CSS {ratio:.3f} × the kernel's makespan")
            near = ratio <= NEAR_BEST * min(1.0, always)
            print(f"      goal {'met ' if near else 'MISS'}: CSS ≤ {NEAR_BEST:g} × the better of the kernel and the "
                  f"plan always ({ratio / min(1.0, always):.3f} ×)")
            if not near:
                missed.append(f"{name}: CSS {ratio / min(1.0, always):.3f} × the better of kernel and plan always")
            if name.startswith("futex stream") and always < 1:
                share = (1 - ratio) / (1 - always)
                ok = share >= CAPTURE
                print(f"      goal {'met ' if ok else 'MISS'}: CSS keeps ≥ {CAPTURE:.0%} of the plan's gain "
                      f"({share:.0%}: {1 - ratio:+.1%} of {1 - always:+.1%})")
                if not ok:
                    missed.append(f"{name}: CSS keeps {share:.0%} of the plan's gain")
    if missed:
        print("\nmissed: " + "; ".join(missed))
        return 1
    print("\nevery goal met")
    return 0


def _rounds(text: str) -> int:
    """--rounds: a whole number ≥ 1 (a median of no rounds is no figure)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of rounds, 1 or more")
    return n


def workflow_run(css: str, work: Path) -> tuple[float, Path]:
    """One run of workflows/blast in a fresh copy of its tracked files, with ``--css css``:
    (its runtime, from its scaling log; the log)."""
    wf = work / f"blast-{css}"
    shutil.rmtree(wf, ignore_errors=True)
    wf.mkdir(parents=True)
    for f in WORKFLOW.iterdir():
        if f.suffix == ".py" or f.name == "Makeflow":
            shutil.copy(f, wf / f.name)
    r = subprocess.run([HTA, "makeflow", "--css", css, "Makeflow"], cwd=wf, capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"bench/css.py: workflows/blast with --css {css} failed ({r.returncode}): "
                         f"{r.stderr.strip().splitlines()[-1:] or ''}")
    log = wf / "Makeflow.scaling.jsonl"
    end = json.loads(log.read_text().strip().splitlines()[-1])
    return float(end["runtime_s"]), log


def workflow_section(rounds: int) -> int:
    """Section 3: the real workflow with CSS off, on and watching only, rounds interleaved."""
    print(f"3. workflows/blast, local workers, {rounds} rounds interleaved (median runtime, min–max):")
    res: dict[str, list[float]] = {m: [] for m in WORKFLOW_MODES}
    last_css: Path | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for mode, css in WORKFLOW_MODES.items():
                runtime, log = workflow_run(css, Path(tmp) / mode.replace(" ", "-"))
                res[mode].append(runtime)
                if css == "on":
                    last_css = Path(tmp) / "report.txt"
                    rep = subprocess.run([HTA, "report", str(log)], capture_output=True, text=True, timeout=300,
                                         env={**os.environ, "COLUMNS": "140"})
                    last_css.write_text(rep.stdout)
        base = statistics.median(res["without CSS"])
        missed = []
        for mode, times in res.items():
            med = statistics.median(times)
            print(f"      {mode:17s} {med:7.2f} s ({min(times):.2f}–{max(times):.2f})  {med / base:.3f} ×")
            if mode != "without CSS":
                ok = med / base <= NO_HARM
                print(f"      goal {'met ' if ok else 'MISS'}: {mode} ≤ {NO_HARM:g} × without ({med / base:.3f} ×)")
                if not ok:
                    missed.append(f"workflows/blast: {mode} {med / base:.3f} × without")
        if last_css is not None:
            lines = last_css.read_text().splitlines()
            at = next((i for i, line in enumerate(lines) if "CSS on each worker" in line), None)
            print("\n   hta report, the last run with CSS:")
            print("\n".join("   " + line for line in (lines[at:] if at is not None else ["(no CSS table)"])))
    if missed:
        print("\nmissed: " + "; ".join(missed))
        return 1
    print("\nevery goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
