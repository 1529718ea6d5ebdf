"""Options, job graph and command line of dcm2tfrecord (knows Beam, no pixel math)."""
from __future__ import annotations

import os

# gRPC's C core reads its log level once, when Beam first imports it (in the first module of this
# package that imports Beam, after this file has run): its INFO and
# WARNING lines (a worker's channel told to go away as a run stops after a worker died) are
# noise in a run that reports its own failures in one line. DCM2TFRECORD_DEBUG=1 keeps them,
# and so does a GRPC_VERBOSITY of the user's; spawned workers inherit the setting.
if not os.environ.get("DCM2TFRECORD_DEBUG"):
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def tool_version() -> str:
    try:
        from importlib.metadata import version
        return version("dcm2tfrecord")
    except Exception:
        return "0.1.0"
