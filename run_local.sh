#!/usr/bin/env bash
# Sets up .venv if needed. With no arguments: builds the bundled sample archive
# (pydicom's real test DICOM files plus generated PNG/JPEG images), converts it on
# DirectRunner with every core into ./out/sample, reads it back through reader/
# and prints a summary. With arguments: runs `dcm2tfrecord convert` with them.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
ensure_venv
if [ "$#" -eq 0 ]; then
  exec python -m dcm2tfrecord.pipeline demo --output out/sample
fi
exec python -m dcm2tfrecord.pipeline convert "$@"
