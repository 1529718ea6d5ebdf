#!/usr/bin/env bash
# Sets up .venv (with the test extra) if needed and runs the test suite.
# Extra arguments go to pytest, e.g. ./run_tests.sh -k manifest -x
# Tests marked slow (fresh-venv installs of the worker package and of the reader's own
# distribution, ~12 min) are skipped unless you select them: ./run_tests.sh -m slow
# The default selection runs on one pytest-xdist worker per core (every test uses its own
# tmp_path and free ports); a selection with -m, or -n given, runs as asked.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
ensure_venv test
marker=(-m "not slow")
workers=(-n "${DCM2TFRECORD_TEST_WORKERS:-auto}")
for arg in "$@"; do
  if [ "$arg" = "-m" ] || [[ "$arg" == -m* ]]; then marker=(); workers=(); fi
  if [ "$arg" = "-n" ] || [[ "$arg" == -n* ]]; then workers=(); fi
done
exec python -m pytest tests "${marker[@]}" "${workers[@]}" "$@"
