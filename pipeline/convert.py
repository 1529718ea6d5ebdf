"""Runs ``convert``: prepares the output, builds the job graph, runs it, reports."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline import tool_version
from pipeline.options import ConvertOptions, UsageError, parse_convert, validate
from pipeline.progress import ProgressMonitor, remove_progress
from pipeline.summary import print_summary, summarize, write_summary_json
from transforms import manifest as manifest_lib
from transforms import versions
from transforms.beam_transforms import ConvertArchive

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def _given(beam_args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in beam_args)


class ConversionFailed(Exception):
    """The run finished but refused to commit (too many failures): exit code 1."""


def make_pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam options; local runs default to one worker process per core."""
    options = PipelineOptions(list(beam_args))
    if options.view_as(StandardOptions).runner in LOCAL_RUNNERS:
        direct = options.view_as(DirectOptions)
        cores = os.cpu_count() or 1
        if not _given(beam_args, "--direct_num_workers"):
            direct.direct_num_workers = cores
        if not _given(beam_args, "--direct_running_mode"):
            direct.direct_running_mode = "multi_processing" if direct.direct_num_workers != 1 else "in_memory"
    return options


def make_runner(options: PipelineOptions):
    """The in-process FnApiRunner for local runs.

    Beam's DirectRunner first tries to download and start its Prism runner;
    offline that waits on the network before falling back to this same
    FnApiRunner, so local runs go straight to it.
    """
    runner = options.view_as(StandardOptions).runner
    if runner in LOCAL_RUNNERS:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        return FnApiRunner()
    return None   # Beam resolves --runner itself (DataflowRunner, ...)


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def prepare_output(opts: ConvertOptions) -> None:
    """Refuses to replace a committed dataset unless --overwrite; then uncommits it.

    A report of an earlier refused run (run_failed.json) is removed first.
    """
    failed_report = FileSystems.join(opts.output, manifest_lib.FAILED_RUN_NAME)
    if FileSystems.exists(failed_report):
        FileSystems.delete([failed_report])
    manifest = FileSystems.join(opts.output, manifest_lib.MANIFEST_NAME)
    if FileSystems.exists(manifest):
        if not opts.overwrite:
            raise UsageError(f"--output {opts.output} already holds a dataset (dataset.json); "
                             "pass --overwrite to replace it or choose another --output")
        FileSystems.delete([manifest])
    if "://" not in opts.output and os.path.isfile(opts.output):
        raise UsageError(f"--output {opts.output} is a file; give a directory")


def _delete_tree(path: str) -> None:
    """Removes a directory (local) or every object under a prefix (gs://)."""
    if "://" not in path:
        if os.path.exists(path):
            FileSystems.delete([path])
        return
    found = FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list
    if found:
        FileSystems.delete([m.path for m in found])


def remove_stale_files(output_dir: str, manifest: dict) -> None:
    """Deletes shards of an earlier run that the new manifest does not list."""
    keep = {name for split in manifest["splits"].values() for s in split["shards"]
            for name in (s["file"], s["index_file"], versions.records_file(s["file"]))}
    pattern = FileSystems.join(output_dir, "*.tfrecord*")
    stale = [m.path for m in FileSystems.match([pattern])[0].metadata_list
             if m.path.rsplit("/", 1)[-1] not in keep]
    if stale:
        FileSystems.delete(stale)
    _delete_tree(FileSystems.join(output_dir, ".incomplete"))
    remove_progress(output_dir)


def job_not_run_here(options: PipelineOptions) -> str:
    """"dry_run": Beam's --dry_run (DataflowRunner builds the job, submits nothing);
    "template": --template_location (the job is written there to run later; a Flex
    Template launcher submits this way); "": the job runs now and we wait for it."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, TestOptions
    how = ("dry_run" if options.view_as(TestOptions).dry_run
           else "template" if options.view_as(GoogleCloudOptions).template_location else "")
    runner = str(options.view_as(StandardOptions).runner or "")
    if how and "dataflow" not in runner.lower():   # local runners ignore both and would run
        raise UsageError(f"--{'dry_run' if how == 'dry_run' else 'template_location'} needs "
                         "--runner=DataflowRunner (see run_dataflow.sh)")
    return how


def report_job_not_run(result, options: PipelineOptions, how: str, quiet: bool) -> dict:
    """No dataset.json to read yet. A dry run writes the job it built to --dataflow_job_file
    (Beam itself writes that file only on submission): the portable pipeline Runner v2
    executes, with its worker environment, and the pipeline options."""
    import json
    from apache_beam.options.pipeline_options import DebugOptions, GoogleCloudOptions
    from google.protobuf import json_format
    job = getattr(result, "job", None)     # the dry run's apiclient.Job
    summary = {"submitted": False, "mode": how,
               "job_name": job.proto.name if job else options.view_as(GoogleCloudOptions).job_name}
    job_file = options.view_as(DebugOptions).dataflow_job_file
    if how == "dry_run" and job is not None and job_file:
        description = {"name": job.proto.name, "type": job.proto.type_.name,
                       "pipeline": json_format.MessageToDict(job.proto_pipeline),
                       "options": options.get_all_options(drop_default=True)}
        with FileSystems.create(job_file, mime_type="application/json") as handle:
            handle.write(json.dumps(description, indent=1, sort_keys=True, default=str).encode())
        summary["job_file"] = job_file
    if not quiet:
        where = f"; job written to {job_file}" if summary.get("job_file") else ""
        print(f"dcm2tfrecord convert: {how}: Dataflow job {summary['job_name']} built, "
              f"not run here{where}", file=sys.stderr)
    return summary


def build(pipeline: beam.Pipeline, opts: ConvertOptions,
          base: Optional[versions.BaseVersion] = None, version_name: str = "") -> None:
    _ = pipeline | "ConvertArchive" >> ConvertArchive(
        opts.settings(), options=opts.recorded(), version=tool_version(), base=base,
        version_name=version_name)


def prepare_version(opts: ConvertOptions, dry_run: bool) -> tuple[str, str, versions.BaseVersion]:
    """--incremental: (new version name, its directory, the version it builds on).

    The base is the version LATEST names when the run starts (after a rollback,
    the rolled-back-to one). A directory left by a killed run under the new
    version's name is emptied first; committed versions are never touched.
    """
    root = opts.output
    if FileSystems.exists(FileSystems.join(root, manifest_lib.MANIFEST_NAME)):
        raise UsageError(f"--output {root} holds a dataset written without --incremental; give "
                         "--incremental an empty or versioned --output (versions go to OUT/versions/NNNN)")
    if "://" not in root and os.path.isfile(root):
        raise UsageError(f"--output {root} is a file; give a directory")
    name = versions.next_version(root)
    target = versions.version_dir(root, name)
    latest = versions.read_latest(root)
    if latest is None:
        base = versions.BaseVersion("", ())
    else:
        previous = manifest_lib.read_manifest(versions.version_dir(root, latest))
        base = versions.base_version(root, latest, previous, opts.recorded())
        if base.rebuild_reason:
            logging.getLogger(__name__).warning("%s: no shard of version %s is reused",
                                                base.rebuild_reason, latest)
    if not dry_run:
        _delete_tree(target)
    return name, target, base


def run(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """Converts; returns the run summary (see pipeline.summary)."""
    opts = ConvertOptions(**{**opts.__dict__, "output": _absolute(opts.output)})
    validate(opts)
    options = make_pipeline_options(beam_args)
    launch_only = job_not_run_here(options)
    root, version, base = opts.output, None, None
    if opts.incremental:
        version, target, base = prepare_version(opts, launch_only == "dry_run")
        opts = ConvertOptions(**{**opts.__dict__, "output": target})
    if launch_only != "dry_run":   # a dry run leaves --output untouched
        prepare_output(opts)
        remove_progress(opts.output)   # left by an interrupted run
    started = time.time()
    pipeline = beam.Pipeline(runner=make_runner(options), options=options)
    build(pipeline, opts, base, version or "")
    if launch_only:
        return report_job_not_run(pipeline.run(), options, launch_only, quiet)
    # quiet (library callers, tests): no progress unless --progress asks for it
    with ProgressMonitor(opts.output, "none" if quiet and opts.progress == "auto" else opts.progress):
        pipeline.run().wait_until_finish()
    wall = time.time() - started
    failed_run = manifest_lib.read_failed_run(opts.output)
    if failed_run is not None:
        counts = failed_run["counts"]
        raise ConversionFailed(
            f"{failed_run['reason']}; dataset.json NOT committed. Failures by reason: "
            f"{counts['failed']}; the list is in {FileSystems.join(opts.output, manifest_lib.ERRORS_NAME)}")
    manifest = manifest_lib.read_manifest(opts.output)
    remove_stale_files(opts.output, manifest)
    if version is not None:
        versions.set_latest(root, version)   # only now do readers of the root see it
    summary = summarize(manifest, opts.output, wall)
    if version is not None:
        summary["version"] = {"root": root, "name": version, **manifest["incremental"]}
    if opts.summary_json:
        write_summary_json(summary, opts.summary_json)
    if not quiet:
        print_summary(summary)
    return summary


def main(argv: Sequence[str]) -> int:
    opts, beam_args = parse_convert(argv)
    try:
        run(opts, beam_args)
    except ConversionFailed as exc:
        print(f"dcm2tfrecord convert: {exc}", file=sys.stderr)
        return 1
    return 0
