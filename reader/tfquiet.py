"""TensorFlow, imported once and quietly: its start-up chatter is filtered, real errors are not.

On import and on first device probing TensorFlow's C++ side writes a dozen
lines to stderr that a user cannot act on (absl's "before InitializeLog"
notice, CPU-feature and CUDA-stub info lines, oneDNN notes and, on a machine
without a GPU, "failed call to cuInit"). ``TF_CPP_MIN_LOG_LEVEL`` does not reach
all of them, so stderr is captured at the file-descriptor level while
TensorFlow starts, and every captured line that is not one of those known
start-up notes is written back. A cuInit failure is only dropped where no
NVIDIA device exists; with a GPU present it is a real error and is shown.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import sys
import tempfile

_NOISE = [
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"I0000 .*",                                                  # info lines of the C++ runtime
    r"W0000 .*(TF-TRT|TensorRT|oneDNN|cuda|CUDA).*",
    r"To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.",
    r".*oneDNN custom operations are on.*",
    r".*Unable to register cu(DNN|FFT|BLAS) factory.*",
    r".*computation placer already registered.*",
]
_NO_GPU_NOISE = [r"E0000 .*failed call to cuInit.*"]


def _noise() -> re.Pattern:
    patterns = _NOISE + ([] if glob.glob("/dev/nvidia[0-9]*") else _NO_GPU_NOISE)
    return re.compile("|".join(f"(?:{p})" for p in patterns))


@contextlib.contextmanager
def _filtered_stderr():
    """Captures file descriptor 2 (C++ and Python alike) and replays what is not noise."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no real stderr (embedded interpreters): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            noise = _noise()
            kept = [line for line in captured.read().decode("utf-8", "replace").splitlines()
                    if line.strip() and not noise.fullmatch(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()


def import_tensorflow():
    """``tensorflow``, started quietly the first time (later calls return the module)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _filtered_stderr():
        import tensorflow
        tensorflow.config.list_physical_devices()   # device probing (cuInit) happens here, filtered
    return tensorflow


tf = import_tensorflow()
