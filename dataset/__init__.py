"""The on-disk dataset format, a leaf both the converter and the reader stand on.

Every name in an output directory (names), the record layout (features), the
Example codec (example), the TFRecord framing and ``.idx`` codec (tfrecord),
what a run reports (results, reasons), the file system it goes through
(storage), atomic writes (files), the shard writer, dataset.json, versions,
progress files, the output lock and verify. It imports nothing from
``transforms/``, ``pipeline/`` or ``reader/``, and nothing heavier than numpy,
protobuf and google-crc32c (tests/reader/test_standalone.py holds it to that).
"""
from dcm2tfrecord.dataset.errors import (CorruptDataError, Dcm2TfrecordError, FormatError, InputError,
                                         OptionError, OutputError, StorageError)

__all__ = ["CorruptDataError", "Dcm2TfrecordError", "FormatError", "InputError", "OptionError",
           "OutputError", "StorageError"]
