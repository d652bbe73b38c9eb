#!/usr/bin/env bash
# The test command: install what is missing, then run the whole test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# the Kubernetes tests' control plane (built once into a cache outside git; ~8 min cold)
testcluster/build.sh
exec .venv/bin/python -m pytest "$@"
