"""Fault injection on real components: what HTA survives (local backend).

Each case copies a small BLAST-shaped workflow (``workflows/blast`` rewritten by
its ``make_makeflow.py``: 16 rules in three stages, outputs of known content),
runs the real ``hta makeflow`` on it (real makeflow, Work Queue, workers),
injects one fault, and records:

- the exit code (and whether it is the one expected),
- the outputs: byte-identical to a clean run's (``identical``), or for a run
  that must fail, every output it did write identical (``kept``),
- tasks lost and re-run (from the scaling log),
- processes left behind (anything whose command line or working directory is
  in the case's folder, 15 s after the run ended),
- the time against the clean run, and the last line the user saw.

It prints one table and exits 1 if any case lost or corrupted data, left a
process behind, ran past its bound, ended in a traceback or with an exit code
other than the expected one.

    .venv/bin/python bench/faults.py [--only NAME[,NAME...]] [--keep DIR]

It takes about a quarter of an hour on 2 cores; the ``scaling log disk full``
case mounts a 64 KiB tmpfs (root) and unmounts it after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

ROOT = Path(__file__).resolve().parent.parent
HTA = str(ROOT / ".venv" / "bin" / "hta")
BLAST = ROOT / "workflows" / "blast"
SHAPE = ["4", "2", "3", "30,60,30"]  # widths of the three stages, queries per align task
BASE_ARGS = ["--max-workers", "3", "--min-interval", "1"]
#: a case that runs longer than this (× the clean run, + a constant) hangs
BOUND_FACTOR, BOUND_PLUS_S = 4.0, 120.0
#: files of a run that are not the workflow's outputs (a stopped makeflow leaves its job wrappers)
NOT_OUTPUTS = ("Makeflow", "makeflow.failed.", "resource_monitor_")  # logs, failed rules, wrappers


# -- the workflow --------------------------------------------------------------------------

def make_workflow(dst: Path, extra: str = "") -> Path:
    dst.mkdir(parents=True)
    for f in ("gendb.py", "seqio.py", "split.py", "align.py", "reduce.py", "make_makeflow.py"):
        shutil.copy(BLAST / f, dst / f)
    subprocess.run(["python3", "make_makeflow.py", *SHAPE], cwd=dst, check=True)
    if extra:
        with open(dst / "Makeflow", "a") as fh:
            fh.write("\n" + extra)
    return dst / "Makeflow"


def outputs(wf_dir: Path, inputs: set[str]) -> dict[str, bytes]:
    out = {}
    for p in wf_dir.iterdir():
        if p.is_file() and p.name not in inputs and not p.name.startswith(NOT_OUTPUTS):
            out[p.name] = p.read_bytes()
    return out


# -- a run of hta --------------------------------------------------------------------------

class Run:
    def __init__(self, workflow: Path, args: list[str], name: str = "run"):
        self.workflow = workflow
        self.dir = workflow.parent
        self.out = self.dir.parent / f"{name}.stdout"
        self.err = self.dir.parent / f"{name}.stderr"
        self.t0 = time.time()
        with open(self.out, "w") as o, open(self.err, "w") as e:
            # from the workflow's folder, as a user runs it (makeflow runs where it is started)
            self.p = subprocess.Popen([HTA, "makeflow", *BASE_ARGS, *args, str(workflow)], cwd=Path(workflow).parent,
                                      stdout=o, stderr=e)
        self.log = Path(str(workflow) + ".scaling.jsonl")
        for i, a in enumerate(args):
            if a == "--log":
                self.log = Path(args[i + 1])

    def wait(self, timeout: float) -> tuple[int | None, float]:
        """Exit code (None: still running at ``timeout``, then killed) and seconds taken."""
        try:
            rc = self.p.wait(timeout=max(1.0, timeout - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None, time.time() - self.t0
        return rc, time.time() - self.t0

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def records(self) -> list[dict]:
        out = []
        try:
            for line in self.log.read_text(errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        except OSError:
            pass
        return out

    def running(self) -> int:
        obs = [r for r in self.records() if r.get("kind") == "observation"]
        return obs[-1]["running"] if obs else 0


def wait_for(cond: Callable[[], object], timeout: float, every: float = 0.3):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    return cond()


def processes_in(folder: Path) -> list[psutil.Process]:
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
        if str(folder) in text:
            out.append(p)
    return out


def left_behind(folder: Path) -> list[psutil.Process]:
    wait_for(lambda: not processes_in(folder), 15)
    left = processes_in(folder)
    for p in left:  # report them, then do not let them disturb the next case
        try:
            p.kill()
        except psutil.Error:
            pass
    return left


def worker_trees(folder: Path) -> list[list[psutil.Process]]:
    """Each ``hta worker`` of the run in ``folder`` with its descendants."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if " worker " in cmd and "--master" in cmd and str(folder) in cmd:
            try:
                out.append([p, *p.children(recursive=True)])
            except psutil.Error:
                pass
    return out


def busy_worker_trees(folder: Path) -> list[list[psutil.Process]]:
    """Worker trees with a task running (a process below work_queue_worker)."""
    busy = []
    for tree in worker_trees(folder):
        wq = [p for p in tree if name_of(p) == "work_queue_worker"]
        try:
            if wq and wq[0].children():
                busy.append(tree)
        except psutil.Error:
            pass
    return busy


def name_of(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:  # it ended meanwhile
        return ""


def signal_tree(tree: list[psutil.Process], sig: int) -> None:
    for p in tree:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


# -- cases -----------------------------------------------------------------------------------

@dataclass
class Result:
    case: str
    fault: str
    expected_rc: int
    rc: int | None = None
    outputs: str = ""
    lost: int | None = None
    rerun: int | None = None
    left: int = 0
    seconds: float = 0.0
    message: str = ""
    problems: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Case:
    name: str
    fault: str
    expected_rc: int
    run: Callable[["Bench", "Case", Path], Result]
    #: outputs must be complete (True) or only those written must be right (False)
    complete: bool = True
    extra_rules: str = ""


class Bench:
    def __init__(self, root: Path):
        self.root = root
        self.clean_s = 0.0
        self.reference: dict[str, bytes] = {}
        self.inputs: set[str] = set()

    def bound(self) -> float:
        return self.clean_s * BOUND_FACTOR + BOUND_PLUS_S

    def workflow(self, name: str, extra: str = "") -> Path:
        return make_workflow(self.root / name / "wf", extra)

    def clean(self) -> Result:
        wf = self.workflow("clean")
        self.inputs = {p.name for p in wf.parent.iterdir()}
        run = Run(wf, [])
        rc, took = run.wait(900)
        self.clean_s = took
        self.reference = outputs(wf.parent, self.inputs)
        r = Result("clean run", "none", 0)
        return self.finish(r, run, rc, took, complete=True)

    def finish(self, r: Result, run: Run, rc: int | None, took: float, complete: bool,
               rerun: Run | None = None, folder: Path | None = None) -> Result:
        """Fill in what every case records; ``rerun``: the run whose outputs count (after a
        fault that stops the first one; it writes the scaling log anew); ``folder``: where
        to look for processes left behind (default: the run's case folder)."""
        r.rc, r.seconds = rc, took
        err = run.stderr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        r.message = next((ln for ln in reversed(lines) if ln.startswith("hta: error:")), lines[-1] if lines else "—")
        if rc is None:
            r.problems.append(f"hung: killed after {took:.0f} s")
        elif rc != r.expected_rc:
            r.problems.append(f"exit {rc}, expected {r.expected_rc}")
        if "Traceback" in err:
            r.problems.append("traceback")
        if r.expected_rc > 0 and rc not in (0, None) and not any(ln.startswith("hta: error:") for ln in lines):
            r.problems.append("no error line")
        final = rerun or run
        got = outputs(final.dir, self.inputs)
        wrong = [n for n, b in got.items() if n in self.reference and self.reference[n] != b]
        missing = [n for n in self.reference if n not in got]
        if wrong:
            r.outputs = f"DIFFERENT: {', '.join(sorted(wrong)[:3])}"
            r.problems.append("corrupted outputs")
        elif complete and missing:
            r.outputs = f"MISSING {len(missing)}"
            r.problems.append("lost outputs")
        else:
            r.outputs = "identical" if not missing else f"kept ({len(got)} of {len(self.reference)})"
        recs = final.records()
        r.lost = sum(x.get("tasks_lost", 0) for x in recs if x.get("kind") == "worker")
        ends = [x for x in recs if x.get("kind") == "end"]
        r.rerun = sum(x.get("tasks_retried", 0) for x in ends) if ends else None
        left = left_behind(folder or run.dir.parent)
        r.left = len(left)
        if left:
            r.problems.append(f"left behind: {', '.join(sorted({name_of(p) for p in left}))}")
        if took > self.bound():
            r.problems.append(f"past its bound ({self.bound():.0f} s)")
        return r


def run_case(bench: Bench, case: Case) -> Result:
    folder = bench.root / case.name
    r = Result(case.name, case.fault, case.expected_rc)
    try:
        return case.run(bench, case, folder)
    except Exception as exc:  # noqa: BLE001 — a broken case is a failed case, the table goes on
        r.problems.append(f"bench error: {type(exc).__name__}: {exc}")
        left_behind(folder)
        return r


def case_worker_kills(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    run = Run(wf, [])
    killed = 0
    rng = random.Random(1)
    while killed < 3 and run.p.poll() is None:
        busy = wait_for(lambda: busy_worker_trees(wf.parent), 30)
        if not busy or run.p.poll() is not None:
            break
        time.sleep(1.5)  # some work done, to be lost
        tree = rng.choice(busy)
        wq = [p for p in tree if name_of(p) == "work_queue_worker"]
        try:
            wq[0].kill()
            killed += 1
        except (psutil.Error, IndexError):
            continue
        time.sleep(3)
    rc, took = run.wait(bench.bound())
    r = bench.finish(Result(case.name, case.fault + f" ({killed} done)", 0), run, rc, took, True)
    if killed and (r.lost or 0) < 1:
        r.problems.append("lost tasks not reported")
    return r


def case_stop(seconds: float, stall: int) -> Callable[[Bench, Case, Path], Result]:
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        wf = bench.workflow(case.name)
        run = Run(wf, ["--worker-stall-timeout", str(stall)])
        busy = wait_for(lambda: busy_worker_trees(wf.parent), 60)
        tree = busy[0] if busy else []
        signal_tree(tree, signal.SIGSTOP)
        time.sleep(seconds)
        signal_tree(tree, signal.SIGCONT)
        rc, took = run.wait(bench.bound())
        r = bench.finish(Result(case.name, case.fault, 0), run, rc, took, True)
        if not tree:
            r.problems.append("no busy worker to stop")
        replaced = [x for x in run.records() if x.get("event") == "lost" and "answering" in x.get("reason", "")]
        if seconds > stall + 5 and not replaced:
            r.problems.append("stalled worker not replaced")
        return r
    return run_it


def case_hta_kill(sig: int, after: str) -> Callable[[Bench, Case, Path], Result]:
    """Send ``sig`` to HTA (``after``: "first" second, or "mid" run with tasks running), check
    what it leaves, then run it again in the same folder: it must resume and finish."""
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        wf = bench.workflow(case.name)
        run = Run(wf, [])
        if after == "first":
            time.sleep(0.3)
        else:
            wait_for(lambda: busy_worker_trees(wf.parent), 60)
            time.sleep(2)
        run.p.send_signal(sig)
        rc, took = run.wait(60)
        expected = -9 if sig == signal.SIGKILL else 128 + sig
        r = Result(case.name, case.fault, expected)
        left = left_behind(folder)
        again = Run(wf, [], name="rerun")
        rc2, took2 = again.wait(bench.bound())
        r = bench.finish(r, run, rc, took + took2, True, rerun=again)
        if left:
            r.left += len(left)
            r.problems.append(f"left behind by the {signal.Signals(sig).name}: "
                              f"{', '.join(sorted({name_of(p) for p in left}))}")
        if rc2 != 0:
            r.problems.append(f"re-run exit {rc2}")
        if sig != signal.SIGKILL and ("-15" in run.stderr() or "-2 " in run.stderr()):
            r.problems.append("a raw signal number in the message")
        r.fault += f"; re-run exit {rc2}"
        return r
    return run_it


def case_failing(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name, case.extra_rules)
    run = Run(wf, [])
    rc, took = run.wait(bench.bound())
    r = bench.finish(Result(case.name, case.fault, case.expected_rc), run, rc, took, False)
    if "rule bad.txt" not in r.message:
        r.problems.append("the failed rule is not named")
    return r


def case_log_disk_full(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    mnt = folder / "tmpfs"
    mnt.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if m.returncode != 0:
        r = Result(case.name, case.fault, 0, skipped=f"cannot mount a tmpfs: {m.stderr.strip()}")
        return r
    try:
        # leave room for a few records only: the disk fills up while the run goes on
        (mnt / "filler").write_bytes(b"x" * (64 * 1024 - 8 * 1024))
        run = Run(wf, ["--log", str(mnt / "scaling.jsonl")])
        rc, took = run.wait(bench.bound())
        r = bench.finish(Result(case.name, case.fault, 0), run, rc, took, True)
        if "scaling log" not in run.stderr() or "incomplete" not in run.stderr():
            r.problems.append("log trouble not reported")
        recs = run.records()
        if not recs or recs[0].get("kind") != "run":
            r.problems.append("the log is not a valid scaling log")
        r.message = next((ln for ln in run.stderr().splitlines() if ln.startswith("hta: warning:")), r.message)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    return r


def case_two_in_one_folder(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    first = Run(wf, [], name="first")
    wait_for(lambda: first.running() >= 1, 60)
    second = Run(wf, [], name="second")
    rc2, took2 = second.wait(60)
    rc, took = first.wait(bench.bound())
    r = bench.finish(Result(case.name, case.fault, 0), first, rc, took, True)
    if rc2 != 2:
        r.problems.append(f"second run exit {rc2}, expected 2")
    r.message = next((ln for ln in second.stderr().splitlines() if ln.startswith("hta: error:")), "")
    starts = [x for x in first.records() if x.get("kind") == "run"]
    if len(starts) != 1:
        r.problems.append("the scaling log was written twice")
    r.fault += f"; second exit {rc2} in {took2:.1f} s"
    return r


def case_two_folders(bench: Bench, case: Case, folder: Path) -> Result:
    a = bench.workflow(case.name + "/a")
    b = make_workflow(folder / "b" / "wf")
    ra, rb = Run(a, [], name="a"), Run(b, [], name="b")
    rca, ta = ra.wait(bench.bound())
    rcb, tb = rb.wait(bench.bound())
    r = bench.finish(Result(case.name, case.fault, 0), ra, rca, max(ta, tb), True, folder=folder)
    other = outputs(b.parent, bench.inputs)
    if other != bench.reference:
        r.problems.append("the second folder's outputs differ")
    if rcb != 0:
        r.problems.append(f"the second run exited {rcb}")
    return r


def case_no_workers(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    run = Run(wf, ["--worker-disk", "100000000"])
    rc, took = run.wait(bench.bound())
    r = bench.finish(Result(case.name, case.fault, 1), run, rc, took, False)
    if "disk" not in r.message:
        r.problems.append("the cause is not named")
    return r


def case_binary(bench: Bench, case: Case, folder: Path) -> Result:
    folder.mkdir(parents=True)
    wf = folder / "wf"
    wf.mkdir()
    (wf / "Makeflow").write_bytes(Path(shutil.which("makeflow") or "/usr/bin/makeflow").read_bytes()[:500_000])
    run = Run(wf / "Makeflow", [])
    rc, took = run.wait(60)
    r = bench.finish(Result(case.name, case.fault, 2), run, rc, took, False)
    if took > 10:
        r.problems.append(f"took {took:.0f} s")
    return r


FAIL_RULE = "CATEGORY=bad\nCORES=1\nMEMORY=50\nDISK=50\n\nbad.txt:\n\tsleep 2; exit 3\n\n" \
            "after.txt: bad.txt result1.txt\n\tcat bad.txt result1.txt > after.txt\n"
OVER_MEMORY = ("CATEGORY=bad\nCORES=1\nMEMORY=60\nDISK=100\n\nbad.txt:\n"
               "\tpython3 -c \"import time; x=b'a'*(200*2**20); time.sleep(8)\"; echo ok > bad.txt\n\n"
               "after.txt: bad.txt result1.txt\n\tcat bad.txt result1.txt > after.txt\n")

CASES = [
    Case("worker-sigkill", "SIGKILL a busy work_queue_worker, 3 times", 0, case_worker_kills),
    Case("worker-sigstop-short", "SIGSTOP a busy worker tree 5 s, then SIGCONT (stall timeout 20 s)", 0,
         case_stop(5, 20)),
    Case("worker-sigstop-long", "SIGSTOP a busy worker tree 30 s, then SIGCONT (stall timeout 10 s)", 0,
         case_stop(30, 10)),
    Case("hta-sigkill", "SIGKILL HTA mid-run, then run again", -9, case_hta_kill(signal.SIGKILL, "mid")),
    Case("hta-sigterm", "SIGTERM HTA mid-run, then run again", 143, case_hta_kill(signal.SIGTERM, "mid")),
    Case("hta-sigint", "SIGINT HTA mid-run, then run again", 130, case_hta_kill(signal.SIGINT, "mid")),
    Case("hta-sigterm-0.3s", "SIGTERM HTA 0.3 s after start, then run again", 143,
         case_hta_kill(signal.SIGTERM, "first")),
    Case("hta-sigint-0.3s", "SIGINT HTA 0.3 s after start, then run again", 130,
         case_hta_kill(signal.SIGINT, "first")),
    Case("failing-task", "a rule exits 3 (retried), another depends on it", 1, case_failing, complete=False,
         extra_rules=FAIL_RULE),
    Case("over-memory", "a rule uses 200 MB, its category allows 60 MB; another depends on it", 1, case_failing,
         complete=False, extra_rules=OVER_MEMORY),
    Case("log-disk-full", "scaling log on a 64 KiB tmpfs that fills up mid-run", 0, case_log_disk_full),
    Case("two-runs-one-folder", "a second hta on the same workflow while the first runs", 0,
         case_two_in_one_folder),
    Case("two-runs-two-folders", "two copies of the workflow at once, in two folders", 0, case_two_folders),
    Case("workers-cannot-start", "every worker exits at start (--worker-disk beyond the disk)", 1, case_no_workers,
         complete=False),
    Case("binary-workflow", "WORKFLOW is a binary file", 2, case_binary, complete=False),
]


def table(results: list[Result], clean_s: float) -> str:
    rows = ["| case | fault | exit | outputs | tasks lost / re-run | left behind | time | vs clean | what the user saw | ok |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.skipped:
            rows.append(f"| {r.case} | {r.fault} | | | | | | | skipped: {r.skipped} | — |")
            continue
        msg = r.message.replace("|", "\\|")
        msg = msg if len(msg) <= 110 else msg[:107] + "…"
        lost = f"{r.lost if r.lost is not None else '—'} / {r.rerun if r.rerun is not None else '—'}"
        ratio = f"{r.seconds / clean_s:.1f}×" if clean_s else "—"
        ok = "yes" if r.ok else "**NO**: " + "; ".join(r.problems)
        rows.append(f"| {r.case} | {r.fault} | {r.rc} | {r.outputs} | {lost} | {r.left} | {r.seconds:.0f} s | "
                    f"{ratio} | {msg} | {ok} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated case names (the clean run always runs)")
    ap.add_argument("--keep", type=Path, help="work here and keep the folders (default: a temporary folder)")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - {c.name for c in CASES}
    if unknown:
        print(f"faults: error: unknown case(s) {', '.join(sorted(unknown))}: choose from "
              f"{', '.join(c.name for c in CASES)}", file=sys.stderr)
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="hta-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    bench = Bench(root)
    t0 = time.time()
    results = [bench.clean()]
    print(f"clean run: {bench.clean_s:.1f} s, {len(bench.reference)} outputs", file=sys.stderr)
    if not results[0].ok:
        print(table(results, bench.clean_s))
        return 1
    for case in CASES:
        if only and case.name not in only:
            continue
        r = run_case(bench, case)
        results.append(r)
        print(f"{case.name}: {'ok' if r.ok else 'FAILED: ' + '; '.join(r.problems)} ({r.seconds:.0f} s)",
              file=sys.stderr)
    print(table(results, bench.clean_s))
    print(f"\n{len(results)} runs in {time.time() - t0:.0f} s on {os.cpu_count()} cores; bound per case "
          f"{BOUND_FACTOR:g}× the clean run + {BOUND_PLUS_S:g} s")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
