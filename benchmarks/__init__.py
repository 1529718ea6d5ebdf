"""Benchmarks for dcm2tfrecord (see docs/BENCHMARKS.md). Not part of the installed package."""
