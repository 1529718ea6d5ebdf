"""The exceptions of dcm2tfrecord: one base, Dcm2TfrecordError, and the groups a caller catches.

Defined here, in the format package, because it is the leaf every side imports
(the converter, the reader, verify). Every exception class the project defines
derives from Dcm2TfrecordError through one of these groups (or directly), and
keeps the builtin base callers rely on (``ValueError``, ``OSError``,
``LookupError``) as a second base::

    Dcm2TfrecordError
    ├── OptionError          a bad option, argument, or file an option names (exit code 2)
    │     UsageError (pipeline.options.usage), LabelFileError, SaltFileError, SplitSpecError
    ├── FormatError          an output that does not hold what the format says
    │   │ ManifestError, DamagedLatest, BadName
    │   └── CorruptDataError bytes of a shard, index or record that are damaged
    │         CorruptRecordError (CorruptIndexError), FramingError, ProtoError
    ├── OutputError          the output cannot be written as asked
    │     OutputBusy, LockUnavailable, CommitConflict, OutputLinkError
    ├── StorageError         the storage stopped answering
    │     StorageOutage
    ├── InputError           an input file that cannot be converted
    │     ConversionError (transforms.errors)
    ├── ConversionFailed     (pipeline.convert) a run that refused to commit
    └── NotNeededError       (transforms.dicom.record_elements) a programming error of the probe

``from dcm2tfrecord.dataset import Dcm2TfrecordError`` and ``from dcm2tfrecord.reader
import Dcm2TfrecordError`` are the same class.
"""
from __future__ import annotations

__all__ = ["Dcm2TfrecordError", "OptionError", "FormatError", "CorruptDataError", "OutputError",
           "StorageError", "InputError"]


class Dcm2TfrecordError(Exception):
    """Any error dcm2tfrecord raises on purpose (as opposed to a bug, or a library's error)."""


class OptionError(Dcm2TfrecordError):
    """An option, an argument, or a file an option names is wrong: fix the command line."""


class FormatError(Dcm2TfrecordError):
    """A dataset (or a name in one) that does not hold what the on-disk format says."""


class CorruptDataError(FormatError):
    """Bytes of a shard, its ``.idx`` or one record that are damaged (found reading or verifying)."""


class OutputError(Dcm2TfrecordError):
    """The output cannot be written as asked: another run holds or committed it, its lock
    cannot be taken, or a link stands where the run writes."""


class StorageError(Dcm2TfrecordError):
    """The storage (local or gs://) stopped answering."""


class InputError(Dcm2TfrecordError):
    """An input file that cannot be converted (reported per file, in errors.jsonl)."""
