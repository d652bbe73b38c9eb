"""Our factory emulation checked against the real ``work_queue_factory``.

The same small workflow runs twice on the local backend against a real
``makeflow -T wq`` master, uncompressed (the factory's 30 s cycle cannot be
changed):

1. **real factory**: ``hta makeflow --policy observe --port P`` (HTA only
   watches the master and writes its scaling log) and beside it CCTools' own
   ``work_queue_factory -T local 127.0.0.1 P --min-workers 0 --max-workers N
   --cores C --memory M --disk D -t T --workers-per-cycle 5
   --tasks-per-worker K --parent-death``, started once the master answers, in
   its own session, with its own scratch dir and debug log (``-d all``);
2. **our emulation**: ``hta makeflow --policy
   factory:tasks_per_worker=K,idle_timeout_s=T,workers_per_cycle=5,worker_wakeup_s=5
   --max-workers N --worker-cores C --worker-memory M --worker-disk D`` on a
   fresh copy of the same workflow (``worker_wakeup_s=5``: an idle
   ``work_queue_worker`` reads its timer every 5 s; ``pre_7_4_count=1`` too
   when the installed factory counts as CCTools did before 7.4.0, which
   Debian's snapshot does; see ``hta/policies/factory.py``).

The workflow (``workflows/replay``: every task sleeps its runtime and writes a
checkable output) is a stage of one-core tasks of 20–40 s, one merge task
long enough for the idle workers to time out, and a second stage: it covers
the ramp-up (at most 5 submitted and unconnected), the idle timeout and the
ramp-up again after it.

Printed side by side: runtime, waste and shortage (core·s, HTA's accounting
from each run's scaling log), node·s (seconds of live ``work_queue_worker``
processes of each scaler, sampled every 0.25 s up to the run's end), peak
workers, and the curve of connected workers (from the scaling log, sampled
every second: mean absolute difference relative to the mean count), each with
the difference in %. Then each scaler's cycles (the factory's own stdout; the
emulation's decisions) and both curves every 10 s.

Exit 1 if a difference exceeds ``--max-diff`` (10 %) or a run fails (exit code,
outputs not byte-identical to the expected ones, a factory that died, a worker
process left behind). At the end the factory's whole process group is killed,
then every ``work_queue_worker`` seen under it, by PID (``work_queue_factory
-T local`` leaves orphan workers on SIGTERM: ../shared/DESIGN.md).

    .venv/bin/python bench/factory_check.py            # ≈ 10 min on 2 cores
    .venv/bin/python bench/factory_check.py --stage1 5 --stage2 4 --runtime 10 15 --merge-s 30 \\
        --idle-timeout 20 --max-workers 3              # a short trial
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "workflows" / "replay"))

from generate import expected_outputs, write_makeflow  # noqa: E402

from hta.scaling_log import DecisionRecord, ObservationRecord, RunRecord, read_records  # noqa: E402
from hta.sim.workload import SimTask, Workload  # noqa: E402
from hta.summary import RunSummary, summarize  # noqa: E402

HTA = ROOT / ".venv" / "bin" / "hta"
#: the local catalog hta makeflow gives makeflow; the factory reports there too, not to the public one
CATALOG = "127.0.0.1:9097"
SAMPLE_S = 0.25


def build_workload(seed: int, stage1: int, stage2: int, lo: float, hi: float, merge_s: float) -> Workload:
    """``stage1`` tasks → one merge task → ``stage2`` tasks; one core, 512 MB each."""
    rng = random.Random(seed)
    first = [SimTask(f"a_{i}", "stage1", round(rng.uniform(lo, hi), 3)) for i in range(stage1)]
    merge = SimTask("merge", "merge", merge_s, parents=[t.id for t in first])
    second = [SimTask(f"b_{i}", "stage2", round(rng.uniform(lo, hi), 3), parents=["merge"]) for i in range(stage2)]
    return Workload("factory-check", first + [merge] + second, declared=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class WorkerSampler(threading.Thread):
    """Every ``SAMPLE_S``: the live (not zombie) ``work_queue_worker`` processes under ``root``.
    Keeps (time, count) and every worker process it saw, by (pid, create time)."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root = root
        self.samples: list[tuple[float, int]] = []
        self.seen: dict[int, float] = {}
        self.parents: dict[int, int] = {}
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            now = time.time()
            try:
                procs = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                procs = []
            n = 0
            for p in procs:
                try:
                    if p.name() != "work_queue_worker" or p.status() == psutil.STATUS_ZOMBIE:
                        continue
                    self.seen.setdefault(p.pid, p.create_time())
                    self.parents.setdefault(p.pid, p.ppid())
                    n += 1
                except psutil.Error:
                    continue
            self.samples.append((now, n))
            self.stop_flag.wait(SAMPLE_S)

    def worker_seconds(self, t0: float, t1: float) -> float:
        """∫ live workers dt over [t0, t1] (Unix times), the samples as a step function."""
        total = 0.0
        for (a, n), (b, _) in zip(self.samples, self.samples[1:] + [(t1, 0)]):
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                total += n * (hi - lo)
        return total

    def alive(self) -> list[int]:
        out = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out


@dataclass
class Result:
    label: str
    dir: Path
    summary: RunSummary | None = None
    curve: list[tuple[float, int]] = field(default_factory=list)  # (t, connected workers) from the log
    node_s: float = 0.0
    workers_started: int = 0
    cycles: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def hta_command(args: argparse.Namespace, policy: str, workflow: Path, port: int | None) -> list[str]:
    cmd = [str(HTA), "makeflow", "--policy", policy, "--max-workers", str(args.max_workers),
           "--worker-cores", str(args.cores), "--worker-memory", str(args.memory), "--worker-disk", str(args.disk)]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + [str(workflow)]


def read_run(res: Result, workload: Workload, wf: Path, rc: int) -> None:
    if rc != 0:
        res.problems.append(f"hta makeflow exited {rc} (see {res.dir / 'hta.out'})")
    log = wf.parent / (wf.name + ".scaling.jsonl")
    try:
        records = read_records(log)[0]
        res.summary = summarize(records)
    except Exception as exc:  # noqa: BLE001 — reported as a failed run
        res.problems.append(f"no scaling log: {exc}")
        return
    res.curve = [(r.t, r.workers) for r in records if isinstance(r, ObservationRecord)]
    res.cycles = [f"t={r.t:7.1f}  add {r.add}  target {r.target}  drain {len(r.drain)}"
                  for r in records if isinstance(r, DecisionRecord)]
    wrong = [name for name, want in expected_outputs(workload).items()
             if not (wf.parent / name).exists() or (wf.parent / name).read_bytes() != want]
    if wrong:
        res.problems.append(f"{len(wrong)} outputs missing or wrong, e.g. {wrong[0]}")


def epoch_of(wf: Path) -> float:
    records = read_records(wf.parent / (wf.name + ".scaling.jsonl"))[0]
    return next(r.started_at for r in records if isinstance(r, RunRecord))


def stop_tree(proc: subprocess.Popen, sampler: WorkerSampler | None, grace_s: float = 5.0) -> list[str]:
    """Kill ``proc``'s whole process group (its own session), then every worker process seen
    under it, by PID; return what is still alive (should be nothing)."""
    problems = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if sampler is not None:
        orphans = sampler.alive()  # reparented out of the group's reach, or in a session of their own
        if orphans:
            print(f"  {len(orphans)} worker process(es) outlived the group kill: killing them by PID", flush=True)
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while sampler.alive() and time.time() < deadline:
            time.sleep(0.1)
        left = sampler.alive()
        if left:
            problems.append(f"worker processes left behind: {left}")
    deadline = time.time() + grace_s
    while (members := group_members(proc.pid)) and time.time() < deadline:
        time.sleep(0.1)
    if members:
        problems.append(f"process group {proc.pid} still has live members: {members}")
    return problems


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    return out


def run_real(args: argparse.Namespace, workload: Workload, out: Path) -> Result:
    res = Result("real work_queue_factory", out / "real")
    shutil.rmtree(res.dir, ignore_errors=True)
    wf = write_makeflow(workload, 1.0, res.dir)
    port = free_port()
    scratch = res.dir / "factory-scratch"
    scratch.mkdir()
    hta_out = open(res.dir / "hta.out", "w")
    hta = subprocess.Popen(hta_command(args, "observe", wf, port), cwd=Path(wf).parent, stdout=hta_out,
                           stderr=subprocess.STDOUT, start_new_session=True)
    factory = sampler = None
    try:
        deadline = time.time() + 60
        while not answers(port):
            if hta.poll() is not None or time.time() > deadline:
                res.problems.append("the master never answered")
                return res
            time.sleep(0.05)
        fcmd = ["work_queue_factory", "-T", "local", "--catalog", CATALOG, "-S", str(scratch),
                "-d", "all", "-o", str(res.dir / "factory.debug"),
                "--min-workers", "0", "--max-workers", str(args.max_workers), "--cores", str(args.cores),
                "--memory", str(args.memory), "--disk", str(args.disk), "-t", str(args.idle_timeout),
                "--workers-per-cycle", str(args.workers_per_cycle), "--tasks-per-worker", str(args.tasks_per_worker),
                "--parent-death", "127.0.0.1", str(port)]
        with open(res.dir / "factory.out", "w") as fout:
            factory = subprocess.Popen(fcmd, cwd=res.dir, stdout=fout, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        sampler = WorkerSampler(factory.pid)
        sampler.start()
        rc = hta.wait(timeout=args.timeout)
        if factory.poll() is not None:
            res.problems.append(f"work_queue_factory exited early ({factory.returncode})")
    except subprocess.TimeoutExpired:
        res.problems.append(f"timed out after {args.timeout} s")
        rc = -1
    finally:
        stop_hta(hta)
        if sampler is not None:
            sampler.stop_flag.set()
            sampler.join()
        if factory is not None:
            res.problems += stop_tree(factory, sampler)
        hta_out.close()
    read_run(res, workload, wf, rc)
    if res.summary is not None and sampler is not None:
        t0 = epoch_of(wf)
        res.node_s = sampler.worker_seconds(t0, t0 + res.summary.runtime_s)
        res.workers_started = len(sampler.seen)
        res.cycles = factory_cycles(res.dir / "factory.out", t0)
    return res


def factory_cycles(path: Path, t0: float) -> list[str]:
    """The factory's own report of each cycle (its stdout), in run time."""
    out = []
    pat = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d): \|submitted: (\d+) \|needed: (\d+) "
                     r"\|waiting connection: (-?\d+) \|requested: (-?\d+)")
    for line in path.read_text(errors="replace").splitlines():
        m = pat.match(line)
        if m:
            t = time.mktime(time.strptime(m.group(1), "%Y/%m/%d %H:%M:%S")) - t0
            out.append(f"t={t:5.0f}    submitted {m.group(2)}  needed {m.group(3)}  waiting connection "
                       f"{m.group(4)}  requested {m.group(5)}")
    return out


def counts_before_7_4() -> bool:
    """Whether the installed work_queue_factory counts workers as CCTools did before 7.4.0
    (``new = needed - submitted - |submitted - connected|``): its binary still has that
    version's message, not the one commit d823c53d3 (7.4.0) brought with the new count."""
    path = shutil.which("work_queue_factory")
    data = Path(path).read_bytes() if path else b""
    return b"at least %d workers have already connected" not in data and \
        b"%d workers already connected from other sources" in data


def emulation_spec(args: argparse.Namespace) -> str:
    """The factory's settings, its workers' 5 s wake-ups, and the count of the installed version."""
    spec = (f"factory:tasks_per_worker={args.tasks_per_worker},idle_timeout_s={args.idle_timeout},"
            f"workers_per_cycle={args.workers_per_cycle},worker_wakeup_s=5")
    return spec + (",pre_7_4_count=1" if counts_before_7_4() else "")


def stop_hta(hta: subprocess.Popen) -> None:
    """SIGTERM (hta stops makeflow and its workers), SIGKILL to its group after 30 s."""
    if hta.poll() is None:
        hta.send_signal(signal.SIGTERM)
        try:
            hta.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(hta.pid, signal.SIGKILL)
            hta.wait()


def run_emulation(args: argparse.Namespace, workload: Workload, out: Path) -> Result:
    res = Result("our emulation", out / "emulation")
    shutil.rmtree(res.dir, ignore_errors=True)
    wf = write_makeflow(workload, 1.0, res.dir)
    policy = emulation_spec(args)
    hta_out = open(res.dir / "hta.out", "w")
    hta = subprocess.Popen(hta_command(args, policy, wf, None), cwd=Path(wf).parent, stdout=hta_out,
                           stderr=subprocess.STDOUT, start_new_session=True)
    sampler = WorkerSampler(hta.pid)
    sampler.start()
    try:
        rc = hta.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        res.problems.append(f"timed out after {args.timeout} s")
        rc = -1
    finally:
        stop_hta(hta)
        sampler.stop_flag.set()
        sampler.join()
        res.problems += stop_tree(hta, sampler)
        hta_out.close()
    read_run(res, workload, wf, rc)
    if res.summary is not None:
        t0 = epoch_of(wf)
        res.node_s = sampler.worker_seconds(t0, t0 + res.summary.runtime_s)
        res.workers_started = len(sampler.seen)
    return res


def curve_at(curve: list[tuple[float, int]], t: float, end: float) -> int:
    """Connected workers at ``t`` (the log as a step function; 0 after the run's end)."""
    if t >= end:
        return 0
    n = 0
    for ct, w in curve:
        if ct > t:
            break
        n = w
    return n


def diff_pct(emu: float, real: float) -> float:
    if real == 0:
        return 0.0 if emu == 0 else math.inf
    return (emu - real) / real * 100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-workers", type=int, default=6, metavar="N")
    ap.add_argument("--cores", type=int, default=1, metavar="C")
    ap.add_argument("--memory", type=int, default=1024, metavar="MB")
    ap.add_argument("--disk", type=int, default=2048, metavar="MB")
    ap.add_argument("--idle-timeout", type=int, default=60, metavar="T")
    ap.add_argument("--tasks-per-worker", type=int, default=1)
    ap.add_argument("--workers-per-cycle", type=int, default=5)
    ap.add_argument("--stage1", type=int, default=22, help="tasks before the merge")
    ap.add_argument("--stage2", type=int, default=18, help="tasks after the merge")
    ap.add_argument("--runtime", type=float, nargs=2, default=(20.0, 40.0), metavar=("MIN", "MAX"))
    ap.add_argument("--merge-s", type=float, default=70.0, help="the merge task (longer than T: workers time out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-diff", type=float, default=10.0, help="largest difference allowed, %%")
    ap.add_argument("--timeout", type=float, default=900.0, help="per run, s")
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: a new temp dir)")
    ap.add_argument("--only", choices=("real", "emulation"), default=None, help="run one side only")
    args = ap.parse_args(argv)

    out = args.out or Path(tempfile.mkdtemp(prefix="hta-factory-check-"))
    out.mkdir(parents=True, exist_ok=True)
    workload = build_workload(args.seed, args.stage1, args.stage2, *args.runtime, args.merge_s)
    work = sum(t.runtime_s for t in workload.tasks)
    print(f"workflow: {args.stage1} tasks → merge {args.merge_s:g} s → {args.stage2} tasks, one core each, "
          f"{args.runtime[0]:g}–{args.runtime[1]:g} s ({work:.0f} core·s); N={args.max_workers} C={args.cores} "
          f"M={args.memory} D={args.disk} T={args.idle_timeout} tasks/worker={args.tasks_per_worker} "
          f"workers/cycle={args.workers_per_cycle}; runs in {out}", flush=True)
    print(f"emulation: --policy {emulation_spec(args)}", flush=True)

    results: list[Result] = []
    for label, fn in (("real", run_real), ("emulation", run_emulation)):
        if args.only and args.only != label:
            continue
        t = time.time()
        print(f"{label}: running ...", flush=True)
        results.append(fn(args, workload, out))
        print(f"{label}: {time.time() - t:.0f} s wall", flush=True)

    failed = False
    for r in results:
        for p in r.problems:
            print(f"FAIL {r.label}: {p}")
            failed = True
    if len(results) < 2 or any(r.summary is None for r in results):
        for r in results:
            if r.summary is not None:
                s = r.summary
                print(f"{r.label}: runtime {s.runtime_s:.1f} s, waste {s.waste_core_s:.1f}, shortage "
                      f"{s.shortage_core_s:.1f}, node·s {r.node_s:.1f}, peak {s.peak_workers}")
                print("\n".join(r.cycles))
        return 1
    real, emu = results
    rs, es = real.summary, emu.summary

    end = max(rs.runtime_s, es.runtime_s)
    grid = [float(t) for t in range(int(math.ceil(end)) + 1)]
    a = [curve_at(real.curve, t, rs.runtime_s) for t in grid]
    b = [curve_at(emu.curve, t, es.runtime_s) for t in grid]
    mean = (sum(a) + sum(b)) / (2 * len(grid))
    mad = sum(abs(x - y) for x, y in zip(a, b)) / len(grid)
    curve_pct = mad / mean * 100 if mean else 0.0

    rows = [("runtime s", rs.runtime_s, es.runtime_s), ("waste core·s", rs.waste_core_s, es.waste_core_s),
            ("shortage core·s", rs.shortage_core_s, es.shortage_core_s), ("node·s", real.node_s, emu.node_s),
            ("peak workers", rs.peak_workers, es.peak_workers)]
    print()
    print(f"{'':22}{'real factory':>14}{'emulation':>14}{'diff':>10}")
    for name, x, y in rows:
        d = diff_pct(y, x)
        flag = "  <-- over" if abs(d) > args.max_diff else ""
        print(f"{name:22}{x:14.1f}{y:14.1f}{d:+9.1f}%{flag}")
        failed |= abs(d) > args.max_diff
    flag = "  <-- over" if curve_pct > args.max_diff else ""
    print(f"{'worker curve':22}{'mean ' + format(sum(a) / len(grid), '.2f'):>14}"
          f"{'mean ' + format(sum(b) / len(grid), '.2f'):>14}{curve_pct:9.1f}%{flag}"
          f"   (mean |Δ workers| {mad:.2f} over {len(grid)} s, ÷ mean count {mean:.2f})")
    failed |= curve_pct > args.max_diff
    print(f"{'workers started':22}{real.workers_started:14d}{emu.workers_started:14d}")
    print(f"{'tasks done':22}{rs.tasks_done:14d}{es.tasks_done:14d}")

    print("\nconnected workers every 10 s (real / emulation):")
    ticks = list(range(0, int(end) + 1, 10))
    print("  t    " + "".join(f"{t:>4}" for t in ticks))
    print("  real " + "".join(f"{curve_at(real.curve, t, rs.runtime_s):>4}" for t in ticks))
    print("  emu  " + "".join(f"{curve_at(emu.curve, t, es.runtime_s):>4}" for t in ticks))
    print("\nreal factory's cycles (its stdout):")
    print("\n".join("  " + c for c in real.cycles))
    print("emulation's decisions (scaling log):")
    print("\n".join("  " + c for c in emu.cycles))
    print(f"\nlogs: {out} (factory debug log: {real.dir / 'factory.debug'})")
    print("FAIL" if failed else "OK", f"(largest difference allowed {args.max_diff:g} %)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
