#!/usr/bin/env bash
# Installs what HTA needs, idempotently; a second run takes about a second.
#   - Debian packages: CCTools (makeflow, work_queue_worker, resource_monitor,
#     the work_queue Python module), openmpi-bin (makeflow aborts in MPI_Init
#     without it), the real workloads the CSS tests run (stress-ng, fio) and
#     bpftrace (one of CSS's futex monitors), chromium (the live page's test runs
#     it headless), and Slurm with munge (slurm-wlm: slurmctld, slurmd and the client
#     commands the Slurm backend and testcluster/slurm use).
#     With --accounting, also Debian's slurmdbd and mariadb-server, for the Slurm
#     test cluster's accounting (testcluster/slurm up --accounting: QOS limits).
#   - The project venv at .venv with `pip install -e .[test]`.
#   - Debian's work_queue module made importable in the venv through a .pth
#     file naming a folder of symlinks (not all of dist-packages).
#   - In a git checkout, the commit-msg hook (scripts/commit-msg: subjects of at
#     most 72 characters, a blank line before the body).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

say() { echo "[setup] $*" >&2; }

# --- Debian packages -------------------------------------------------------
debs=(coop-computing-tools python3-workqueue openmpi-bin stress-ng fio bpftrace chromium slurm-wlm munge)
[ "${1:-}" = "--accounting" ] && debs+=(slurmdbd mariadb-server)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python venv -------------------------------------------------------------
py="${HTA_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($py --version)"
  "$py" -m venv .venv
fi
stamp=.venv/.hta-installed
want="$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "pip install -e .[test]"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # (setuptools warns about editable installs at length on every install: shown only if it fails)
  out="$(mktemp)"
  .venv/bin/python -m pip install -q -e ".[test]" >"$out" 2>&1 || { cat "$out" >&2; rm -f "$out"; exit 1; }
  rm -f "$out"
  echo "$want" > "$stamp"
fi

# --- Debian's work_queue module, and nothing else from dist-packages --------
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
links=.venv/cctools-python
mkdir -p "$links"
for f in /usr/lib/python3/dist-packages/work_queue.py /usr/lib/python3/dist-packages/_work_queue*.so; do
  [ -e "$f" ] && ln -sf "$f" "$links/$(basename "$f")"
done
echo "$root/$links" > "$site/cctools-work-queue.pth"
.venv/bin/python -c 'import workqueue_bridge.wq as w; w.load()' \
  || { say "the work_queue module does not import in .venv"; exit 1; }
# --- the commit-msg hook, in a git checkout ---------------------------------
hooks="$(git rev-parse --git-path hooks 2>/dev/null || true)"
if [ -n "$hooks" ] && ! cmp -s scripts/commit-msg "$hooks/commit-msg"; then
  mkdir -p "$hooks"
  cp scripts/commit-msg "$hooks/commit-msg"
  chmod +x "$hooks/commit-msg"
fi
say "ready: $(makeflow -v 2>&1 | head -1)"
