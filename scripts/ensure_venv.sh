# Sourced by run_local.sh / run_tests.sh: creates .venv and installs the project
# into it when setup.py changed since the last install (a stamp file records it).
# Usage: ensure_venv [extras]   e.g. ensure_venv test

# Runs one pip command with its output kept off the screen (setuptools' pages of
# editable-install deprecation warnings say nothing to a user); shown whole, with the
# exit status, only when the command fails.
_pip_quietly() {
  local log status=0
  log="$(mktemp)"
  "$@" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    echo "failed (exit $status): $*" >&2
  fi
  rm -f "$log"
  return "$status"
}

ensure_venv() {
  local extras="${1:-}"
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local venv="$root/.venv"
  local python="${PYTHON:-python3}"
  local stamp="$venv/.dcm2tfrecord-installed${extras:+-$extras}"
  local want
  want="$(cat "$root/setup.py" "$root/reader_dist/setup.py" | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ]; then
    echo "setting up $venv (first run installs Beam and TensorFlow, a few minutes)..." >&2
    "$python" -m venv "$venv"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    _pip_quietly "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools wheel
    local spec="$root"
    [ -n "$extras" ] && spec="$root[$extras]"
    # the converter requires dcm2tfrecord-reader (the format and the reader) by direct
    # reference to reader_dist/ (setup.py), so pip never looks for it on an index; then the
    # reader made editable over that copy (pip refuses -e reader_dist and the direct
    # reference in one resolve), so edits to dataset/ and reader/ count at once
    _pip_quietly "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
    _pip_quietly "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
      -e "$root/reader_dist"
    echo "$want" > "$stamp"
  fi
  export PATH="$venv/bin:$PATH"
  # Quiet TensorFlow's start-up banner; never wait on a GPU.
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
  export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:--1}"
}

# Sets $python for the launch scripts (run_dataflow.sh, run_portable.sh): the interpreter
# named by $DCM2TFRECORD_PYTHON (the tests pass theirs), else .venv's, set up if needed.
project_python() {
  if [ -n "${DCM2TFRECORD_PYTHON:-}" ]; then
    python="$DCM2TFRECORD_PYTHON"
    export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
    export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:--1}"
  else
    ensure_venv
    python=python
  fi
}
