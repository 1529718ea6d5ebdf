"""Options, job graph and command line of dcm2tfrecord (knows Beam, no pixel math)."""
from __future__ import annotations

from dcm2tfrecord import transforms  # noqa: F401 - installs Beam's FileSystems under the format package (transforms/beam_files.py)


def tool_version() -> str:
    try:
        from importlib.metadata import version
        return version("dcm2tfrecord")
    except Exception:
        return "0.1.0"
