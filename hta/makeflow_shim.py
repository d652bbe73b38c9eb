"""``makeflow -T hta``: the submission path as the original HTA named it.

Installed as a ``makeflow`` command in HTA's environment (ahead of the real
one on PATH once the venv's ``bin`` is). With ``-T hta`` / ``--batch-type=hta``
(or ``MAKEFLOW_BATCH_QUEUE_TYPE=hta``) it runs ``hta makeflow`` on the same
command line: the workflow and every makeflow option pass through, HTA's own
options come from ``$HTA_CONFIG`` and ``HTA_*`` variables (see
:mod:`hta.submit.config`). Any other invocation is handed, unchanged, to the real
makeflow — found on PATH past this one, never this one again.
"""

from __future__ import annotations

import os
import sys

# light imports only: every makeflow command passes through here
from workqueue_bridge.makeflow_args import ArgsError, MakeflowArgs, real_makeflow


def wants_hta(args: MakeflowArgs) -> bool:
    kind = args.last("batch-type") or os.environ.get("MAKEFLOW_BATCH_QUEUE_TYPE", "")
    return kind.strip().lower() == "hta"


def _names_hta(argv: list[str]) -> bool:
    """``-T hta`` in any spelling, on a command line the option reader refused."""
    pairs = zip(argv, argv[1:] + [""])
    return any(a in ("-Thta", "--batch-type=hta") or (a in ("-T", "--batch-type") and b == "hta") for a, b in pairs)


def hta_argv(args: MakeflowArgs) -> list[str]:
    """``hta makeflow`` arguments for this makeflow command line (``-T hta`` dropped; with no
    workflow named, makeflow's own default ``./Makeflow``)."""
    workflow = [] if args.dag_from_argv else [args.dagfile or "./Makeflow"]
    return ["makeflow", *workflow, "--", *args.without("batch-type")]


def _hta_option_of(argv: list[str]) -> str | None:
    """The first HTA option on a ``makeflow -T hta`` command line (``--max-workers``, in any
    spelling), which makeflow's own reader refuses."""
    from hta.submit.config import KEYS

    for a in argv:
        name = a[2:].split("=", 1)[0] if a.startswith("--") else None
        if name and name in KEYS and name not in ("workflow", "makeflow-args"):
            return name
    return None


def print_help(real: str | None) -> int:
    """makeflow's own help, then HTA's options as ``makeflow -T hta`` takes them."""
    from hta.cli import hta_options_help

    if real is not None:
        import subprocess

        out = subprocess.run([real, "--help"], capture_output=True, text=True)
        sys.stdout.write(out.stdout + out.stderr)
    sys.stdout.write(hta_options_help())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    real = real_makeflow()
    try:
        args = MakeflowArgs.parse(argv)
    except ArgsError as exc:
        if _names_hta(argv):  # the real makeflow would only say it does not know -T hta
            hta_option = _hta_option_of(argv)
            if hta_option is not None:
                from hta.submit.config import variable_of

                print(f"makeflow: error: --{hta_option} is an HTA option, which makeflow -T hta takes from the "
                      f"environment: {variable_of(hta_option)}=... makeflow -T hta ... (or {hta_option}: in a config "
                      f"file named by HTA_CONFIG; makeflow -T hta --help lists them all)", file=sys.stderr)
            else:
                print(f"makeflow: error: {exc} (makeflow -T hta --help lists makeflow's options and HTA's)",
                      file=sys.stderr)
            return 2
        args = None  # makeflow says it better
    if args is not None and wants_hta(args) and args.has("help"):
        return print_help(real)
    if args is not None and wants_hta(args):
        os.environ.pop("MAKEFLOW_BATCH_QUEUE_TYPE", None)
        from hta.cli import main as hta_main

        return hta_main(hta_argv(args))
    if real is None:
        print("makeflow: error: the real makeflow (CCTools) is not on PATH: run scripts/setup.sh", file=sys.stderr)
        return 127
    os.execv(real, [real, *argv])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
