"""Shard planning on metadata, and (--incremental) which earlier shards are reused."""
