#!/usr/bin/env bash
# The test command: install what is missing, then run the tests.
#   ./scripts/test.sh          the full suite (what CI runs): builds the local Kubernetes
#                              control plane first if it is missing (8-17 min cold, cached)
#   ./scripts/test.sh --fast   the edit loop: no cluster build, no real makeflow runs or pods
#                              (pytest -m "not slow and not cluster")
#   ./scripts/test.sh -m bound the lower bound's thousands of extra random seeds
# Both lint (ruff) and type-check (mypy) first. Any other arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# lint and type-check first: a few seconds (mypy keeps its cache in .mypy_cache)
.venv/bin/ruff check --quiet .
.venv/bin/mypy
# each module that starts a cluster (Kubernetes or Slurm) is one xdist group: its cluster
# starts once, on one worker. The fast tier keeps the CPU busy: one worker per core. The full
# suite mostly waits on real processes, pods and nodes (a third of two cores busy on two
# workers), so it runs four, and the clusters' modules run beside each other.
if [ "${1:-}" = "--fast" ]; then
  shift
  exec .venv/bin/python -m pytest -n 2 --dist loadgroup -m "not slow and not cluster" "$@"
fi
testcluster/build.sh
exec .venv/bin/python -m pytest -n 4 --dist loadgroup "$@"
