"""The local Slurm test cluster: ``testcluster/slurm up|down|status``.

Debian's Slurm 22.05 and munge, on this machine, in a folder of their own
(``$HTA_SLURM_DIR``, default ``/tmp/hta-slurm``) with ports of their own:

- ``munged`` as the ``munge`` user, with its own key and socket (slurm.conf's
  ``AuthInfo=socket=...``), so a munged of the host is neither needed nor touched;
- ``slurmctld``, and one ``slurmd -N NODE`` per static node (Debian's build has
  ``MULTIPLE_SLURMD``: each node its own port and spool, all on 127.0.0.1);
- ``State=CLOUD`` nodes: Slurm's own power saving boots them. Its ``ResumeProgram``
  (:mod:`testcluster.slurm_power`) starts the node's ``slurmd`` after the boot delay
  (default: the thesis's 157.4 ± 4.2 s ÷ ``--k``), its ``SuspendProgram`` stops it once
  the node has been idle ``--suspend-time``. Every power change is a line of
  ``power.log`` (the node time a cloud would bill: :func:`node_seconds`).

With ``--accounting``: Debian's ``mariadbd`` (a data folder, socket and port of its own,
as root) and ``slurmdbd`` behind it, so that QOS limits are real: the cluster, an account
``hta`` with the user running ``up``, and a QOS ``limited`` (the user's default, with
``--qos-max-submit N``: ``MaxSubmitJobsPerUser=N``), enforced
(``AccountingStorageEnforce=associations,limits,qos``). The plain cluster has no
accounting and stays light.

Two partitions: ``hta`` (default, every node) and ``urgent`` (the same nodes, a higher
priority tier whose jobs preempt ``hta``'s by cancelling them: the preemption fault).
Nodes trust the configured cores and memory (``SlurmdParameters=config_overrides``), so a
2-core machine can hold nodes of 3 cores: the test workloads sleep.

``up`` prints ``export SLURM_CONF=...`` last; an ``up`` that fails stops what it started.
``ctld down|up`` kills slurmctld and starts it again (fault injection).
``down`` cancels every job, stops every daemon and boot it started (by PID, from
``pids.json`` and ``run/*.pid``), the jobs' ``slurmstepd`` and their processes, and
removes the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("HTA_SLURM_DIR", "/tmp/hta-slurm"))
#: the thesis's node preparation latency on GKE (Zheng 2019), mean ± sd, s
THESIS_LATENCY_S, THESIS_LATENCY_SD_S = 157.4, 4.2
#: every process this cluster starts carries this variable (set to STATE): ``down`` finds the
#: ``slurmstepd`` of its jobs by it, after their ``slurmd`` is gone
MARK = "HTA_SLURM_CLUSTER"
ROOT = Path(__file__).resolve().parents[1]


def conf() -> Path:
    return STATE / "slurm.conf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(what: str, check, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    last = ""
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 — not up yet: ask again
            last = f" ({exc})"
        time.sleep(0.2)
    raise SystemExit(f"slurm: {what} did not become ready within {timeout:.0f}s{last} (logs: {STATE}/logs)")


def env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf()), MARK: str(STATE)}


def start(name: str, cmd: list[str], pids: dict, user: str | None = None) -> int:
    log = open(STATE / "logs" / f"{name}.log", "ab")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env(), user=user)
    log.close()
    pids[name] = p.pid
    (STATE / "pids.json").write_text(json.dumps(pids))
    return p.pid


def node_names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(1, n + 1)]


def write_conf(args: argparse.Namespace, ctld_port: int, ports: dict[str, int], dbd_port: int = 0) -> None:
    """slurm.conf: every path in STATE, every node on 127.0.0.1 with its own port."""
    host = socket.gethostname().split(".")[0]
    statics = node_names("s", args.static_nodes)
    clouds = node_names("c", args.cloud_nodes)
    py = sys.executable
    power = f"{py} -m testcluster.slurm_power"
    for what in ("resume", "suspend", "resume-fail"):
        script = STATE / f"{what}.sh"
        script.write_text(f"#!/bin/sh\n# Slurm's {what} program for this cluster's cloud nodes\ncd {ROOT}\n"
                          f"export PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF={conf()} {MARK}={STATE}\n"
                          f"exec {power} {what} \"$@\"\n")
        script.chmod(0o755)
    (STATE / "power.json").write_text(json.dumps({
        "state": str(STATE), "slurmd": shutil.which("slurmd") or "/usr/sbin/slurmd", "delay_s": args.resume_delay,
        "jitter_s": args.resume_jitter}))
    node_lines = []
    for name in statics + clouds:
        node_lines.append(f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={ports[name]} "
                          f"CPUs={args.node_cores} RealMemory={args.node_memory} "
                          f"State={'CLOUD' if name in clouds else 'UNKNOWN'}")
    every = ",".join(statics + clouds)
    lines = [
        "# the local Slurm test cluster (testcluster/slurm_cluster.py); generated",
        "ClusterName=hta-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={STATE / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={STATE / 'ctld'}",
        f"SlurmdSpoolDir={STATE / 'spool'}/%n",
        f"SlurmctldPidFile={STATE / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={STATE / 'run'}/slurmd-%n.pidfile",
        f"SlurmctldLogFile={STATE / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={STATE / 'logs'}/slurmd-%n.log",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_min_interval=100000",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2", "MpiDefault=none", "LaunchParameters=use_interactive_step",
        "JobAcctGatherType=jobacct_gather/none",
        *(["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
           f"AccountingStoragePort={dbd_port}", "AccountingStorageEnforce=associations,limits,qos",
           # (the munge socket slurmdbd's clients use: this cluster's own, as AuthInfo's)
           f"AccountingStoragePass={STATE / 'munge' / 'munge.socket'}"]
          if dbd_port else ["AccountingStorageType=accounting_storage/none"]),
        "JobCompType=jobcomp/filetxt", f"JobCompLoc={STATE / 'jobcomp.txt'}",
        "EnforcePartLimits=ALL",
        "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
        "KillWait=5", "MinJobAge=600", "SlurmdTimeout=30", "MessageTimeout=10", "InactiveLimit=0",
        "TreeWidth=65533", "CommunicationParameters=NoAddrCache",
        # Slurm's power saving: the elastic part of the cluster
        f"ResumeProgram={STATE / 'resume.sh'}", f"SuspendProgram={STATE / 'suspend.sh'}",
        f"ResumeFailProgram={STATE / 'resume-fail.sh'}",
        f"SuspendTime={max(1, round(args.suspend_time))}", "SuspendTimeout=5",
        f"ResumeTimeout={max(30, round(args.resume_delay + args.resume_jitter + 60))}",
        "ResumeRate=0", "SuspendRate=0",
        "SlurmctldParameters=idle_on_node_suspend,enable_configless",
        *node_lines,
        f"PartitionName=hta Nodes={every} Default=YES MaxTime={args.max_time} State=UP PriorityTier=1",
        f"PartitionName=urgent Nodes={every} MaxTime=INFINITE State=UP PriorityTier=10",
    ]
    if statics:
        lines.insert(lines.index("ResumeRate=0"), f"SuspendExcNodes={','.join(statics)}")
    conf().write_text("\n".join(lines) + "\n")


def start_munge(pids: dict) -> None:
    """munged as the munge user, with a key, socket, log and seed of this cluster's own."""
    if shutil.which("munged") is None or shutil.which("slurmctld") is None:
        raise SystemExit("slurm: munged or slurmctld not found: run scripts/setup.sh (it installs Debian's "
                         "slurm-wlm and munge)")
    try:
        munge = pwd.getpwnam("munge")
    except KeyError:
        raise SystemExit("slurm: there is no munge user: install Debian's munge (scripts/setup.sh)") from None
    d = STATE / "munge"
    d.mkdir()
    d.chmod(0o711)  # the socket must be reachable by every user; the key stays 0400
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for p in (d, key):
        os.chown(p, munge.pw_uid, munge.pw_gid)
    start("munged", ["munged", "-F", f"--socket={d / 'munge.socket'}", f"--key-file={key}",
                     f"--log-file={d / 'munged.log'}", f"--pid-file={d / 'munged.pid'}",
                     f"--seed-file={d / 'munged.seed'}"], pids, user="munge")
    wait_for("munged", lambda: (d / "munge.socket").exists(), 15)


#: the accounting database's user and password (a database of this cluster's own, on 127.0.0.1)
DB_USER, DB_PASS = "slurm", "hta-test"


def sql(statement: str) -> None:
    done = subprocess.run(["mariadb", f"--socket={STATE / 'db' / 'mysql.sock'}", "-u", "root", "-e", statement],
                          capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(done.stderr.strip())


def start_accounting(pids: dict, db_port: int, dbd_port: int) -> None:
    """mariadbd and slurmdbd of this cluster's own (``--accounting``; see the module)."""
    for tool in ("mariadbd", "mariadb-install-db", "slurmdbd"):
        if shutil.which(tool) is None:
            raise SystemExit(f"slurm: {tool} not found: --accounting needs Debian's mariadb-server and slurmdbd "
                             f"(scripts/setup.sh --accounting installs them)")
    db = STATE / "db"
    (db / "data").mkdir(parents=True)
    done = subprocess.run(["mariadb-install-db", f"--datadir={db / 'data'}", "--user=root",
                           "--auth-root-authentication-method=socket", "--skip-test-db"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise SystemExit(f"slurm: mariadb-install-db failed: {done.stderr.strip()[-300:]}")
    start("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db / 'data'}", f"--socket={db / 'mysql.sock'}",
                       f"--port={db_port}", "--bind-address=127.0.0.1", f"--pid-file={db / 'mariadbd.pid'}",
                       "--user=root", "--innodb-buffer-pool-size=64M", "--skip-log-bin"], pids)
    wait_for("mariadbd", lambda: sql("SELECT 1") is None, 60)
    sql(f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; "
        f"GRANT ALL ON slurm_acct_db.* TO '{DB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;")
    dbd_conf = STATE / "slurmdbd.conf"
    dbd_conf.write_text("\n".join([
        "# the local Slurm test cluster's accounting (testcluster/slurm_cluster.py); generated",
        "AuthType=auth/munge", f"AuthInfo=socket={STATE / 'munge' / 'munge.socket'}",
        "DbdHost=localhost", f"DbdPort={dbd_port}", "SlurmUser=root",
        f"PidFile={STATE / 'run' / 'slurmdbd.pid'}", f"LogFile={STATE / 'logs' / 'slurmdbd.log'}",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
        f"StorageUser={DB_USER}", f"StoragePass={DB_PASS}", "StorageLoc=slurm_acct_db", ""]))
    dbd_conf.chmod(0o600)
    start("slurmdbd", ["slurmdbd", "-D"], pids)  # (it reads slurmdbd.conf beside $SLURM_CONF)
    wait_for("slurmdbd", lambda: subprocess.run(["sacctmgr", "-n", "show", "cluster"], env=env(), capture_output=True,
                                                timeout=10).returncode == 0, 60)


def sacctmgr(*words: str) -> None:
    done = subprocess.run(["sacctmgr", "-i", *words], env=env(), capture_output=True, text=True, timeout=30)
    if done.returncode and "nothing new added" not in (done.stdout + done.stderr).lower():
        raise SystemExit(f"slurm: sacctmgr {' '.join(words)}: {(done.stderr or done.stdout).strip()}")


def add_associations(args: argparse.Namespace) -> None:
    """The cluster, account ``hta``, the user, and QOS ``limited`` as the user's default."""
    user = pwd.getpwuid(os.getuid()).pw_name
    sacctmgr("add", "cluster", "hta-test")
    sacctmgr("add", "account", "hta", "cluster=hta-test", "description=hta", "organization=hta")
    limits = [f"MaxSubmitJobsPerUser={args.qos_max_submit}"] if args.qos_max_submit else []
    sacctmgr("add", "qos", "limited", *limits)
    sacctmgr("add", "user", user, "account=hta", "cluster=hta-test", "qos=normal,limited", "defaultqos=limited")
    sacctmgr("modify", "user", user, "set", "defaultaccount=hta")


def sinfo_states() -> dict[str, str]:
    out = subprocess.run(["sinfo", "-N", "-h", "-o", "%N %T"], env=env(), capture_output=True, text=True,
                         timeout=15)
    if out.returncode:
        raise RuntimeError(out.stderr.strip())
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def up(args: argparse.Namespace) -> None:
    shutil.rmtree(STATE, ignore_errors=True)
    for sub in ("logs", "ctld", "spool", "run"):
        (STATE / sub).mkdir(parents=True)
    STATE.chmod(0o755)
    pids: dict[str, int] = {}
    (STATE / "pids.json").write_text("{}")
    start_munge(pids)
    statics = node_names("s", args.static_nodes)
    ports = {n: free_port() for n in statics + node_names("c", args.cloud_nodes)}
    ctld_port = free_port()
    dbd_port = free_port() if args.accounting else 0
    write_conf(args, ctld_port, ports, dbd_port)
    if args.accounting:
        start_accounting(pids, free_port(), dbd_port)
        add_associations(args)
    for n in ports:
        (STATE / "spool" / n).mkdir()
    start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf())], pids)
    wait_for("slurmctld", lambda: subprocess.run(["scontrol", "ping"], env=env(), capture_output=True, text=True,
                                                 timeout=10).stdout.count("UP") > 0, 30)
    for n in statics:
        start(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(conf())], pids)
    wait_for(f"{len(statics)} static node(s)",
             lambda: all(sinfo_states().get(n, "").rstrip("*~#%") in ("idle", "mixed", "allocated") for n in statics),
             60)
    print(f"slurm: up in {STATE}: {len(statics)} static and {args.cloud_nodes} cloud node(s) of "
          f"{args.node_cores} cores and {args.node_memory} MB; cloud nodes boot in {args.resume_delay:.1f} ± "
          f"{args.resume_jitter:.1f} s and power off after {args.suspend_time:.0f} s idle", file=sys.stderr)
    print(f"export SLURM_CONF={conf()}")


def stop_pid(pid: int, grace_s: float = 5.0) -> None:
    if not pid or not alive(pid):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + grace_s
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return


def marked_processes() -> list[int]:
    """Processes started with this cluster's mark (daemons, boots, the jobs' slurmstepd)."""
    me = os.getpid()
    tag = f"{MARK}={STATE}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if tag in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def down(_: argparse.Namespace | None = None) -> None:
    if not STATE.exists():
        print("slurm: down", file=sys.stderr)
        return
    pids: dict[str, int] = {}
    try:
        pids = json.loads((STATE / "pids.json").read_text())
    except (OSError, ValueError):
        pass
    if conf().exists() and alive(pids.get("slurmctld", 0)):
        subprocess.run(["scancel", "--full", "--quiet", "--user", pwd.getpwuid(os.getuid()).pw_name], env=env(),
                       capture_output=True, timeout=30)
    # boots and cloud slurmds (ResumeProgram's), then the static ones, slurmctld, munged last
    booted = [int(p.read_text() or 0) for p in (STATE / "run").glob("node-*.pid") if p.read_text().strip()]
    for pid in booted:
        stop_pid(pid)
    last = {"slurmctld": 1, "slurmdbd": 2, "mariadbd": 3, "munged": 4}
    for name in sorted(pids, key=lambda n: last.get(n, 0)):
        stop_pid(pids[name])
    # what outlived its slurmd: the jobs' slurmstepd and their processes
    for pid in marked_processes():
        for victim in [pid, *descendants(pid)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.time() + 10
    while marked_processes() and time.time() < deadline:
        time.sleep(0.1)
    left = marked_processes()
    shutil.rmtree(STATE, ignore_errors=True)
    if left:
        raise SystemExit(f"slurm: processes still alive after down: {left}")
    print("slurm: down", file=sys.stderr)


def status(_: argparse.Namespace) -> None:
    f = STATE / "pids.json"
    if not f.exists():
        print("slurm: down")
        raise SystemExit(1)
    pids = json.loads(f.read_text())
    bad = 0
    for name, pid in pids.items():
        ok = alive(pid)
        bad += not ok
        print(f"{name:16s} {'running' if ok else 'NOT RUNNING'} {pid}")
    try:
        for node, state in sorted(sinfo_states().items()):
            print(f"node {node:11s} {state}")
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"sinfo: {exc}")
        bad += 1
    print(f"export SLURM_CONF={conf()}")
    raise SystemExit(1 if bad else 0)


def ctld(args: argparse.Namespace) -> None:
    """Fault injection: stop slurmctld (SIGKILL, as a crash) or start it again (its state is
    kept in STATE/ctld: the jobs it knew are recovered)."""
    pids = json.loads((STATE / "pids.json").read_text())
    if args.action == "down":
        pid = pids.get("slurmctld", 0)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
            wait_for("slurmctld to stop", lambda: not alive(pid), 15)
    else:
        if not alive(pids.get("slurmctld", 0)):
            start("slurmctld", ["slurmctld", "-D", "-f", str(conf())], pids)
        wait_for("slurmctld", lambda: "UP" in subprocess.run(["scontrol", "ping"], env=env(), capture_output=True,
                                                             text=True, timeout=10).stdout, 30)
    print(f"slurmctld {args.action}", file=sys.stderr)


def node_seconds(power_log: Path, t0: float, t1: float, static: int = 0) -> float:
    """Node·s paid between Unix times ``t0`` and ``t1``: each cloud node from the moment Slurm
    asked to resume it until its suspend finished (``power.log``), and ``static`` nodes all along."""
    on: dict[str, float] = {}
    total = static * max(0.0, t1 - t0)
    for line in power_log.read_text().splitlines() if power_log.exists() else []:
        m = re.match(r"(\S+) (resume|off) (\S+)", line)
        if not m:
            continue
        t, what, node = float(m.group(1)), m.group(2), m.group(3)
        if what == "resume":
            on.setdefault(node, t)
        elif node in on:
            total += max(0.0, min(t, t1) - max(on.pop(node), t0))
    return total + sum(max(0.0, t1 - max(s, t0)) for s in on.values())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="slurm", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--static-nodes", type=int, default=2, help="nodes always on (default 2)")
    u.add_argument("--cloud-nodes", type=int, default=4, help="State=CLOUD nodes Slurm powers up (default 4)")
    u.add_argument("--node-cores", type=int, default=3, help="cores of each node (default 3: a 4-vCPU node)")
    u.add_argument("--node-memory", type=int, default=16000, help="memory of each node, MB")
    u.add_argument("--k", type=float, default=20.0, help="time compression of the defaults below (default 20)")
    u.add_argument("--resume-delay", type=float, default=None,
                   help="seconds a cloud node takes to boot (default: 157.4 ÷ k, the thesis's GKE node)")
    u.add_argument("--resume-jitter", type=float, default=None, help="± seconds, uniform (default 4.2 ÷ k)")
    u.add_argument("--suspend-time", type=float, default=None,
                   help="a cloud node idle this long powers off (default 600 ÷ k, the cluster autoscaler's 10 min)")
    u.add_argument("--max-time", default="INFINITE", help="the hta partition's MaxTime (default INFINITE)")
    u.add_argument("--accounting", action="store_true",
                   help="run slurmdbd on a MariaDB of its own, so that QOS limits are enforced (needs Debian's "
                        "slurmdbd and mariadb-server: scripts/setup.sh --accounting)")
    u.add_argument("--qos-max-submit", type=int, default=0, metavar="N",
                   help="with --accounting: the user's default QOS allows N submitted jobs (MaxSubmitJobsPerUser)")
    u.set_defaults(func=up)
    sub.add_parser("down").set_defaults(func=down)
    sub.add_parser("status").set_defaults(func=status)
    c = sub.add_parser("ctld", help="fault injection: stop (SIGKILL) or start slurmctld")
    c.add_argument("action", choices=["down", "up"])
    c.set_defaults(func=ctld)
    args = ap.parse_args(argv)
    if args.func is not up:
        args.func(args)
        return
    args.resume_delay = THESIS_LATENCY_S / args.k if args.resume_delay is None else args.resume_delay
    args.resume_jitter = THESIS_LATENCY_SD_S / args.k if args.resume_jitter is None else args.resume_jitter
    args.suspend_time = 600.0 / args.k if args.suspend_time is None else args.suspend_time
    if args.qos_max_submit and not args.accounting:
        raise SystemExit("slurm: --qos-max-submit needs --accounting (QOS limits are kept by slurmdbd)")
    if args.static_nodes < 0 or args.cloud_nodes < 0 or args.static_nodes + args.cloud_nodes == 0:
        raise SystemExit("slurm: give at least one node (--static-nodes, --cloud-nodes)")
    if os.geteuid() != 0:
        raise SystemExit("slurm: the test cluster runs slurmctld and slurmd as root: run it as root")
    f = STATE / "pids.json"
    if f.exists() and any(alive(p) for p in json.loads(f.read_text() or "{}").values()):
        raise SystemExit(f"slurm: already up (state in {STATE}); run `testcluster/slurm down` first")
    try:
        up(args)
    except BaseException:
        down()  # a cluster that did not come up leaves nothing running
        raise


if __name__ == "__main__":
    main()
