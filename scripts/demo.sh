#!/usr/bin/env bash
# The demo: install what is missing, then run the BLAST-shaped workflow on
# autoscaled local workers (the embedded default), print its summary, then
# the scaling report (figure in report/demo/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# from the workflow's folder, as makeflow runs it; a clean slate so makeflow runs every rule again
cd workflows/blast
/usr/bin/env makeflow -c Makeflow >/dev/null 2>&1 || true
# the runs logged so far (none in a fresh clone: no Makeflow.hta/ yet, and `ls` failing in a
# pipe would end the script under pipefail)
runs() { if [ -d Makeflow.hta/runs ]; then ls Makeflow.hta/runs | wc -l; else echo 0; fi; }
before=$(runs)
rc=0
../../.venv/bin/hta makeflow --max-workers 4 --worker-cores 1 --provision-delay 4 Makeflow "$@" || rc=$?
# no run started (a bad option: hta said why), or Ctrl-C: no report, of an older run or this one
[ "$(runs)" -gt "$before" ] && [ "$rc" -ne 130 ] || exit "$rc"
echo "(the demo ran in workflows/blast/: the scaling log above is under workflows/blast/)"
echo
../../.venv/bin/hta report Makeflow --plot "$root/report/demo"
exit "$rc"
