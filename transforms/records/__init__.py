"""One record: planned from headers (probe), built from pixels (build), encoded (features, example_proto)."""
