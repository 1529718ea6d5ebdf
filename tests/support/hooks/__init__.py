"""Test-only behaviour for the conversions tests run as subprocesses: nothing of it is in the product.

A test that needs a conversion to stop at an exact moment (to kill it there, or to
read its progress while it writes) runs ``python -m dcm2tfrecord.pipeline convert``
with ``subprocess_env(...)``: this folder first on PYTHONPATH, and the hook's
setting in the environment. Every Python process of that run (the launcher, the
fork server and the workers it forks, spawned Beam workers) then imports this
folder's ``sitecustomize.py`` at start, which installs the hook
(``dcm2tfrecord_shard_pause``). A user's run never has this folder on its path, so
no environment value of theirs reaches the hook.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
# "POINT:DIR": every shard writer stops at POINT (see dcm2tfrecord_shard_pause)
PAUSE_ENV = "DCM2TFRECORD_HOOK_PAUSE"
PAUSE_POINTS = ("opened", "half_written", "partly_final")


def subprocess_env(env: Optional[Mapping[str, str]] = None, *, pause: str = "",
                   pause_dir: str | os.PathLike = "") -> dict[str, str]:
    """``env`` (default: this process's environment) with this folder first on PYTHONPATH,
    and, with ``pause``, every shard writer stopping at that point: it creates
    ``pause_dir/POINT-<shard file>`` and waits there until ``pause_dir/go`` exists."""
    out = dict(os.environ if env is None else env)
    path = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != HOOKS_DIR]
    out["PYTHONPATH"] = os.pathsep.join([HOOKS_DIR, *path])
    out.pop(PAUSE_ENV, None)
    if pause:
        if pause not in PAUSE_POINTS or not pause_dir:
            raise ValueError(f"pause is one of {PAUSE_POINTS}, with a pause_dir; not {pause!r}")
        out[PAUSE_ENV] = f"{pause}:{os.fspath(pause_dir)}"
    return out
