"""A newcomer's screen (issue 43, item 7): ./run_local.sh's conversion of the bundled sample prints
the project's own lines only (the progress lines, the summary), no third-party warning, logger
line or traceback; and ensure_venv's pip calls are silent unless pip fails."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# what a third party's output looks like: Python's warnings ("UserWarning: ...", and the source
# line they echo), absl/glog and logging's default formats, tracebacks
_FOREIGN = re.compile(r"Warning\b|warn\(|Traceback|^\s+File \"|^(WARNING|INFO|ERROR|DEBUG|CRITICAL)[:\s]"
                      r"|^[IWEF]\d{4} |absl|oneDNN|cuInit|experimental|deprecat", re.IGNORECASE)
# the project's own stdout: the end-of-run summary (pipeline/summary.py)
_OURS_STDOUT = re.compile(r"^(Dataset: |split +records|\w[\w-]* +\d+ +\d+ |    \S+\.tfrecord(\.gz)? |files: \d+ matched"
                          r"|    (skipped|failed) +\w+ +\d+$|    which files and why: |wall time )")


def _convert_sample(tmp_path) -> subprocess.CompletedProcess:
    from tests.support import build_sample_archive
    archive = build_sample_archive(str(tmp_path / "archive"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TF_CPP_MIN_LOG_LEVEL")}
    # as scripts/ensure_venv.sh leaves the environment for run_local.sh
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    return subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive,
                           "--output", str(tmp_path / "out"), "--id_salt", "quiet-screen-salt",
                           "--max_failure_ratio", "0.5", "--direct_num_workers=2"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=str(tmp_path))


def test_the_sample_conversion_prints_nothing_but_our_own_lines(tmp_path):
    proc = _convert_sample(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    out = [line for line in proc.stdout.splitlines() if line.strip()]
    assert err and out
    foreign = [line for line in err + out if _FOREIGN.search(line)]
    assert not foreign, foreign
    # stderr: the progress display's lines; stdout: the summary's
    assert all(line.startswith("progress [") for line in err), err
    assert all(_OURS_STDOUT.match(line) for line in out), [line for line in out if not _OURS_STDOUT.match(line)]


def _pip_quietly(command: str) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail; source scripts/ensure_venv.sh; _pip_quietly {command}; echo "went on"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_ensure_venvs_pip_calls_are_silent_when_they_succeed_and_whole_when_they_fail():
    ok = _pip_quietly("sh -c 'echo pages of setuptools chatter; echo SetuptoolsDeprecationWarning >&2'")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "went on\n", "")
    failed = _pip_quietly("sh -c 'echo resolving; echo ERROR: no matching distribution >&2; exit 3'")
    assert failed.returncode == 3 and "went on" not in failed.stdout    # set -e stops the script
    assert "resolving" in failed.stderr and "ERROR: no matching distribution" in failed.stderr
    assert "failed (exit 3)" in failed.stderr


def test_ensure_venv_runs_every_pip_call_through_the_quiet_wrapper():
    text = open(os.path.join(ROOT, "scripts", "ensure_venv.sh")).read()
    calls = re.findall(r"^\s*(.*)-m pip install", text, flags=re.M)
    assert calls and all(c.strip().startswith("_pip_quietly ") for c in calls), calls
