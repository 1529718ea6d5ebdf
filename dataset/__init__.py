"""The on-disk dataset format: every name in an output directory (names), atomic writes (files),
the shard writer, dataset.json, versions and verify."""
