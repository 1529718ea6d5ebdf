"""The subcommands of ``dcm2tfrecord`` other than ``convert``: inspect, preview, verify, versions,
demo (and its bundled sample archive)."""
