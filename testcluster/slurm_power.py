"""The test cluster's ``ResumeProgram`` and ``SuspendProgram``: a cloud node's boot and power-off.

Slurm's power saving calls ``resume HOSTLIST`` when jobs need powered-down ``State=CLOUD``
nodes and ``suspend HOSTLIST`` when nodes stayed idle ``SuspendTime``. Here a node's
"machine" is its ``slurmd -N NODE``: ``resume`` starts, for each node, a detached process
that waits the boot delay (``power.json``: mean ± uniform jitter) and then becomes the
node's ``slurmd`` (the same PID, in ``run/node-NODE.pid``, so ``down`` stops it in either
phase); ``suspend`` stops it. Each change is a line of ``power.log``: ``UNIXTIME resume|up|off
NODE`` (node time is billed from ``resume`` to ``off``). ``resume-fail`` (Slurm's
``ResumeFailProgram``) stops what did not boot in ``ResumeTimeout``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CONF = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))


def settings() -> dict:
    return json.loads((CONF.parent / "power.json").read_text())


_log_lock = threading.Lock()


def log(state: Path, what: str, node: str) -> None:
    with _log_lock, open(state / "power.log", "a") as f:
        f.write(f"{time.time():.3f} {what} {node}\n")


def hostnames(hostlist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def pidfile(state: Path, node: str) -> Path:
    return state / "run" / f"node-{node}.pid"


def boot(node: str, delay_s: float) -> None:
    """The node's machine: wait its boot, then run its slurmd until told to power off. slurmd
    runs in a time namespace whose clock says the machine booted a second ago: slurmctld takes
    a powering-up node's registration only from a node that rebooted after it was resumed."""
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda n, _f: stopping.append(n))
    deadline = time.monotonic() + max(0.0, delay_s)
    while not stopping and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    if stopping:
        return
    s = settings()
    state = Path(s["state"])
    log(state, "up", node)
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    with open(state / "logs" / f"slurmd-{node}.out", "ab") as out:
        p = subprocess.Popen(["unshare", "--time", f"--boottime=-{max(0, uptime - 1)}", "--fork", "--kill-child",
                              s["slurmd"], "-D", "-N", node, "-f", str(CONF)],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    while p.poll() is None and not stopping:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=3)
            break
        except subprocess.TimeoutExpired:
            continue


def resume(hostlist: str) -> None:
    s = settings()
    state = Path(s["state"])
    for node in hostnames(hostlist):
        delay = s["delay_s"] + random.uniform(-1.0, 1.0) * s["jitter_s"]
        log(state, "resume", node)
        p = subprocess.Popen([sys.executable, "-m", "testcluster.slurm_power", "boot", node, f"{delay:.3f}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, cwd=Path(__file__).resolve().parents[1])
        pidfile(state, node).write_text(str(p.pid))


def stop(node: str, state: Path) -> None:
    f = pidfile(state, node)
    try:
        pid = int(f.read_text())
    except (OSError, ValueError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + 3
        while time.time() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                pass
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{pid}/stat").exists() and \
                    Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                break
            time.sleep(0.05)
        else:
            continue
        break
    f.unlink(missing_ok=True)


def suspend(hostlist: str) -> None:
    """Every node of the list at once, as a cloud's API powers a batch off: one after another
    (each slurmd takes up to 3 s to stop), the last of 20 nodes idle since the same moment
    went off a minute after the first, and was billed that minute."""
    state = Path(settings()["state"])

    def off(node: str) -> None:
        stop(node, state)
        log(state, "off", node)

    threads = [threading.Thread(target=off, args=(node,)) for node in hostnames(hostlist)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(argv: list[str]) -> int:
    what, args = argv[0], argv[1:]
    if what == "boot":
        boot(args[0], float(args[1]))
    elif what == "resume":
        resume(args[0])
    elif what in ("suspend", "resume-fail"):
        suspend(args[0])
    else:
        print(f"slurm_power: unknown action {what!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
