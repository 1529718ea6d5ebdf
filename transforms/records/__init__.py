"""One record: planned from headers (probe), built from pixels (build; encoded by dataset.features)."""
