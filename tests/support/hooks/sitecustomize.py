"""Imported at start by every Python process whose PYTHONPATH has tests/support/hooks (see __init__.py).

Installs the shard writers' pause point when the test asked for one; does nothing
otherwise. Never on a user's path: the product has no test-only behaviour.
"""
import os

if os.environ.get("DCM2TFRECORD_HOOK_PAUSE"):
    import dcm2tfrecord_shard_pause

    dcm2tfrecord_shard_pause.install(os.environ["DCM2TFRECORD_HOOK_PAUSE"])
