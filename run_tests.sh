#!/usr/bin/env bash
# Sets up .venv (with the test extra) if needed and runs the test suite.
# Extra arguments go to pytest, e.g. ./run_tests.sh -k manifest -x
# Tests marked slow (a fresh-venv install of the worker package, ~8 min) are
# skipped unless you select them: ./run_tests.sh -m slow
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
ensure_venv test
marker=(-m "not slow")
for arg in "$@"; do
  if [ "$arg" = "-m" ] || [[ "$arg" == -m* ]]; then marker=(); fi
done
exec python -m pytest tests "${marker[@]}" "$@"
