"""The end-of-run summary: what was written, what was not and why, how fast.

Printed as a table at the end of every run; ``--summary_json PATH`` writes the
same dict as JSON for schedulers, with the run's status (pipeline.run_end, which writes a
failed run's summary too).
"""
from __future__ import annotations

import json
import statistics

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset.files import replace_file
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.dataset.names import ERRORS_NAME, UNMATCHED_ROWS_NAME
from dcm2tfrecord.dataset.tfds_metadata import tfds_metadata

MB = 1 << 20
SHARDS_LISTED = 10   # per split in the table; dataset.json and the JSON summary list all
UNMATCHED_SHOWN = 5  # labels CSV rows that label nothing, shown (errors.jsonl has more, their file all)


def summarize(manifest: Manifest, output_dir: str, wall_seconds: float) -> dict:
    splits = {}
    total_bytes = 0
    for name, split in manifest.splits.items():
        sizes = [s.num_bytes or 0 for s in split.shards]
        total_bytes += split.num_bytes or 0
        splits[name] = {
            "records": split.num_records, "shards": len(sizes), "bytes": split.num_bytes,
            "min_shard_bytes": min(sizes) if sizes else 0,
            "median_shard_bytes": int(statistics.median(sizes)) if sizes else 0,
            "max_shard_bytes": max(sizes) if sizes else 0,
            "shard_files": [{"file": s.file, "bytes": s.num_bytes} for s in split.shards],
        }
    counts = manifest.counts or {}
    notes = [f"--min_shards {v['requested']} not honoured for split {k!r}: it would push shards "
             f"under --min_shard_mb; the minimum size won ({splits.get(k, {}).get('shards', 0)} shards)"
             for k, v in (manifest.min_shards or {}).items() if not v["honoured"]]
    groups = manifest.groups or {}
    leaking = groups.get("groups_in_several_splits", 0)
    if leaking:   # committed only with --allow_split_leak
        notes.append(f"WARNING: {leaking} group(s) appear in more than one split "
                     f"({', '.join(groups.get('splits_sharing_groups', []))}; --allow_split_leak)")
    tfds_refusal = tfds_metadata(manifest, output_dir).refusal
    if tfds_refusal:
        notes.append(f"no TFDS metadata (dataset_info.json) for tfds.builder_from_directory: {tfds_refusal}")
    return {
        "notes": notes,
        "output": output_dir,
        "splits": splits,
        "matched": counts["matched"], "written": counts["written"], "records": counts["records"],
        "skipped": counts["skipped"], "failed": counts["failed"],
        "unaccounted": counts.get("unaccounted", 0),
        "label_rows_rejected": counts.get("label_rows_rejected", {}),
        "unmatched_label_rows": unmatched_rows(manifest, output_dir),
        "errors_file": FileSystems.join(output_dir, ERRORS_NAME),
        "wall_seconds": round(wall_seconds, 3),
        "bytes_written": total_bytes,
        "mb_per_second": round(total_bytes / MB / wall_seconds, 2) if wall_seconds > 0 else 0.0,
        "records_per_second": round(counts["records"] / wall_seconds, 2) if wall_seconds > 0 else 0.0,
    }


def unmatched_rows(manifest: Manifest, output_dir: str) -> dict:
    """The labels CSV rows that label nothing: how many, their file, and the first
    UNMATCHED_SHOWN of them ({} without such rows)."""
    block = (manifest.labels or {}).get("unmatched_rows")
    if not isinstance(block, dict) or not block.get("rows"):
        return {}
    path = FileSystems.join(output_dir, str(block.get("file") or UNMATCHED_ROWS_NAME))
    sample = []
    try:
        with FileSystems.open(path) as handle:
            for text, _ in zip(handle, range(UNMATCHED_SHOWN)):
                sample.append(json.loads(text))
    except Exception:  # noqa: BLE001 - the summary still prints; verify names a bad file
        pass
    return {"rows": block["rows"], "file": path, "sample": sample}


def format_summary(summary: dict, list_shards: bool = True) -> str:
    lines = [f"Dataset: {summary['output']}"]
    version = summary.get("version")
    if version:
        base = version["base_version"]
        lines.append(f"version {version['name']} of {version['root']} (LATEST now points to it): "
                     f"wrote {version['written_shards']} shard(s), reused {version['reused_shards']} "
                     f"({version['reused_records']} records)"
                     + (f" from version {base}" if base else ""))
        if version.get("rebuild_reason"):
            lines.append(f"note: {version['rebuild_reason']}; every record was converted again")
    lines.append(f"{'split':<12}{'records':>10}{'shards':>8}{'MB':>10}"
                 f"{'min MB':>9}{'median MB':>11}{'max MB':>9}")
    for name, s in summary["splits"].items():
        lines.append(f"{name:<12}{s['records']:>10}{s['shards']:>8}{s['bytes'] / MB:>10.2f}"
                     f"{s['min_shard_bytes'] / MB:>9.2f}{s['median_shard_bytes'] / MB:>11.2f}"
                     f"{s['max_shard_bytes'] / MB:>9.2f}")
        if list_shards:
            for shard in s["shard_files"][:SHARDS_LISTED]:
                lines.append(f"    {shard['file']}  {shard['bytes'] / MB:.2f} MB")
            if len(s["shard_files"]) > SHARDS_LISTED:
                more = len(s["shard_files"]) - SHARDS_LISTED
                lines.append(f"    ... {more} more (dataset.json lists all)")
    lines.append(f"files: {summary['matched']} matched, {summary['written']} written, "
                 f"{sum(summary['skipped'].values())} skipped, {sum(summary['failed'].values())} failed")
    for status in ("skipped", "failed"):
        for reason, n in summary[status].items():
            lines.append(f"    {status:<8} {reason:<32}{n:>7}")
    rows = summary.get("label_rows_rejected", {})
    if rows:
        lines.append(f"labels CSV rows rejected (inputs are not affected): {sum(rows.values())}")
        for reason, n in rows.items():
            lines.append(f"    rejected {reason:<32}{n:>7}")
    unmatched = summary.get("unmatched_label_rows") or {}
    if unmatched:
        shown = ", ".join(f"line {row.get('line')}" + (f" {str(row['key'])[:60]!r}" if "key" in row else "")
                          for row in unmatched["sample"])
        more = unmatched["rows"] - len(unmatched["sample"])
        lines.append(f"    rows that label nothing: {shown}" + (f" and {more} more" if more > 0 else "")
                     + f"; all of them: {unmatched['file']}")
    if summary["skipped"] or summary["failed"] or rows:
        lines.append(f"    which files and why: {summary['errors_file']}")
    for note in summary.get("notes", []):
        lines.append(f"note: {note}")
    ran = f" ({summary['execution']})" if summary.get("execution") else ""
    lines.append(f"wall time {summary['wall_seconds']:.1f} s{ran}, {summary['bytes_written'] / MB:.1f} MB "
                 f"written, {summary['mb_per_second']:.1f} MB/s, "
                 f"{summary['records_per_second']:.1f} records/s")
    return "\n".join(lines)


def print_summary(summary: dict) -> None:
    print(format_summary(summary), flush=True)


def write_summary_json(summary: dict, path: str) -> None:
    """``--summary_json``: the summary as JSON, local or gs://, replaced whole (a reader finds
    the old file or the new one, never a part: dataset.files.replace_file)."""
    replace_file(path, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                 "application/json")
