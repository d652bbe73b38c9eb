"""The ``hta`` command line.

    hta makeflow [options] WORKFLOW [-- makeflow args]   run a workflow, autoscaled
    hta simulate [options]                               compare policies in the simulator
    hta report LOG... [--format F] [--plot DIR]          what the autoscaler did
    hta set WORKFLOW|URL --max-workers N ...             change a running run's cap, deadline or budget
    hta worker --master HOST:PORT [options]              a worker with its effective capacity, and CSS
    hta css --worker-pid PID | --pid PID | --cgroup DIR  the CSS classifier and pinner

Bad input is one line on stderr starting ``hta: error:`` and a non-zero exit.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from hta.errors import EXIT_USAGE, UsageError
from hta.interrupts import Interrupted, hold_signals, note_hangups, raise_on_signals
from hta.node.css.plan import PLAN_STYLES


def _positive_int(name: str, minimum: int = 1):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, not {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, not {v}")
        return v
    return parse


def _seconds(name: str, minimum: float = 0.0):
    return _quantity(name, minimum, "seconds", "s")


def _quantity(name: str, minimum: float, noun: str, unit: str = ""):
    """A number of ``noun`` (``unit`` after a figure), at least ``minimum``."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number of {noun}, not {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number of {noun}, not {text!r}")
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum:g}{unit}, not {v:g}")
        return v
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, with the fix
        self.exit(EXIT_USAGE, f"hta: error: {message} (see: {self.prog} --help)\n")


class _KeepsLists(argparse.HelpFormatter):
    """Wraps prose as argparse does, and keeps a text of several lines (a list) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


#: the built-in policies as ``hta makeflow --help`` lists them: a name and what it trades,
#: one line each (``hta.policies.registry`` makes them; kept here, as importing it is not light)
POLICY_LINES: tuple[tuple[str, str], ...] = (
    ("hta", "the default: buys what the queue will lack a latency ahead"),
    ("hta-time", "HTA for runtime: buys for all that waits at the horizon"),
    ("hta-cost", "HTA for node·s: buys only workers the backlog keeps busy"),
    ("factory", "rival: CCTools' work_queue_factory"),
    ("keda-job[-N]", "rival: KEDA ScaledJob, a job per N waiting tasks (N=1)"),
    ("keda-N", "rival: KEDA ScaledObject, N tasks a pod; deletes busy pods"),
    ("hpa-N", "rival: Kubernetes HPA at N % CPU"),
    ("static", "rival: --max-workers workers the whole run long"),
    ("max-then-drain", "rival: --max-workers at once, drained once nothing waits"),
    ("observe", "buys nothing: watches another autoscaler, records the run"),
)


def _policy_list() -> str:
    """The policies ``--policy`` takes, one line each (``<policy>:<setting>=<value>`` sets one)."""
    width = max(len(name) for name, _ in POLICY_LINES)
    lines = [f"  {name:<{width}}  {what}" for name, what in POLICY_LINES]
    return ("policies (--policy):\n" + "\n".join(lines)
            + "\n  (POLICY:setting=value,... changes one setting: docs/commands.md)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hta")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _verbosity(p: argparse.ArgumentParser, default) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="say every decision with its reasoning")
    g.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="print only errors and the summary")


def _makeflow_options(p: argparse.ArgumentParser) -> None:
    """The options of ``hta makeflow`` (and ``hta config``). Their defaults live in one
    place, :class:`hta.submit.options.MakeflowOptions`: here they are only shown in the help, and a
    flag not given is left out, so that a config file or the environment can set it."""
    p.add_argument("--backend", default="local",
                   help="where workers run: local processes (local, the default), Kubernetes pods (k8s), Slurm "
                        "batch jobs (slurm), or a provider a package registers (docs/providers.md)")
    k = p.add_argument_group("Kubernetes backend")
    k.add_argument("--kubeconfig", default=None, metavar="FILE",
                   help="default: in-cluster config in a pod, else $KUBECONFIG or ~/.kube/config")
    k.add_argument("--namespace", default="default")
    k.add_argument("--image", default="localhost/hta-worker:latest",
                   help="worker image (default: the one k8s/image/build.sh builds)")
    k.add_argument("--master-host", default=None, metavar="HOST",
                   help="address workers use to reach the master (default: this host's routable address)")
    k.add_argument("--host-network", action="store_true", help="worker pods use the node's network")
    k.add_argument("--worker-start-timeout", type=_seconds("--worker-start-timeout", 1), default=None, metavar="S",
                   help="end the run when no worker pod could start (unschedulable, image not pulled, worker not "
                        "reaching the master) for this long (default: 300 s)")
    sl = p.add_argument_group("Slurm backend", "each worker is a batch job (sbatch); --master-host and "
                                               "--worker-start-timeout apply too")
    sl.add_argument("--partition", default=None, help="partition of the worker jobs (default: the cluster's)")
    sl.add_argument("--account", default=None, help="account to charge the worker jobs to")
    sl.add_argument("--qos", default=None, help="quality of service of the worker jobs")
    sl.add_argument("--time-limit", default=None, metavar="TIME",
                    help="the longest worker job HTA asks for, as sbatch --time takes it (30, 2:00:00, 1-12); "
                         "default: the partition's MaxTime or the QOS's MaxWall. A worker takes no task it cannot "
                         "finish before its job's end")
    sl.add_argument("--max-task-losses", type=_positive_int("--max-task-losses"), default=None, metavar="N",
                    help="end the run (exit 1) once N tasks of one category were cut at a time limit they can "
                         "never fit in (default 2)")
    sl.add_argument("--sbatch-args", default=None, metavar="ARGS",
                    help="more sbatch arguments for every worker job, as shell words (\"--constraint=skylake "
                         "--exclusive\")")
    p.add_argument("--port", type=_positive_int("--port", 0), default=None,
                   help="master port (default: any free port locally, 9123 on Kubernetes and one fixed by the "
                        "workflow's path on Slurm, so a restarted HTA's workers find their master again)")
    p.add_argument("--policy", default="hta", help="scaling policy (default: hta)")
    p.add_argument("--deadline", default=None, metavar="WHEN",
                   help="the time-cost dial, for HTA's policy (hta, hta-time, hta-cost): finish by WHEN, paying "
                        "the fewest node·s the forecast allows. WHEN is a duration from now (a bare number is "
                        "seconds: 5400; 90m, 2h, 1h30m, 1.5h; Slurm's H:MM:SS and days-H[:MM[:SS]]: 1:30:00, "
                        "0-01:30, 1-12:00:00) or a clock time: HH:MM is always one (09:00, the next 09:00; so "
                        "Slurm's MM:SS is not taken), or an ISO date-time (2026-12-07T09:00; its zone if given, "
                        "else local time). Not with --budget")
    p.add_argument("--budget", default=None, metavar="AMOUNT",
                   help="the time-cost dial, for HTA's policy (hta, hta-time, hta-cost): finish as early as "
                        "AMOUNT allows, in node-hours (40node-h; a node is one worker of the --worker-cores / "
                        "--worker-memory shape) or core-hours (300core-h, divided by --worker-cores). Not with "
                        "--deadline")
    p.add_argument("--min-workers", type=_positive_int("--min-workers", 0), default=0)
    p.add_argument("--max-workers", type=_positive_int("--max-workers"), default=4)
    p.add_argument("--worker-cores", type=_positive_int("--worker-cores"), default=1)
    p.add_argument("--worker-memory", type=_positive_int("--worker-memory"), default=1024, metavar="MB")
    p.add_argument("--worker-disk", type=_positive_int("--worker-disk"), default=4096, metavar="MB")
    p.add_argument("--provision-delay", type=_seconds("--provision-delay"), default=0.0, metavar="S",
                   help="local backend: emulated time from asking for a worker to starting it")
    p.add_argument("--provision-jitter", type=_seconds("--provision-jitter"), default=0.0, metavar="S")
    p.add_argument("--idle-timeout", type=_positive_int("--idle-timeout", 5), default=900, metavar="S",
                   help="a worker leaves on its own after this long without work")
    p.add_argument("--css", choices=("on", "off", "dry-run"), default="on",
                   help="the CSS classifier on every worker: on, off (hta worker --no-css), or dry-run (it "
                        "classifies and logs, never pins: what watching the tasks costs)")
    p.add_argument("--no-css", dest="css", action="store_const", const="off", help="the same as --css off")
    p.add_argument("--poll-interval", type=_seconds("--poll-interval", 0.1), default=1.0, metavar="S")
    p.add_argument("--min-interval", type=_seconds("--min-interval", 0.1), default=2.0, metavar="S",
                   help="decide at most this often, whatever the latency")
    p.add_argument("--max-interval", type=_seconds("--max-interval", 0.1), default=300.0, metavar="S",
                   help="decide at least this often, whatever the latency")
    p.add_argument("--latency-prior", type=_seconds("--latency-prior", 0.1), default=None, metavar="S",
                   help="preparation latency assumed until one is measured (default: provision delay + 2s)")
    p.add_argument("--runtime-prior", type=Path, default=None, metavar="LOG",
                   help="an earlier run's scaling log (or a workflow HTA ran: its latest run): its task "
                        "categories' mean runtimes are the --deadline/--budget forecast until this run measures "
                        "its own, so the dial sizes the pool from the start")
    p.add_argument("--log", type=Path, default=None, metavar="FILE",
                   help="scaling log (default: WORKFLOW.hta/runs/run-NNN.scaling.jsonl, one per run, "
                        "with WORKFLOW.scaling.jsonl linking the latest that ran the workflow)")
    p.add_argument("--record", type=Path, default=None, metavar="FILE",
                   help="write every answer the controller reads (master, backend, monitor) to FILE, "
                        "to replay the run's decisions later (hta.replay)")
    p.add_argument("--worker-stall-timeout", type=_seconds("--worker-stall-timeout", 2), default=120.0,
                   metavar="S", help="a worker that does not answer the master for this long (a stopped or hung "
                                     "node) is dropped, its tasks go back to the queue, and it is replaced "
                                     "(Work Queue's keepalive; default 120 s)")
    p.add_argument("--status-port", type=_positive_int("--status-port", 0), default=0, metavar="PORT",
                   help="port of the run's status server (/status, /metrics, a live page; 0: any free port)")
    p.add_argument("--status-host", default="127.0.0.1", metavar="ADDR",
                   help="address the status server listens on (0.0.0.0: reachable from other hosts, e.g. in a pod)")
    p.add_argument("--status-token", default=None, metavar="TOKEN",
                   help="a token every reader of the status server must send (Authorization: Bearer TOKEN, or "
                        "?token=TOKEN in the page's URL); set it when the server listens beyond this host")
    p.add_argument("--control-token", default=None, metavar="TOKEN",
                   help="a token that may change the run while it runs (hta set URL --token TOKEN), from any host "
                        "that reaches the status server; not the --status-token. Without it only the user who "
                        "started the run, on its host, may (hta set WORKFLOW)")
    p.add_argument("--no-status", dest="status", action="store_false", default=True,
                   help="do not run the status server")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="a YAML or TOML file of these options (same names; flags win; also $HTA_CONFIG, and "
                        "HTA_<OPTION> variables, e.g. HTA_MAX_WORKERS=8)")
    for action in p._actions:
        if action.dest in ("help", "workflow", "verbose", "quiet", "config"):
            continue
        shown = isinstance(action, argparse._StoreAction) and action.default not in (None, argparse.SUPPRESS)
        if shown and "default" not in (action.help or ""):
            action.help = f"{action.help} (default: {action.default})" if action.help else f"default: {action.default}"
        action.default = argparse.SUPPRESS


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hta", description="High-Throughput Autoscaler for Makeflow / Work Queue workflows")
    p.add_argument("--version", action="version", version=f"hta {_version()}")
    _verbosity(p, False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    m = sub.add_parser("makeflow", help="run a Makeflow workflow on autoscaled Work Queue workers",
                       usage="hta makeflow [options] WORKFLOW [-- makeflow options]",
                       formatter_class=_KeepsLists, epilog=_policy_list(),
                       description="Run WORKFLOW with the real `makeflow -T wq` (from this folder, as makeflow "
                                   "itself would, resource monitoring on) and scale its workers. makeflow's own "
                                   "options go after `--`, e.g. `hta makeflow Makeflow -- -j 4 --retry-count 2`; "
                                   "the ones HTA sets itself (-T, -p, -Z, -N, -C) and --password (not handed to "
                                   "workers yet) are refused.")
    m.add_argument("workflow", type=Path, nargs="?", default=None,
                   help="the Makeflow file (may be left out when an --argv file after -- names it)")
    _verbosity(m, argparse.SUPPRESS)
    _makeflow_options(m)
    m.set_defaults(func=cmd_makeflow)

    g = sub.add_parser("config", help="print the configuration hta makeflow would run with",
                       usage="hta config [options] [WORKFLOW] [-- makeflow options]",
                       description="Print the effective configuration of `hta makeflow` with these options, "
                                   "$HTA_CONFIG / --config and HTA_* variables applied, as YAML (usable as "
                                   "--config FILE).")
    g.add_argument("workflow", type=Path, nargs="?", default=None)
    _makeflow_options(g)
    g.set_defaults(func=cmd_config)

    s = sub.add_parser("simulate", help="compare policies on a simulated cluster",
                       description="Run policies against a workload in the evaluation simulator and print one "
                                   "comparison table (mean ± sd over seeds). With --out, each run writes its "
                                   "scaling log there.")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--workload", default="blast-3stage",
                     help="built-in generator: blast-3stage (default), io-bound, or blast-3stage-2core "
                          "(its aligns take 2 cores)")
    src.add_argument("--workflow", type=Path, metavar="FILE",
                     help="your own workflow: a Makeflow (or a folder holding one), its runtimes and world taken "
                          "from its last hta makeflow run, or a WfCommons WfFormat JSON instance")
    s.add_argument("--from-run", type=Path, metavar="LOG",
                   help="with --workflow MAKEFLOW: the run to take runtimes and world from, a scaling log or a "
                        "WORKFLOW.hta folder (default: the workflow's latest run, if any)")
    s.add_argument("--policies", default="hta,hpa-20,hpa-50,keda-3,factory",
                   help="comma-separated: hta, hta-time, hta-cost (HTA's presets), hpa-<cpu %%>, "
                        "keda-job[-<tasks per job>] (KEDA ScaledJob), "
                        "keda-<tasks per pod> (KEDA ScaledObject: deletes busy pods), factory, max-then-drain, static, "
                        "a name from the hta.policies entry-point group, or your own MODULE:CALLABLE (e.g. "
                        "mypkg.mymod:make_policy); settings as POLICY:key=value,key=value or "
                        "MODULE:CALLABLE:key=value"),
    s.add_argument("--seeds", type=_positive_int("--seeds"), default=5)
    s.add_argument("--out", type=Path, metavar="DIR", help="write one scaling log per run here")
    s.add_argument("--format", choices=["table", "json"], default="table")
    # (defaults None: a Makeflow's last run gives them, else SIM_DEFAULTS; a flag given wins)
    s.add_argument("--max-nodes", type=_positive_int("--max-nodes"), default=None,
                   help="the cap (default: the run's --max-workers, else 20)")
    s.add_argument("--start-nodes", type=_positive_int("--start-nodes", 0), default=None,
                   help="nodes up at the start (default: 0 after a run, as hta makeflow starts, else 1)")
    s.add_argument("--node-cores", type=_quantity("--node-cores", 1, "cores"), default=None, metavar="N",
                   help="allocatable cores of a node (default: the run's worker cores, else 3, a 4-vCPU node)")
    s.add_argument("--node-memory", type=_quantity("--node-memory", 1, "MB", " MB"), default=None, metavar="MB")
    s.add_argument("--latency-mean", type=_seconds("--latency-mean", 0), default=None, metavar="S",
                   help="node preparation latency, mean (default: the run's, else the thesis's GKE measurement)")
    s.add_argument("--latency-sd", type=_seconds("--latency-sd", 0), default=None, metavar="S")
    s.add_argument("--pull", type=_seconds("--pull", 0), default=0.0, metavar="S", help="image pull time")
    s.add_argument("--costs", choices=["none", "measured"], default="none",
                   help="what pods and nodes cost besides the latency: none (default, the thesis's world) or "
                        "measured (a pod's start on a node, input transfers with Work Queue's cache, the "
                        "cluster-autoscaler's 10 min empty-node hold; hta/sim/costs.py)")
    s.set_defaults(func=cmd_simulate)

    r = sub.add_parser("report", help="report what the autoscaler did, from scaling logs",
                       description="Summarise one or more scaling logs (from hta makeflow or hta simulate) side "
                                   "by side, and draw supply, in-use and demand over time.")
    r.add_argument("logs", nargs="+", type=Path, help="scaling logs (*.scaling.jsonl, or hta simulate --out files)")
    r.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    r.add_argument("--plot", type=Path, metavar="DIR", help="write one figure per run (and a comparison) here")
    r.add_argument("--plot-format", default="png", metavar="FMT[,FMT]",
                   help="figure formats, any of png, svg, pdf (default: png)")
    r.add_argument("--title", metavar="TEXT",
                   help="the figure's title (default: the workflow and the policy, e.g. blast — hta); with several "
                        "runs, the comparison's, each run's own figure keeping its name")
    r.add_argument("--dpi", type=_positive_int("--dpi"), default=None, metavar="N",
                   help="PNG resolution in dots per inch (default: 150)")
    r.add_argument("--size", type=_inches("--size"), default=None, metavar="W,H",
                   help="a run's figure's width and height in inches, e.g. 6,3, and each panel's in the comparison "
                        "(default: 9,4.2; a panel 2.8 high)")
    r.set_defaults(func=cmd_report)

    st = sub.add_parser("status", help="show a running hta makeflow (the URL it printed at start)",
                        description="Print the live panel of a running `hta makeflow` from its status server "
                                    "(the URL it printed at start, or HOST:PORT).")
    st.add_argument("url", help="http://HOST:PORT/ as hta makeflow printed it, or HOST:PORT")
    st.add_argument("--watch", action="store_true", help="keep redrawing until the run ends or Ctrl-C")
    st.add_argument("--interval", type=_seconds("--interval", 0.2), default=1.0, metavar="S",
                    help="with --watch: seconds between redraws (default 1)")
    st.add_argument("--format", choices=["panel", "json"], default="panel")
    st.add_argument("--token", default=None, metavar="TOKEN",
                    help="the run's status token, if it has one (default: $HTA_STATUS_TOKEN)")
    st.set_defaults(func=cmd_status)

    se = sub.add_parser("set", help="change a running hta makeflow's cap, deadline or budget",
                        usage="hta set (WORKFLOW | URL) [--max-workers N] [--deadline WHEN | --budget AMOUNT] "
                              "[--token TOKEN]",
                        description="Change a running `hta makeflow` while it runs: its cap (--max-workers) and its "
                                    "time-cost dial (--deadline, --budget; `none` clears it). The run applies the "
                                    "change at its next step and says so in that decision. Give the workflow "
                                    "(on the run's host, as the user who started it: the URL and a token are read "
                                    "from WORKFLOW.hta/control.json) or the URL the run printed with --token, the "
                                    "run's --control-token.")
    se.add_argument("run", metavar="WORKFLOW|URL", help="the running workflow's file, or the run's status URL")
    se.add_argument("--max-workers", type=_positive_int("--max-workers"), default=None, metavar="N",
                    help="the most workers the run may have from now on (idle workers above a lowered cap are "
                         "drained; busy ones finish their tasks)")
    se.add_argument("--deadline", default=None, metavar="WHEN",
                    help="HTA's policy: finish by WHEN, as hta makeflow --deadline takes it, from now (90m, 2h, "
                         "1:30:00, 09:00, 2026-12-07T09:00); replaces a budget; none: no deadline")
    se.add_argument("--budget", default=None, metavar="AMOUNT",
                    help="HTA's policy: finish as early as AMOUNT allows in all (40node-h, 300core-h), what the run "
                         "spent so far included; replaces a deadline; none: no budget")
    se.add_argument("--token", default=None, metavar="TOKEN",
                    help="the run's control token (default: $HTA_CONTROL_TOKEN; with WORKFLOW, the run's own token "
                         "from its folder)")
    se.set_defaults(func=cmd_set)

    sc = sub.add_parser("completion", help="print a shell completion script",
                        description="Print the bash completion script of hta: "
                                    "`hta completion bash > ~/.local/share/bash-completion/completions/hta`, "
                                    "or `source <(hta completion bash)` in ~/.bashrc.")
    sc.add_argument("shell", choices=["bash", "zsh"], help="the shell")
    sc.set_defaults(func=cmd_completion)

    w = sub.add_parser("worker", help="run a Work Queue worker with its effective capacity, and CSS",
                       description="Start work_queue_worker with the capacity this process really has (cgroup "
                                   "limits, cpuset, shares; flags override) and the CSS classifier on its tasks.")
    w.add_argument("--master", metavar="HOST:PORT", help="the Work Queue master")
    w.add_argument("--project", help="or: the master's project name (with --catalog)")
    w.add_argument("--catalog", metavar="HOST:PORT")
    w.add_argument("--cores", type=_positive_int("--cores"))
    w.add_argument("--memory", type=_positive_int("--memory"), metavar="MB")
    w.add_argument("--disk", type=_positive_int("--disk"), metavar="MB")
    w.add_argument("--idle-timeout", type=_positive_int("--idle-timeout", 1), default=900, metavar="S")
    w.add_argument("--connect-timeout", type=_positive_int("--connect-timeout", 1), default=900, metavar="S")
    w.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                   help="where the worker makes its own folder for its tasks (removed when it ends; "
                        "default: $TMPDIR, else /tmp)")
    w.add_argument("--parent-death", action="store_true", help="exit when the parent process dies")
    w.add_argument("--ends-at", type=float, default=None, metavar="UNIX",
                   help="when the worker must be gone (its batch job's end): it takes no task it cannot finish "
                        "by then, and leaves before it")
    w.add_argument("--last-call", type=_seconds("--last-call", 0), default=0.0, metavar="S",
                   help="with --ends-at: the longest a task is expected to run (the worker also learns it from "
                        "its own tasks)")
    w.add_argument("--tasks", type=_positive_int("--tasks"), default=None, metavar="N",
                   help="leave after N tasks (a job of a KEDA ScaledJob): a task sent after them is handed back "
                        "to the master at once, and the worker leaves once every result is fetched")
    w.add_argument("--no-css", action="store_true", help="do not run the CSS classifier")
    w.add_argument("--css-backend", choices=["auto", "perf", "bpftrace", "proc"], default="auto")
    w.add_argument("--css-log", type=Path, metavar="FILE", help="CSS decision log (JSON Lines)")
    w.add_argument("--css-interval", type=_seconds("--css-interval", 0.1), default=5.0, metavar="S")
    w.add_argument("--css-dry-run", action="store_true", help="decide and log, do not pin")
    w.add_argument("--css-no-guard", dest="css_guard", action="store_false",
                   help="apply CSS's plan always (default: only while the tasks progress faster under it)")
    w.add_argument("--css-plan", choices=PLAN_STYLES, default="confine",
                   help="confine: I/O tasks to μ cores, CPU tasks on every core (default); partition: the "
                        "paper's CTBRA, CPU tasks split the other cores")
    w.set_defaults(func=cmd_worker)

    c = sub.add_parser("css", help="classify processes or cgroups as IO/CPU-intensive and pin their cores",
                       description="The CSS MAPE-K loop (Song, Yu & Lee 2022) on a worker's tasks, process "
                                   "trees or cgroups.")
    c.add_argument("--worker-pid", type=int, help="the tasks of this work_queue_worker")
    c.add_argument("--pid", type=int, action="append", default=[], help="a process tree (repeatable)")
    c.add_argument("--cgroup", type=Path, action="append", default=[], help="a cgroup directory (repeatable)")
    c.add_argument("--backend", choices=["auto", "perf", "bpftrace", "proc"], default="auto")
    c.add_argument("--interval", type=_seconds("--interval", 0.1), default=5.0, metavar="S",
                   help="management interval (default 5 s)")
    c.add_argument("--cleaning", type=_seconds("--cleaning", 0.1), default=30.0, metavar="S",
                   help="cleaning interval: futex counters reset (default 30 s)")
    c.add_argument("--lambda", dest="lam", type=_quantity("--lambda", 0, "futex calls"), default=None,
                   help="futex threshold λ: a container with more futex calls per cleaning interval is "
                        "IO-intensive (default: the backend's calibrated value)")
    c.add_argument("--mu", type=_positive_int("--mu"), default=2, help="cores for IO containers (default 2)")
    c.add_argument("--plan", choices=PLAN_STYLES, default="confine",
                   help="confine: IO containers to μ cores, CPU containers on every core (default); partition: "
                        "the paper's CTBRA, CPU containers split the other cores")
    c.add_argument("--cores", default=None, help="the cores to share, e.g. 0-3 (default: all allowed)")
    c.add_argument("--dry-run", action="store_true", help="decide and log, do not pin")
    c.add_argument("--epoch", type=_seconds("--epoch", 0.1), default=None, metavar="S",
                   help="the guard's trial epoch (default: three intervals)")
    c.add_argument("--no-guard", dest="guard", action="store_false",
                   help="apply the plan always, as the paper applies CTBRA (default: keep it only while the tasks "
                        "measurably progress faster under it than under the kernel's scheduling)")
    c.add_argument("--log", type=Path, metavar="FILE", help="decision log (JSON Lines)")
    c.add_argument("--duration", type=_seconds("--duration", 0.1), default=None, metavar="S",
                   help="stop after this long (default: until the watched processes are gone, or SIGTERM)")
    c.set_defaults(func=cmd_css)
    return p


def cmd_status(args: argparse.Namespace) -> int:
    import asyncio

    from hta.console import PipeConsole
    from hta.status.panel import BadURL, StatusError, fetch_status, render, watch

    token = args.token or os.environ.get("HTA_STATUS_TOKEN") or None
    try:
        if args.watch:
            if asyncio.run(watch(args.url, PipeConsole(), interval_s=args.interval, token=token)):
                print("hta: the run ended", file=sys.stderr)
        else:
            snapshot = asyncio.run(fetch_status(args.url, token=token))
            if args.format == "json":
                print(snapshot.model_dump_json(indent=1))
            else:
                PipeConsole().print(render(snapshot))
    except KeyboardInterrupt:  # Ctrl-C is how one stops watching: 130, as README says, with no error line
        return 130
    except BadURL as exc:
        raise UsageError(str(exc)) from None
    except StatusError as exc:
        print(f"hta: error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    """``hta set``: one line of what changed, old → new; exit 2 for a bad value, 1 when the
    run refused it or could not be reached (docs/decisions/0033-changing-a-running-run.md)."""
    import asyncio

    from pydantic import ValidationError

    from hta.status.control import (
        ControlError,
        ControlRequest,
        first_error,
        read_control_file,
        run_dir_of,
        send_control,
    )
    from hta.status.panel import BadURL, status_url

    if args.max_workers is None and args.deadline is None and args.budget is None:
        raise UsageError("nothing to change: give --max-workers N, --deadline WHEN or --budget AMOUNT")
    try:
        request = ControlRequest(max_workers=args.max_workers, deadline=args.deadline, budget=args.budget)
    except ValidationError as exc:
        raise UsageError(first_error(exc)) from None
    request.check()  # (a value that does not parse: refused here, before the run is asked)
    token = args.token or None
    run_dir = run_dir_of(args.run)
    try:
        if run_dir is not None:  # (the run's own token: $HTA_CONTROL_TOKEN may be another run's)
            url, own = read_control_file(run_dir, args.run)
            token = token or own
        else:
            token = token or os.environ.get("HTA_CONTROL_TOKEN") or None
            if "://" not in args.run and ":" not in args.run:  # (a URL the run printed has a port)
                raise UsageError(f"{args.run!r} is neither a workflow file here nor a URL: give the running "
                                 f"workflow's file (on the run's host) or the http://HOST:PORT/ hta makeflow printed")
            try:
                url = status_url(args.run)
            except BadURL as exc:
                raise UsageError(str(exc)) from None
        answer = asyncio.run(send_control(url, request, token))
    except ControlError as exc:
        if exc.bad_input:
            raise UsageError(str(exc)) from None
        print(f"hta: error: {exc}", file=sys.stderr)
        return 1
    print(answer.line())
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from hta.node.worker import WorkerOptions, run

    if bool(args.master) == bool(args.project):
        raise UsageError("give the master as --master HOST:PORT, or --project NAME (with --catalog HOST:PORT)")
    o = WorkerOptions(master=args.master, project=args.project, catalog=args.catalog, cores=args.cores,
                      memory_mb=args.memory, disk_mb=args.disk, idle_timeout_s=args.idle_timeout,
                      connect_timeout_s=args.connect_timeout, workdir=args.workdir, css=not args.no_css,
                      css_backend=args.css_backend, css_log=args.css_log, css_interval_s=args.css_interval,
                      css_dry_run=args.css_dry_run, css_guard=args.css_guard, css_plan=args.css_plan,
                      parent_death=args.parent_death, ends_at=args.ends_at, last_call_s=args.last_call,
                      max_tasks=args.tasks)
    try:
        return run(o)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_css(args: argparse.Namespace) -> int:
    from hta.node.css.daemon import CSSConfig, CSSDaemon, Targets, check_cgroup, check_cores, check_log_path

    if args.worker_pid is None and not args.pid and not args.cgroup:
        raise UsageError("nothing to watch: give --worker-pid, --pid or --cgroup")
    import psutil

    for pid in [args.worker_pid, *args.pid]:
        if pid is not None and not psutil.pid_exists(pid):
            raise UsageError(f"no process {pid}: give the PID of a running process (e.g. from pgrep)")
    try:
        for cg in args.cgroup:
            check_cgroup(cg)
        cores = check_cores(args.cores) if args.cores is not None else None
        if args.log is not None:
            check_log_path(args.log, "--log")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    targets = Targets(worker_pid=args.worker_pid, pids=args.pid, cgroups=args.cgroup)
    cfg = CSSConfig(interval_s=args.interval, cleaning_s=args.cleaning, lam=args.lam, mu=args.mu,
                    backend=args.backend, dry_run=args.dry_run, log_path=args.log, cores=cores, guard=args.guard,
                    epoch_s=args.epoch, plan=args.plan)
    try:
        d = CSSDaemon(targets, cfg)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    print(f"css: backend {d.monitor.name}, λ={d.lam:g}, μ={cfg.mu}, plan {cfg.plan}, cores {d.cores}, "
          f"{'plan kept only while it helps' if cfg.guard else 'plan always applied'}", file=sys.stderr)
    signum = d.run_until_done(args.duration)
    return 128 + signum if signum else 0


#: the sides ``hta report --size`` accepts, in inches: under 2 the legend and the title leave no
#: room for the axes; over 100 no page or screen shows it
_FIGURE_INCHES = (2.0, 100.0)


def _inches(name: str):
    """``W,H``, a figure's width and height in inches (``6,3``), each within :data:`_FIGURE_INCHES`;
    anything else is one line saying what was wrong and what to write instead."""
    low, high = _FIGURE_INCHES

    def parse(text: str) -> tuple[float, float]:
        try:
            w, h = (float(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes the width and height in inches as W,H, not {text!r} "
                                             f"(e.g. {name} 6,3)") from None
        if not all(math.isfinite(v) and low <= v <= high for v in (w, h)):
            raise argparse.ArgumentTypeError(f"{name} {text}: each side must be from {low:g} to {high:g} inches "
                                             f"(e.g. {name} 6,3)")
        return w, h
    return parse


def cmd_report(args: argparse.Namespace) -> int:
    from hta.console import PipeConsole
    from hta.report import (
        DEFAULT_DPI,
        MAX_PNG_SIDE_PX,
        PLOT_FORMATS,
        FigureStyle,
        load_runs,
        plot,
        render_json,
        render_markdown,
        render_table,
    )

    formats = tuple(dict.fromkeys(f.strip().lower() for f in args.plot_format.split(",") if f.strip()))
    bad = [f for f in formats if f not in PLOT_FORMATS]
    if bad or not formats:
        raise UsageError(f"--plot-format {args.plot_format!r}: choose among {', '.join(PLOT_FORMATS)} "
                         f"(e.g. --plot-format png,pdf)")
    if args.plot is not None and args.plot.exists() and not args.plot.is_dir():
        raise UsageError(f"--plot {str(args.plot)!r} is a file: give a folder for the figures")
    style = FigureStyle(args.title, args.dpi or DEFAULT_DPI, args.size)
    runs, errors = load_runs(args.logs)
    side = style.largest_png_side(len(runs))
    if args.plot is not None and runs and "png" in formats and side > MAX_PNG_SIDE_PX:
        raise UsageError(f"--dpi {style.dpi}: the PNG would be {side:,} pixels on a side, more than "
                         f"{MAX_PNG_SIDE_PX:,}: give a smaller --dpi (e.g. --dpi 300) or --size")
    if args.plot is not None and runs:  # refused before anything is printed; made only with figures to put in it
        try:
            args.plot.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot write figures to {str(args.plot)!r} ({exc.strerror or exc}): "
                             f"choose a folder you can write to with --plot") from None
    for e in errors:
        print(f"hta: error: {e}", file=sys.stderr)
    for r in runs:
        for w in r.warnings:
            print(f"hta: warning: {w}", file=sys.stderr)
        if not r.summary.complete:
            print(f"hta: warning: {r.path}: run in progress (no end record): reported up to its last record",
                  file=sys.stderr)
    try:
        if args.format == "json":
            print(render_json(runs, errors))
        elif runs:
            if args.format == "markdown":
                print(render_markdown(runs), end="")
            else:
                render_table(runs, PipeConsole(width=80))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`hta report … | head`): the figures are still made
        _stdout_to_devnull()
    if runs and args.plot:
        try:
            figures = plot(runs, args.plot, formats, style)
        except OSError as exc:
            raise UsageError(f"cannot write figures to {str(args.plot)!r} ({exc.strerror or exc}): "
                             f"choose a folder you can write to with --plot") from None
        for p in figures:
            print(f"figure: {p}", file=sys.stderr)
    return 1 if errors else 0


def split_policies(text: str) -> list[str]:
    """``hta,factory:tasks_per_worker=2,idle_timeout_s=60,hpa-20`` → three specs: a piece
    that is only ``key=value`` continues the spec before it."""
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if out and "=" in piece and ":" not in piece and ":" in out[-1]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


#: ``hta simulate``'s world where neither a flag nor a workflow's run says otherwise (the thesis's)
SIM_DEFAULTS: dict[str, Any] = {"max_nodes": 20, "start_nodes": 1, "node_cores": 3.0, "node_memory_mb": 15000.0,
                                "latency_mean_s": 157.4, "latency_sd_s": 4.2}
#: its flags (argparse dest → ClusterModel field)
SIM_FLAGS = {"max_nodes": "max_nodes", "start_nodes": "start_nodes", "node_cores": "node_cores",
             "node_memory": "node_memory_mb", "latency_mean": "latency_mean_s", "latency_sd": "latency_sd_s"}


#: how ``hta simulate`` names each world setting in a line (its value goes in ``{}``)
SIM_WORDS = {"max_nodes": "at most {:g} nodes", "start_nodes": "starting with {:g} node(s)",
             "node_cores": "{:g} cores a node", "node_memory_mb": "{:,.0f} MB a node",
             "latency_mean_s": "a node latency of {:g} s", "latency_sd_s": "sd {:g} s"}


def say_world(world: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """On stderr, for a user's own Makeflow: the settings a flag set in place of the run's,
    and those the simulator's default cluster gives (no run measured them)."""
    flag_of = {field: "--" + dest.replace("_", "-") for dest, field in SIM_FLAGS.items()}
    over = [f"{flag_of[f]} {v:g}" for f, v in given.items() if f in world and world[f] != v]
    if over:
        print(f"hta: given: {', '.join(over)}, in place of what the run measured", file=sys.stderr)
    rest = [SIM_WORDS[f].format(v) for f, v in SIM_DEFAULTS.items() if f not in world and f not in given]
    if rest:
        print(f"hta: assumed: the simulator's default cluster: {', '.join(rest)} (the thesis's GKE nodes; give "
              f"--max-nodes, --node-cores, --latency-mean for yours)", file=sys.stderr)


def _simulated_workload(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """What ``hta simulate`` runs: a built-in's name, a WfFormat file's path, or a Makeflow
    read (with its last run's world figures, and what was measured and assumed said on stderr)."""
    from hta.sim.makeflow_workload import find_makeflow, looks_like_json, own_workflow
    from hta.sim.workload import WorkloadError

    if args.workflow is None:
        if args.from_run is not None:
            raise UsageError("--from-run needs --workflow MAKEFLOW: it gives the runtimes of that workflow's rules")
        return args.workload, {}
    if not args.workflow.exists():
        raise UsageError(f"workflow file {str(args.workflow)!r} not found: give a Makeflow (or its folder) or a "
                         f"WfCommons JSON instance")
    if not args.workflow.is_dir() and not args.workflow.is_file():
        raise UsageError(f"workflow file {str(args.workflow)!r} is not a regular file: give a Makeflow (or its "
                         f"folder) or a WfCommons JSON instance")
    if args.from_run is not None and not args.from_run.exists():
        raise UsageError(f"--from-run {str(args.from_run)!r} not found: give a scaling log (WORKFLOW.scaling.jsonl) "
                         f"or a run folder (WORKFLOW.hta)")
    try:
        path = find_makeflow(args.workflow)
        if looks_like_json(path):
            if args.from_run is not None:
                raise UsageError("--from-run is for a Makeflow: a WfCommons instance carries its own runtimes")
            return str(path), {}
        own = own_workflow(path, args.from_run)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    for line in own.measured:
        print(f"hta: measured: {line}", file=sys.stderr)
    for line in own.assumptions:
        print(f"hta: assumed: {line}", file=sys.stderr)
    return own.workload, own.cluster


def cmd_simulate(args: argparse.Namespace) -> int:
    import json

    from hta.sim.cluster import ClusterModel
    from hta.sim.compare import compare, print_comparison
    from hta.sim.costs import COSTS
    from hta.sim.workload import WorkloadError

    workload, world = _simulated_workload(args)
    given = {field: v for flag, field in SIM_FLAGS.items() if (v := getattr(args, flag)) is not None}
    settings = {**SIM_DEFAULTS, **world, **given}
    if not isinstance(workload, str):  # (a Makeflow read: say where the rest of its world comes from)
        say_world(world, given)
    if settings["start_nodes"] > settings["max_nodes"]:
        raise UsageError(f"--start-nodes ({settings['start_nodes']}) is above --max-nodes ({settings['max_nodes']})")
    cluster = ClusterModel(pull_s=args.pull, **{**COSTS[args.costs].cluster_update(), **settings})
    policies = split_policies(args.policies)
    if not policies:
        raise UsageError("--policies is empty: name at least one, e.g. --policies hta,hpa-20")
    try:
        result = compare(workload, policies, args.seeds, cluster, args.out)
    except (ValueError, WorkloadError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # --out: the scaling logs
        raise UsageError(f"cannot write the scaling logs in {args.out} ({exc.strerror}): choose another --out") from None
    if args.format == "json":
        print(json.dumps(result.as_json(), indent=1))
    else:
        print_comparison(result)
        if args.out:
            print(f"scaling logs: {args.out}/")
    return 0


def effective_options(args: argparse.Namespace):
    """defaults < config file (--config, or $HTA_CONFIG) < HTA_* variables < flags given."""
    return option_layers(args).build()


def option_layers(args: argparse.Namespace, warn: bool = True):
    """The layers :func:`effective_options` builds, as read now (SIGHUP reads them again:
    the config file anew; ``warn``: say misspelled HTA_* variables)."""
    import os

    from hta.submit import config

    layers: list[tuple[str, Mapping[str, Any]]] = []
    cfg, given_by = getattr(args, "config", None), "--config"
    if cfg is None and os.environ.get("HTA_CONFIG"):
        cfg, given_by = Path(os.environ["HTA_CONFIG"]), "HTA_CONFIG"
    if cfg is not None:
        layers.append((f"config file {cfg}", config.read_file(cfg, given_by)))
    for w in config.misspelled_variables() if warn else []:
        print(f"hta: warning: {w}", file=sys.stderr)
    env = config.from_environment()
    if env:
        layers.append((config.FROM_ENVIRONMENT, env))
    given = {key: getattr(args, dest) for key, dest in
             ((k, k.replace("-", "_")) for k in config.KEYS)
             if key not in ("workflow", "makeflow-args") and hasattr(args, dest)}
    extra = list(args.makeflow_args)
    if extra:
        given["makeflow-args"] = [*(layers[-1][1].get("makeflow-args", []) if layers else []), *extra]
    layers.append((config.FROM_FLAGS, given))
    fixed = {"workflow": args.workflow} if args.workflow is not None else {}
    return config.Layers(layers, fixed, cfg)


def cmd_config(args: argparse.Namespace) -> int:
    """The configuration ``hta makeflow`` would run with, as YAML (a valid --config file)."""
    import yaml

    from hta.submit.config import as_keys

    options = effective_options(args)
    options.check_settings()  # the settings hta makeflow would refuse (the workflow may come later)
    print(yaml.safe_dump(as_keys(options), sort_keys=False), end="")
    return 0


def hta_options_help() -> str:
    """HTA's options as ``makeflow -T hta`` takes them: each with its environment variable and
    config-file key, and its help (``makeflow -T hta --help`` prints this after makeflow's)."""
    from hta.submit import config

    p = argparse.ArgumentParser(prog="hta makeflow", add_help=False)
    _makeflow_options(p)
    rows = []
    for action in p._actions:
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        key = (flag or "")[2:]
        negated = key.startswith("no-")
        key = key[3:] if negated else key
        if key not in config.KEYS:
            continue
        variable = config.variable_of(key) + ("=false" if negated else "")
        rows.append((variable, key + (": false" if negated else ""), " ".join((action.help or "").split())))
    width = max(len(v) for v, _, _ in rows)
    lines = ["", "HTA (makeflow -T hta): makeflow runs as makeflow -T wq, and HTA starts and stops its workers.",
             "HTA's options come from the environment or a config file (YAML or TOML) named by HTA_CONFIG:",
             "  HTA_MAX_WORKERS=8 HTA_PROVISION_DELAY=3 makeflow -T hta Makeflow",
             "  HTA_CONFIG=hta.yaml makeflow -T hta Makeflow        (hta.yaml holds e.g. `max-workers: 8`)",
             "Flags on the hta makeflow form win over both: hta makeflow --max-workers 8 Makeflow", "",
             f"  {'variable':<{width}}  config key: what it does"]
    lines += [f"  {v:<{width}}  {k}: {h}" for v, k, h in rows]
    lines += [f"  {'HTA_VERBOSE=1':<{width}}  every decision with its reasoning (hta makeflow -v)",
              f"  {'HTA_QUIET=1':<{width}}  only errors and the summary (hta makeflow -q)", ""]
    return "\n".join(lines)


def cmd_makeflow(args: argparse.Namespace) -> int:
    """Run the workflow; SIGINT/SIGTERM as :mod:`hta.interrupts` says: before the run has
    ended, 128 + N and one line; after, the run's own outcome."""
    try:
        # first of all: a signal while HTA starts ends it with a line and 128 + N (the run
        # installs its own handlers, which stop makeflow and the workers, and puts these back)
        raise_on_signals()
        note_hangups()  # (a SIGHUP reads the config file again once the run goes: never HTA's end)
        from hta.submit.reload import ConfigReread
        from hta.submit.run import run_makeflow
        from hta.summary_view import print_summary

        layers = option_layers(args)
        options = layers.build()
        reread = ConfigReread(read=lambda: option_layers(args, warn=False), last=layers, options=options)
        from hta.status.panel import verbosity_from_flags
        from hta.submit import config

        verbose = args.verbose or config.truthy(os.environ.get("HTA_VERBOSE"))
        quiet = args.quiet or config.truthy(os.environ.get("HTA_QUIET"))
        result = run_makeflow(options, verbosity=verbosity_from_flags(verbose, quiet), reread=reread)
        hold_signals()  # the run has ended: what is printed next is its outcome
        if result.never_started:  # nothing ran: makeflow's reason is the whole story
            print(f"hta: error: {result.error}", file=sys.stderr)
            return result.exit_code
        if result.note and not quiet:
            print(f"hta: makeflow: {result.note}", file=sys.stderr)
        try:
            print_summary(result.summary, result.scaling_log)
        except BrokenPipeError:  # the reader left (`hta makeflow … | head`): the run's result still stands
            _stdout_to_devnull()
        for w in result.warnings:
            print(f"hta: warning: {w}", file=sys.stderr)
        if result.error:
            print(f"hta: error: {result.error}", file=sys.stderr)
        return result.exit_code
    except Interrupted as exc:
        hold_signals()
        return _interrupted(exc.signum)


def _interrupted(signum: int) -> int:
    import signal

    print(f"hta: error: interrupted by {signal.Signals(signum).name}; nothing is left running", file=sys.stderr)
    return 128 + signum


class _LineFormatter(logging.Formatter):
    """``hta: warning: …``, as command-line tools say it (no timestamps, no logger names)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"hta: {record.levelname.lower()}: {record.getMessage()}"


def _setup_logging(level: int) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_LineFormatter())
    logging.basicConfig(level=level, handlers=[handler])


def _close_option(parser: argparse.ArgumentParser, command: str, given: str) -> str | None:
    """The option of ``hta COMMAND`` that ``given`` (an option it does not have) looks like a
    typing slip of (``--max-wrkers``: ``--max-workers``), or None: then it is likely
    makeflow's own."""
    import difflib

    if not given.startswith("--"):
        return None
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    ours = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
    match = difflib.get_close_matches(given.split("=")[0], ours, n=1, cutoff=0.85)
    return match[0] if match else None


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, with makeflow's own options (after ``--`` for ``hta makeflow``) kept
    apart; an option HTA does not know is named with where it belongs."""
    parser = build_parser()
    passthrough: list[str] = []
    if "--" in argv and {"makeflow", "config"} & set(argv[:argv.index("--")]):
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if args.command in ("makeflow", "config"):
            first = unknown[0]
            close = _close_option(parser, args.command, first)
            if close:
                parser.exit(EXIT_USAGE, f"hta: error: hta {args.command} has no option {first.split('=')[0]}: did you "
                                        f"mean {close}? (see: hta {args.command} --help)\n")
            if first.startswith("-"):
                parser.exit(EXIT_USAGE, f"hta: error: hta {args.command} has no option {first}: makeflow's own "
                                        f"options go after --, e.g. hta {args.command} WORKFLOW -- {' '.join(unknown)} "
                                        f"(see: hta {args.command} --help)\n")
            parser.exit(EXIT_USAGE, f"hta: error: hta {args.command} takes one workflow, got also {first!r}: makeflow's "
                                    f"own arguments go after -- (see: hta {args.command} --help)\n")
        parser.exit(EXIT_USAGE, f"hta: error: unrecognized arguments: {' '.join(unknown)} (see: hta "
                                f"{args.command + ' ' if args.command else ''}--help)\n")
    args.makeflow_args = passthrough
    args.verbose = getattr(args, "verbose", False)
    args.quiet = getattr(args, "quiet", False)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else list(argv))
    _setup_logging(logging.INFO if args.verbose else logging.ERROR if args.quiet else logging.WARNING)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"hta: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("hta: error: interrupted by SIGINT", file=sys.stderr)
        return 130
    except Interrupted as exc:  # a second signal while hta makeflow said why it stopped
        return _interrupted(exc.signum)
    except BrokenPipeError:  # the reader left (e.g. `hta report … | head`): stop quietly, as shell tools do
        _stdout_to_devnull()
        return 141


def _stdout_to_devnull() -> None:
    """After the reader of stdout left: nothing more to write, and no error as Python exits."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
