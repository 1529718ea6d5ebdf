"""The labels CSV checked before any work: its header holds the columns the options
name, and the whole file is UTF-8 CSV (one usage error naming the line, not a traceback
mid-run)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dcm2tfrecord.pipeline.options.locations import absolute
from dcm2tfrecord.pipeline.options.usage import UsageError

if TYPE_CHECKING:
    from dcm2tfrecord.pipeline.options.table import ConvertOptions


def check_label_csv(opts: "ConvertOptions") -> None:
    from apache_beam.io.filesystems import FileSystems
    import io
    from dcm2tfrecord.transforms.labels.table import LabelFileError, read_header
    assert opts.labels is not None      # validate calls this only with --labels
    path = absolute(opts.labels)
    if not FileSystems.exists(path):
        raise UsageError(f"--labels {opts.labels}: file not found")
    try:
        with FileSystems.open(path) as raw:
            header = read_header(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""),
                                 f"--labels {opts.labels}")
    except LabelFileError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--labels {opts.labels}: its header is not UTF-8 text ({exc.reason}); "
                         "give a CSV file saved as UTF-8") from None
    except Exception as exc:  # noqa: BLE001 - csv.Error, OSError: one line, not a traceback
        raise UsageError(f"--labels {opts.labels}: cannot read its header: {exc}") from None
    wanted = [opts.label_key, opts.label_column] + [c for c in (opts.split_column, opts.mask_column) if c]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise UsageError(f"--labels {opts.labels}: column(s) {', '.join(missing)} not in its header "
                         f"{header}; set --label_key/--label_column/--split_column/--mask_column to existing "
                         f"columns")


def scan_label_csv(labels: str) -> int:
    """Reads the whole labels CSV once before any work (streamed, bounded memory): text that
    is not UTF-8 or not CSV is a usage error naming the line, not a traceback mid-run.
    Returns the number of lines."""
    import csv
    import io
    from apache_beam.io.filesystems import FileSystems
    from dcm2tfrecord.transforms.labels.table import FIELD_SIZE_LIMIT
    csv.field_size_limit(FIELD_SIZE_LIMIT)
    line = 0
    try:
        with FileSystems.open(absolute(labels)) as raw:
            rows = csv.reader(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""))
            for row in rows:
                line = rows.line_num
                if any("\0" in cell for cell in row):
                    raise UsageError(f"--labels {labels}: line {line} holds a NUL byte, which no "
                                     "text CSV has; save it again as UTF-8 CSV")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--labels {labels}: not UTF-8 text after line {line} ({exc.reason}); "
                         "give a CSV file saved as UTF-8") from None
    except csv.Error as exc:
        raise UsageError(f"--labels {labels}: line {line + 1} is not CSV ({exc}); "
                         f"cells are limited to {FIELD_SIZE_LIMIT >> 20} MB") from None
    except OSError as exc:
        raise UsageError(f"--labels {labels}: cannot be read: {exc}") from None
    return line
