#!/usr/bin/env bash
# Sets up .venv (with the test extra) if needed and runs the whole test suite.
# Extra arguments go to pytest, e.g. ./run_tests.sh -k manifest -x
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
ensure_venv test
exec python -m pytest tests "$@"
