"""Fault injection on real components: what HTA survives (local backend; with ``--k8s``
also the Kubernetes backend on the local test cluster).

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

    .venv/bin/python bench/faults.py [--only NAME[,NAME...]] [--keep DIR] [--k8s] [--slurm]

With ``--k8s`` it brings up the test cluster (``testcluster/cluster up``: real
kube-apiserver, etcd, scheduler and controller-manager; kwok nodes of 2 cores
and 4 GiB, at most 4, added by the node-provisioner stand-in after 5 s; the pod
process runner, a fake kubelet, runs each worker pod's ``hta worker``), runs a
clean run on it, then the Kubernetes cases (names ``k8s-*``): a busy worker pod
deleted; its node deleted with its machine (the pod's processes killed); HTA
SIGKILLed mid-run and run again (it adopts the pods of its run, labelled
``hta.io/run``, and must not duplicate them); the kube-apiserver crashed and
back after 30 s (its watch cache starts anew: 410 Gone); a worker shape larger
than any node; the node maximum reached (other pods hold every node); worker
pods that cannot reach the master. Left behind, for these, also counts the
run's pods still in the cluster 15 s after it ended. An image that cannot be
pulled needs a real kubelet (``cluster up --real-node``); that case is listed
as skipped here and covered by tests/test_faults_k8s.py where a real node runs.
Kubernetes cases run with ``HTA_K8S_START_TIMEOUT_S=60`` (the bound after which
pods that cannot start end the run; 300 s by default).

With ``--slurm`` it brings up the Slurm test cluster (``testcluster/slurm up``: Debian's
slurmctld, slurmd and munge; 2 static and 2 cloud nodes of 2 cores, the cloud ones booted by
Slurm's power saving in 5 s; the ``hta`` partition allows 60 minutes, the ``urgent`` one
preempts it), runs a clean run on it, then the Slurm cases (names ``slurm-*``): ``sbatch``
not on PATH; slurmctld killed; a partition that does not exist; a time limit over the
partition's; a worker no node can hold; a busy worker's node set DOWN; a busy worker's job
preempted; the run's jobs given a one-minute time limit mid-run; HTA SIGKILLed mid-run and run
again (it adopts its jobs, named ``hta-<run>-N``). Left behind, for these, also counts the
Slurm jobs still pending or running 15 s after the run ended.

It takes about a quarter of an hour on 2 cores; the ``scaling log disk full``
case mounts a 64 KiB tmpfs (root) and unmounts it after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
HTA = str(ROOT / ".venv" / "bin" / "hta")
sys.path.insert(0, str(ROOT))
from testcluster.pod_runner import pod_processes  # noqa: E402

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
    run: Callable[[Bench, Case, Path], Result]
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


# -- Kubernetes cases (--k8s) -----------------------------------------------------------------

CLUSTER = ROOT / "testcluster" / "cluster"
K8S_NODE_CORES, K8S_MAX_NODES = 2, 4
K8S_START_TIMEOUT_S = 60


class K8s:
    """The local test cluster for the Kubernetes cases (started by main, stopped at the end)."""

    def __init__(self, state: Path):
        self.state = state
        self.env = {**os.environ, "HTA_TESTCLUSTER_DIR": str(state)}
        self.kubeconfig = ""
        self.core = None

    def up(self) -> None:
        r = subprocess.run([str(CLUSTER), "up", "--node-cores", str(K8S_NODE_CORES), "--node-memory", "4096",
                            "--max-nodes", str(K8S_MAX_NODES), "--provision-delay", "5", "--provision-jitter", "0.5",
                            "--pod-start-delay", "1", "--empty-node-ttl", "10"], env=self.env, capture_output=True,
                           text=True, timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"faults: error: the test cluster did not come up: {r.stderr.strip()[-500:]}")
        self.kubeconfig = r.stdout.strip().splitlines()[-1].split("=", 1)[1]
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        self.core = client.CoreV1Api(client.ApiClient(cfg))

    def down(self) -> None:
        subprocess.run([str(CLUSTER), "down"], env=self.env, capture_output=True, text=True, timeout=300)

    def args(self, *extra: str) -> list[str]:
        return ["--backend", "k8s", "--kubeconfig", self.kubeconfig, "--host-network", "--worker-cores", "2",
                "--worker-memory", "2048", "--worker-disk", "4096", "--port", "0", "--latency-prior", "8", *extra]

    def pods(self, selector: str = "hta.io/run") -> list:
        return self.core.list_namespaced_pod("default", label_selector=selector).items

    def clear(self) -> None:
        """Between cases: no pod of any run, no blocker, no processes of a fake pod."""
        for p in self.core.list_namespaced_pod("default").items:
            try:
                self.core.delete_namespaced_pod(p.metadata.name, "default", grace_period_seconds=0)
            except Exception:  # noqa: BLE001 — gone meanwhile
                pass
        wait_for(lambda: not self.core.list_namespaced_pod("default").items, 60)


K8S: K8s | None = None


class K8sRun(Run):
    def __init__(self, workflow: Path, args: list[str], name: str = "run"):
        os.environ["HTA_K8S_START_TIMEOUT_S"] = str(K8S_START_TIMEOUT_S)
        try:
            super().__init__(workflow, [*K8S.args(), *args], name)
        finally:
            os.environ.pop("HTA_K8S_START_TIMEOUT_S", None)


def k8s_finish(bench: Bench, r: Result, run: Run, rc, took: float, complete: bool,
               rerun: Run | None = None) -> Result:
    r = bench.finish(r, run, rc, took, complete, rerun=rerun)
    wait_for(lambda: not K8S.pods(), 15)
    pods = K8S.pods()
    if pods:
        r.left += len(pods)
        r.problems.append(f"{len(pods)} pod(s) left in the cluster")
    K8S.clear()
    return r


def busy_pod(run: Run) -> str | None:
    """A connected worker pod of ``run`` with a task running (from the master, via the scaling log)."""
    recs = run.records()
    connected = [x["worker"] for x in recs if x.get("kind") == "worker" and x["event"] == "connected"]
    gone = {x["worker"] for x in recs if x.get("kind") == "worker" and x["event"] not in ("requested", "connected")}
    live = [w for w in connected if w not in gone]
    if not live or run.running() < 1:
        return None
    for name in live:  # a pod whose worker runs a task has a child under work_queue_worker
        for p in pod_processes(name):
            try:
                if name_of(p) == "work_queue_worker" and p.children():
                    return name
            except psutil.Error:
                pass
    return None


def case_k8s_pod_deleted(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    run = K8sRun(wf, [])
    victim = wait_for(lambda: busy_pod(run), 120)
    if victim:
        time.sleep(1.5)  # some work done, to be lost
        K8S.core.delete_namespaced_pod(victim, "default", grace_period_seconds=0)
    rc, took = run.wait(bench.bound())
    r = k8s_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    if not victim:
        r.problems.append("no busy pod to delete")
    elif (r.lost or 0) < 1:
        r.problems.append("lost tasks not reported")
    return r


def case_k8s_node_deleted(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    run = K8sRun(wf, [])
    victim = wait_for(lambda: busy_pod(run), 120)
    noticed = None
    if victim:
        time.sleep(1.5)
        node = K8S.core.read_namespaced_pod(victim, "default").spec.node_name
        on_node = [p.metadata.name for p in K8S.pods() if p.spec.node_name == node]
        K8S.core.delete_node(node)  # the machine goes away: its node and every process of its pods
        for name in on_node:
            for p in pod_processes(name):
                try:
                    p.kill()
                except psutil.Error:
                    pass
        t = time.time()
        if wait_for(lambda: [x for x in run.records() if x.get("kind") == "worker" and x["worker"] in on_node
                             and x["event"] in ("lost", "failed")], 60):
            noticed = time.time() - t
    rc, took = run.wait(bench.bound())
    r = k8s_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    if not victim:
        r.problems.append("no busy pod")
    elif noticed is None:
        r.problems.append("the lost workers were not noticed within 60 s")
    else:
        r.fault += f"; noticed in {noticed:.1f} s"
    return r


def case_k8s_hta_kill(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    port = ["--port", "9312"]  # a fixed port: the adopted pods' workers find the restarted master
    run = K8sRun(wf, port)
    wait_for(lambda: busy_pod(run), 120)
    time.sleep(2)
    before = sorted(p.metadata.name for p in K8S.pods())
    run.p.send_signal(signal.SIGKILL)
    rc, took = run.wait(60)
    left = left_behind(folder)
    survived = sorted(p.metadata.name for p in K8S.pods())
    again = K8sRun(wf, port, name="rerun")
    rc2, took2 = again.wait(bench.bound())
    r = k8s_finish(bench, Result(case.name, case.fault, -9), run, rc, took + took2, True, rerun=again)
    recs = again.records()
    adopted = {x["worker"] for x in recs if x.get("kind") == "worker" and x["event"] == "requested"} & set(survived)
    peak = max((x["workers"] + x["pending"] for x in recs if x.get("kind") == "observation"), default=0)
    if left:
        r.left += len(left)
        r.problems.append(f"left behind by the SIGKILL: {', '.join(sorted({name_of(p) for p in left}))}")
    if rc2 != 0:
        r.problems.append(f"re-run exit {rc2}")
    if survived and adopted != set(survived):
        r.problems.append(f"pods not adopted: {sorted(set(survived) - adopted)}")
    if peak > 3:
        r.problems.append(f"duplicates: {peak} workers + pending (max 3)")
    r.fault += f"; {len(before)} pods survived it, {len(adopted)} adopted, peak {peak}; re-run exit {rc2}"
    return r


def case_k8s_apiserver(bench: Bench, case: Case, folder: Path) -> Result:
    wf = bench.workflow(case.name)
    run = K8sRun(wf, [])
    wait_for(lambda: busy_pod(run), 120)
    down = subprocess.run([str(CLUSTER), "apiserver", "restart", "--down-for", "30"], env=K8S.env,
                          capture_output=True, text=True, timeout=300)
    rc, took = run.wait(bench.bound())
    r = k8s_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    if down.returncode != 0:
        r.problems.append(f"the API server did not come back: {down.stderr.strip()[-200:]}")
    text = run.stderr()
    r.fault += "; watch relisted" if "relisted" in text else ""
    return r


def case_k8s_cannot_start(extra: list[str], words: list[str], blockers: int = 0):
    """A run whose worker pods can never start: it must end (exit 1) within the start bound, say
    why in one line naming ``words``, and leave no pod behind."""
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        from kubernetes import client

        for i in range(blockers):  # other pods hold every node the cluster may have
            K8S.core.create_namespaced_pod("default", client.V1Pod(
                metadata=client.V1ObjectMeta(name=f"blocker-{i}", labels={"app": "blocker"}),
                spec=client.V1PodSpec(containers=[client.V1Container(
                    name="c", image="localhost/none:1", resources=client.V1ResourceRequirements(
                        requests={"cpu": str(K8S_NODE_CORES), "memory": "100Mi"}))])))
        if blockers and not wait_for(lambda: all(p.status.phase == "Running" for p in K8S.pods("app=blocker")), 120):
            r = Result(case.name, case.fault, 1)
            r.problems.append("the blockers did not run")
            K8S.clear()
            return r
        wf = bench.workflow(case.name)
        run = K8sRun(wf, extra)
        rc, took = run.wait(bench.bound())
        r = k8s_finish(bench, Result(case.name, case.fault, 1), run, rc, took, False)
        missing = [w for w in words if w not in r.message]
        if missing:
            r.problems.append(f"the line does not say {missing}")
        said = [ln for ln in run.stderr().splitlines() if ln.startswith("hta: warning: worker pod")]
        if len(said) > 2:
            r.problems.append(f"{len(said)} warning lines about the pods (one per reason)")
        if took > K8S_START_TIMEOUT_S + 60:
            r.problems.append(f"took {took:.0f} s for a bound of {K8S_START_TIMEOUT_S} s")
        asked = [x for x in run.records() if x.get("kind") == "worker" and x["event"] == "requested"]
        r.fault += f"; {len(asked)} pods asked for"
        return r
    return run_it


def k8s_clean(bench: Bench) -> Result:
    wf = bench.workflow("k8s-clean")
    run = K8sRun(wf, [])
    rc, took = run.wait(900)
    bench.clean_s = took  # the bound of the Kubernetes cases
    return k8s_finish(bench, Result("k8s clean run", "none", 0), run, rc, took, True)


def case_skipped(why: str):
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        return Result(case.name, case.fault, 1, skipped=why)
    return run_it


K8S_CASES = [
    Case("k8s-pod-deleted", "delete a busy worker pod (grace 0)", 0, case_k8s_pod_deleted),
    Case("k8s-node-deleted", "delete a busy worker's node and kill its pods' processes (the machine is gone)", 0,
         case_k8s_node_deleted),
    Case("k8s-hta-sigkill", "SIGKILL HTA mid-run, then run again (adopts hta.io/run pods)", -9, case_k8s_hta_kill),
    Case("k8s-apiserver-restart", "kube-apiserver SIGKILLed mid-run, back after 30 s (watch: 410 Gone)", 0,
         case_k8s_apiserver),
    Case("k8s-shape-too-large", "--worker-cores 64 on 2-core nodes", 1,
         case_k8s_cannot_start(["--worker-cores", "64"], ["cannot be scheduled", "--worker-cores"]), complete=False),
    Case("k8s-node-max", f"every node of the {K8S_MAX_NODES} allowed held by other pods", 1,
         case_k8s_cannot_start([], ["cannot be scheduled", "Insufficient cpu", "add nodes"], blockers=K8S_MAX_NODES),
         complete=False),
    Case("k8s-master-unreachable", "--master-host 192.0.2.1 (the pods cannot reach the master)", 1,
         case_k8s_cannot_start(["--master-host", "192.0.2.1"], ["no worker reached the master", "--master-host"]),
         complete=False),
    Case("k8s-image-unpullable", "--image of an image no node can pull", 1,
         case_skipped("needs a real kubelet (kwok nodes pull nothing): tests/test_faults_k8s.py on cluster up "
                      "--real-node"), complete=False),
]

# -- Slurm ------------------------------------------------------------------------------------

SLURM = ROOT / "testcluster" / "slurm"
#: the Slurm test cluster of the --slurm cases: 2 static nodes and 2 cloud nodes of 2 cores, the
#: cloud ones booted in 5 s; the hta partition allows jobs of at most 60 minutes
SLURM_UP = ["--static-nodes", "2", "--cloud-nodes", "2", "--node-cores", "2", "--node-memory", "4000",
            "--resume-delay", "5", "--resume-jitter", "0.5", "--suspend-time", "10", "--max-time", "60"]
#: with Debian's slurmdbd and mariadb-server (scripts/setup.sh --accounting), the cluster keeps
#: accounting, and the user's default QOS lets 4 jobs be submitted at once (MaxSubmitJobsPerUser):
#: every case runs under it, as on a real HPC site
QOS_MAX_SUBMIT = 4
ACCOUNTING = shutil.which("slurmdbd") is not None and shutil.which("mariadbd") is not None


class SlurmCluster:
    """``testcluster/slurm`` for the Slurm cases (started by main, stopped at the end); its
    ``SLURM_CONF`` is put in this process's environment, so every run and command finds it."""

    def __init__(self, state: Path):
        self.state = state
        self.env = {**os.environ, "HTA_SLURM_DIR": str(state)}

    def up(self) -> None:
        extra = ["--accounting", "--qos-max-submit", str(QOS_MAX_SUBMIT)] if ACCOUNTING else []
        r = subprocess.run([str(SLURM), "up", *SLURM_UP, *extra], env=self.env, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise SystemExit(f"faults: error: the Slurm test cluster did not come up: {r.stderr.strip()[-500:]}")
        os.environ["SLURM_CONF"] = self.env["SLURM_CONF"] = r.stdout.strip().splitlines()[-1].split("=", 1)[1]

    def down(self) -> None:
        subprocess.run([str(SLURM), "down"], env=self.env, capture_output=True, text=True, timeout=300)
        os.environ.pop("SLURM_CONF", None)

    def jobs(self, states: str = "PENDING,CONFIGURING,RUNNING,COMPLETING") -> list[dict]:
        out = subprocess.run(["squeue", "--array", "-h", f"--states={states}", "-o", "%i|%j|%T|%N"], env=self.env,
                             capture_output=True, text=True).stdout
        return [dict(zip(("id", "name", "state", "node"), ln.split("|"))) for ln in out.splitlines() if ln.strip()]

    def clear(self) -> None:
        """Between cases: no job, every node back in service."""
        ids = [j["id"] for j in self.jobs()]
        if ids:
            subprocess.run(["scancel", *ids], env=self.env, capture_output=True)
        for n in ("s1", "s2", "c1", "c2"):
            subprocess.run(["scontrol", "update", f"nodename={n}", "state=resume"], env=self.env, capture_output=True)
        wait_for(lambda: not self.jobs(), 60)


SLURM_CLUSTER: SlurmCluster | None = None


def worker_of(job: dict) -> str:
    """The worker a job of the run is (an element of a job array too)."""
    from hta.backends.slurm.commands import worker_of as of

    return of(job["id"], job["name"])


class SlurmRun(Run):
    def __init__(self, workflow: Path, args: list[str], name: str = "run"):
        super().__init__(workflow, ["--backend", "slurm", "--worker-memory", "1000", "--worker-disk", "2000",
                                    "--latency-prior", "5", *args], name)


def slurm_finish(bench: Bench, r: Result, run: Run, rc, took: float, complete: bool,
                 rerun: Run | None = None) -> Result:
    from hta.backends.provider import run_id_for

    r = bench.finish(r, run, rc, took, complete, rerun=rerun)
    assert SLURM_CLUSTER is not None
    prefix = f"hta-{run_id_for(run.workflow)}-"  # this run's jobs (its workflow's path names them)
    mine = lambda: [j for j in SLURM_CLUSTER.jobs() if j["name"].startswith(prefix)]
    wait_for(lambda: not mine(), 15)
    jobs = mine()
    if jobs:
        r.left += len(jobs)
        r.problems.append(f"{len(jobs)} Slurm job(s) left")
    SLURM_CLUSTER.clear()
    return r


def busy_job(run: Run) -> dict | None:
    """A running Slurm job of ``run`` whose ``work_queue_worker`` runs a task (a child process);
    the worker's environment names its job."""
    from hta.backends.provider import run_id_for

    assert SLURM_CLUSTER is not None
    if run.running() < 1:
        return None
    prefix = f"hta-{run_id_for(run.workflow)}-"
    jobs = {j["id"]: j for j in SLURM_CLUSTER.jobs("RUNNING") if j["name"].startswith(prefix)}
    for p in psutil.process_iter(["name"]):
        if p.info["name"] != "work_queue_worker":
            continue
        try:
            job_id = p.environ().get("SLURM_JOB_ID")
            if job_id in jobs and p.children():
                return jobs[job_id]
        except psutil.Error:
            continue
    return None


def case_slurm_refused(extra: list[str], words: list[str], rc: int, env: dict | None = None,
                       ctld_down: bool = False):
    """A run Slurm cannot serve: one line naming ``words``, exit ``rc``, no job submitted."""
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        assert SLURM_CLUSTER is not None
        wf = bench.workflow(case.name)
        if ctld_down:
            subprocess.run([str(SLURM), "ctld", "down"], env=SLURM_CLUSTER.env, capture_output=True, timeout=60)
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        if os.environ.get("PATH") == "CCTOOLS_ONLY":  # a PATH with makeflow and the workers, without Slurm
            bindir = folder / "bin"
            bindir.mkdir(parents=True, exist_ok=True)
            for tool in ("makeflow", "makeflow_viz", "work_queue_worker", "python3", "sh"):
                found = shutil.which(tool, path=saved.get("PATH") or os.defpath)
                if found and not (bindir / tool).exists():
                    (bindir / tool).symlink_to(found)
            os.environ["PATH"] = str(bindir)
        try:
            run = SlurmRun(wf, extra)
            got, took = run.wait(bench.bound())
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if ctld_down:
                subprocess.run([str(SLURM), "ctld", "up"], env=SLURM_CLUSTER.env, capture_output=True, timeout=60)
        asked = [x for x in run.records() if x.get("kind") == "worker" and x["event"] == "requested"]
        r = slurm_finish(bench, Result(case.name, case.fault, rc), run, got, took, False)
        missing = [w for w in words if w not in r.message]
        if missing:
            r.problems.append(f"the line does not say {missing}")
        if asked:
            r.problems.append(f"{len(asked)} worker job(s) submitted")
        return r
    return run_it


def case_slurm_busy_fault(what: str):
    """A busy worker's job ends under it: its node set DOWN, preempted, or its time limit; the
    worker is lost, its tasks run again, the outputs are identical."""
    def run_it(bench: Bench, case: Case, folder: Path) -> Result:
        assert SLURM_CLUSTER is not None
        saved = bench.clean_s
        if what == "timeout":  # its 100 s rule runs twice, after Slurm's 30 s check: a longer bound
            bench.clean_s += 150 / BOUND_FACTOR
        try:
            return busy_fault(bench, case, what)
        finally:
            bench.clean_s = saved
    return run_it


def busy_fault(bench: Bench, case: Case, what: str) -> Result:
    """See :func:`case_slurm_busy_fault`."""
    assert SLURM_CLUSTER is not None
    wf = bench.workflow(case.name, case.extra_rules)
    run = SlurmRun(wf, [])
    victim = wait_for(lambda: busy_job(run), 120)
    if victim:
        time.sleep(1.5)  # some work done, to be lost
        env = SLURM_CLUSTER.env
        if what == "node-down":
            subprocess.run(["scontrol", "update", f"nodename={victim['node']}", "state=down",
                            "reason=fault-injection"], env=env, capture_output=True)
        elif what == "preempt":
            subprocess.run(["sbatch", "-p", "urgent", "--exclusive", "-w", victim["node"], "-J", "urgent", "-o",
                            "/dev/null", "--wrap", "sleep 2"], env=env, capture_output=True)
        else:  # every running job of the run: a time limit of one minute (Slurm checks every 30 s)
            for j in SLURM_CLUSTER.jobs("RUNNING"):
                subprocess.run(["scontrol", "update", f"JobId={j['id']}", "TimeLimit=1"], env=env,
                               capture_output=True)
    rc, took = run.wait(bench.bound())
    lost = [x for x in run.records() if x.get("kind") == "worker" and x["event"] == "lost"]
    r = slurm_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    want = {"node-down": "NODE_FAIL", "preempt": "PREEMPTED", "timeout": "TIMEOUT"}[what]
    if not victim:
        r.problems.append("no busy worker job")
    elif not any(want in x.get("reason", "") for x in lost):
        r.problems.append(f"no worker reported lost with {want}: {[x.get('reason') for x in lost]}")
    elif (r.lost or 0) < 1:
        r.problems.append("lost tasks not reported")
    else:
        r.message = next(x["reason"] for x in lost if want in x.get("reason", ""))
    return r


def case_slurm_never_fits(bench: Bench, case: Case, folder: Path) -> Result:
    """A rule longer than the longest job HTA may ask for (``--time-limit 1``, ``sleep 90``):
    the run ends with exit 1 within 3 minutes, in one line naming the rule's category, how
    long it ran and the limit; the summary counts the lost core·s."""
    wf_dir = folder / "wf"
    wf_dir.mkdir(parents=True)
    (wf_dir / "Makeflow").write_text("out.txt:\n\tsleep 90; echo done > out.txt\n")
    run = SlurmRun(wf_dir / "Makeflow", ["--time-limit", "1"])
    rc, took = run.wait(300)
    lost = [x for x in run.records() if x.get("kind") == "worker" and x.get("cause") == "time limit"]
    r = slurm_finish(bench, Result(case.name, case.fault, 1), run, rc, took, False)
    for words in ("category default", "1:00", "--max-task-losses"):
        if words not in r.message:
            r.problems.append(f"the line does not say {words!r}")
    if took > 180:
        r.problems.append(f"ended after {took:.0f} s (goal: within 3 minutes)")
    if len(lost) != 2 or not all(x.get("lost_work_core_s", 0) > 0 for x in lost):
        r.problems.append(f"{len(lost)} worker(s) lost to the time limit with their core·s (want 2)")
    said = " ".join(re.sub(r"[│┌┐└┘├┤─┬┴┼]", " ", run.out.read_text(errors="replace")).split())
    if "to time limit" not in said:  # (the summary's table may wrap the row)
        r.problems.append("the summary does not show the work lost to the time limit")
    return r


def case_slurm_qos_submit_limit(bench: Bench, case: Case, folder: Path) -> Result:
    """``--max-workers 8`` under a QOS that lets 4 jobs be submitted at once: never more than 4
    of HTA's jobs at once, the run completes, and the limit is named."""
    if not ACCOUNTING:
        return case_skipped("needs Debian's slurmdbd and mariadb-server: scripts/setup.sh --accounting")(
            bench, case, folder)
    wf = bench.workflow(case.name, case.extra_rules)
    run = SlurmRun(wf, ["--max-workers", "8"])
    rc, took = run.wait(bench.bound())
    peak = peak_jobs(run.records())
    r = slurm_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    said = [ln for ln in run.stderr().splitlines() if f"MaxSubmitJobsPerUser {QOS_MAX_SUBMIT}" in ln]
    if peak > QOS_MAX_SUBMIT:
        r.problems.append(f"{peak} jobs at once (the QOS allows {QOS_MAX_SUBMIT})")
    if not said:
        r.problems.append("the QOS limit is not named")
    r.fault += f"; at most {peak} jobs at once"
    if said:
        r.message = said[0][:120]
    return r


#: rules of 40 s each, 200 s of them per worker at --max-workers 2: more than a 3-minute job
FIT_RULES = "".join(f"fit{i}.txt:\n\tsleep 40; echo {i} > fit{i}.txt\n\n" for i in range(10))


def case_slurm_tasks_fit(bench: Bench, case: Case, folder: Path) -> Result:
    """Tasks that fit a 3-minute job, in a workflow that outlives any one job: exact outputs,
    no task cut at a time limit (workers take no task they cannot finish, and leave)."""
    saved = bench.clean_s
    bench.clean_s += 300 / BOUND_FACTOR
    try:
        wf = bench.workflow(case.name, case.extra_rules)
        run = SlurmRun(wf, ["--time-limit", "3", "--max-workers", "2"])
        rc, took = run.wait(bench.bound())
        workers = [x for x in run.records() if x.get("kind") == "worker"]
        r = slurm_finish(bench, Result(case.name, case.fault, 0), run, rc, took, True)
    finally:
        bench.clean_s = saved
    cut = [x for x in workers if x.get("cause") == "time limit" or "TIMEOUT" in x.get("reason", "")]
    left = [x for x in workers if x["event"] == "drained" and "time limit" in x.get("reason", "")]
    done = sorted(p.name for p in wf.parent.glob("fit*.txt"))
    if cut:
        r.problems.append(f"{len(cut)} worker(s) cut at the time limit: {cut[0].get('reason')}")
    if not left:
        r.problems.append("no worker left before its job's end: the case did not reach the limit")
    if len(done) != 10:
        r.problems.append(f"{len(done)} of the 10 40-s rules done")
    r.fault += f"; {len(left)} worker(s) left before their job's end, {len(cut)} cut"
    return r


def peak_jobs(recs: list[dict]) -> int:
    """The most worker jobs a run had at once (asked for or adopted, not yet ended), from its
    scaling log: a duplicate would push it past --max-workers. (The master may list an adopted
    worker that reconnected a moment before its job says which it is: counting observed workers
    + pending ones would count it twice for that moment.)"""
    live = peak = 0
    for x in recs:
        if x.get("kind") == "worker":
            live += 1 if x["event"] == "requested" else -1 if x["event"] in (
                "drained", "lost", "failed", "removed", "stopped") else 0
            peak = max(peak, live)
    return peak


def case_slurm_hta_kill(bench: Bench, case: Case, folder: Path) -> Result:
    assert SLURM_CLUSTER is not None
    wf = bench.workflow(case.name)
    run = SlurmRun(wf, [])
    wait_for(lambda: busy_job(run), 120)
    time.sleep(2)
    run.p.send_signal(signal.SIGKILL)
    rc, took = run.wait(60)
    survived = sorted(worker_of(j) for j in SLURM_CLUSTER.jobs())
    again = SlurmRun(wf, [], name="rerun")
    rc2, took2 = again.wait(bench.bound())
    recs = again.records()
    adopted = {x["worker"] for x in recs if x.get("kind") == "worker" and x["event"] == "requested"} & set(survived)
    peak = peak_jobs(recs)
    r = slurm_finish(bench, Result(case.name, case.fault, -9), run, rc, took + took2, True, rerun=again)
    if rc2 != 0:
        r.problems.append(f"re-run exit {rc2}")
    if survived and adopted != set(survived):
        r.problems.append(f"jobs not adopted: {sorted(set(survived) - adopted)}")
    if peak > 3:
        r.problems.append(f"duplicates: {peak} jobs at once (max 3)")
    r.fault += f"; {len(survived)} jobs survived it, {len(adopted)} adopted, at most {peak} at once; re-run exit {rc2}"
    return r


def slurm_clean(bench: Bench) -> Result:
    wf = bench.workflow("slurm-clean")
    run = SlurmRun(wf, [])
    rc, took = run.wait(900)
    bench.clean_s = took  # the bound of the Slurm cases
    return slurm_finish(bench, Result("slurm clean run", "none", 0), run, rc, took, True)


#: a rule that holds a worker past a one-minute time limit (Slurm checks limits every 30 s)
LONG_RULE = "long.txt:\n\tsleep 100; echo long > long.txt\n"

SLURM_CASES = [
    Case("slurm-no-sbatch", "sbatch not on PATH (CCTools on it)", 2,
         case_slurm_refused([], ["sbatch not found"], 2, env={"PATH": "CCTOOLS_ONLY"}), complete=False),
    Case("slurm-controller-down", "slurmctld killed before the run", 2,
         case_slurm_refused([], ["Unable to contact slurm controller", "start slurmctld"], 2, ctld_down=True),
         complete=False),
    Case("slurm-no-partition", "--partition nosuch", 2,
         case_slurm_refused(["--partition", "nosuch"], ["invalid partition", "--partition"], 2), complete=False),
    Case("slurm-over-time-limit", "--time-limit 2:00:00 on a partition of at most 60 minutes", 2,
         case_slurm_refused(["--time-limit", "2:00:00"], ["time limit"], 2), complete=False),
    Case("slurm-shape-too-large", "--worker-cores 64 on 2-core nodes (whole-node workers)", 1,
         case_slurm_refused(["--worker-cores", "64", "--policy", "hta:worker_shape=node"],
                            ["More processors requested than permitted", "--worker-cores"], 1), complete=False),
    Case("slurm-node-down", "scontrol update state=down on a busy worker's node", 0,
         case_slurm_busy_fault("node-down")),
    Case("slurm-preempted", "a job of a higher priority tier takes a busy worker's node (PreemptMode=CANCEL)", 0,
         case_slurm_busy_fault("preempt")),
    Case("slurm-timeout", "the run's jobs get a one-minute time limit mid-run (a 100 s rule holds one)", 0,
         case_slurm_busy_fault("timeout"), extra_rules=LONG_RULE),
    Case("slurm-hta-sigkill", "SIGKILL HTA mid-run, then run again (adopts its jobs)", -9, case_slurm_hta_kill),
    Case("slurm-never-fits", "--time-limit 1 and a rule of sleep 90 (it can never fit in a job)", 1,
         case_slurm_never_fits, complete=False),
    Case("slurm-qos-submit-limit", f"--max-workers 8 under a QOS of MaxSubmitJobsPerUser={QOS_MAX_SUBMIT}, eight "
         "20 s rules beside BLAST", 0, case_slurm_qos_submit_limit,
         extra_rules="".join(f"wide{i}.txt:\n\tsleep 20; echo {i} > wide{i}.txt\n\n" for i in range(8))),
    Case("slurm-tasks-fit", "--time-limit 3, --max-workers 2 and ten 40 s rules: the work outlives any job", 0,
         case_slurm_tasks_fit, extra_rules=FIT_RULES),
]


def table(results: list[Result], clean_s: float) -> str:
    rows = ["| case | fault | exit | outputs | tasks lost / re-run | left behind | time | vs clean "
            "| what the user saw | ok |",
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
    global K8S, SLURM_CLUSTER
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated case names (the clean run always runs)")
    ap.add_argument("--keep", type=Path, help="work here and keep the folders (default: a temporary folder)")
    ap.add_argument("--k8s", action="store_true", help="also the Kubernetes cases, on the local test cluster")
    ap.add_argument("--slurm", action="store_true", help="also the Slurm cases, on the local Slurm test cluster")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    every = CASES + K8S_CASES + SLURM_CASES
    unknown = only - {c.name for c in every}
    if unknown:
        print(f"faults: error: unknown case(s) {', '.join(sorted(unknown))}: choose from "
              f"{', '.join(c.name for c in every)}", file=sys.stderr)
        return 2
    k8s = args.k8s or any(n.startswith("k8s-") for n in only)
    slurm = args.slurm or any(n.startswith("slurm-") for n in only)
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
    local_clean_s = bench.clean_s
    print(table(results, bench.clean_s))
    k8s_results: list[Result] = []
    if k8s:
        K8S = K8s(root / "cluster")
        try:
            K8S.up()
            k8s_results.append(k8s_clean(bench))
            print(f"k8s clean run: {bench.clean_s:.1f} s", file=sys.stderr)
            for case in K8S_CASES:
                if (only and case.name not in only) or not k8s_results[0].ok:
                    continue
                r = run_case(bench, case)
                if not r.skipped:
                    K8S.clear()
                k8s_results.append(r)
                print(f"{case.name}: {'ok' if r.ok else 'FAILED: ' + '; '.join(r.problems)} ({r.seconds:.0f} s)",
                      file=sys.stderr)
        finally:
            K8S.down()
        print("\nKubernetes (local test cluster):\n")
        print(table(k8s_results, bench.clean_s))
    k8s_clean_s = bench.clean_s
    slurm_results: list[Result] = []
    if slurm:
        state = Path(tempfile.mkdtemp(prefix="hta-faults-slurm-", dir="/tmp"))
        state.chmod(0o755)  # munged reaches its socket through it
        SLURM_CLUSTER = SlurmCluster(state / "cluster")
        try:
            SLURM_CLUSTER.up()
            slurm_results.append(slurm_clean(bench))
            print(f"slurm clean run: {bench.clean_s:.1f} s", file=sys.stderr)
            for case in SLURM_CASES:
                if (only and case.name not in only) or not slurm_results[0].ok:
                    continue
                r = run_case(bench, case)
                SLURM_CLUSTER.clear()
                slurm_results.append(r)
                print(f"{case.name}: {'ok' if r.ok else 'FAILED: ' + '; '.join(r.problems)} ({r.seconds:.0f} s)",
                      file=sys.stderr)
        finally:
            SLURM_CLUSTER.down()
            shutil.rmtree(state, ignore_errors=True)
        print("\nSlurm (local Slurm test cluster):\n")
        print(table(slurm_results, bench.clean_s))
    print(f"\n{len(results) + len(k8s_results) + len(slurm_results)} runs in {time.time() - t0:.0f} s on "
          f"{os.cpu_count()} cores; bound per case {BOUND_FACTOR:g}× the clean run ({local_clean_s:.0f} s"
          + (f"; on Kubernetes {k8s_clean_s:.0f} s" if k8s else "")
          + (f"; on Slurm {bench.clean_s:.0f} s" if slurm else "") + f") + {BOUND_PLUS_S:g} s")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(r.ok for r in results + k8s_results + slurm_results) else 1


if __name__ == "__main__":
    sys.exit(main())
