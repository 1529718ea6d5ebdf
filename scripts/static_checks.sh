#!/usr/bin/env bash
# Static checks, run by .ci/run before the tests (a few seconds): ruff over the repository
# (ruff.toml) and mypy over the product packages as they install, dcm2tfrecord.{pipeline,
# transforms,dataset,reader} (mypy.ini). Exits non-zero on any finding.
# Uses .venv with the test extra (ruff and mypy come with it), set up if needed, like
# run_tests.sh; DCM2TFRECORD_PYTHON=/path/to/python uses that interpreter's instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
if [ -n "${DCM2TFRECORD_PYTHON:-}" ]; then
  python="$DCM2TFRECORD_PYTHON"
else
  source scripts/ensure_venv.sh
  ensure_venv test
  python=python
fi

status=0
echo "ruff check" >&2
"$python" -m ruff check --no-cache . || status=1

# The folders install under other names (setup.py's package_dir): mypy reads them through
# links that spell the installed names, dcm2tfrecord/ a namespace package as installed.
tree="$(mktemp -d "${TMPDIR:-/tmp}/dcm2tfrecord-static.XXXXXX")"
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/dcm2tfrecord"
for package in pipeline transforms dataset reader; do
  ln -s "$root/$package" "$tree/dcm2tfrecord/$package"
done
echo "mypy -p dcm2tfrecord" >&2
(cd "$tree" && "$python" -m mypy --config-file "$root/mypy.ini" --cache-dir "$tree/.mypy_cache" \
   -p dcm2tfrecord) || status=1
exit "$status"
