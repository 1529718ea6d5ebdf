"""Runs ``convert``: prepares the output, builds the job graph, runs it, reports."""
from __future__ import annotations

import os
import time
from typing import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline import tool_version
from pipeline.options import ConvertOptions, UsageError, parse_convert, validate
from pipeline.summary import print_summary, summarize
from transforms import manifest as manifest_lib
from transforms.beam_transforms import ConvertArchive

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def _given(beam_args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in beam_args)


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
    """Refuses to replace a committed dataset unless --overwrite; then uncommits it."""
    manifest = FileSystems.join(opts.output, manifest_lib.MANIFEST_NAME)
    if FileSystems.exists(manifest):
        if not opts.overwrite:
            raise UsageError(f"--output {opts.output} already holds a dataset (dataset.json); "
                             "pass --overwrite to replace it or choose another --output")
        FileSystems.delete([manifest])
    if "://" not in opts.output and os.path.isfile(opts.output):
        raise UsageError(f"--output {opts.output} is a file; give a directory")


def remove_stale_files(output_dir: str, manifest: dict) -> None:
    """Deletes shards of an earlier run that the new manifest does not list."""
    keep = {name for split in manifest["splits"].values() for s in split["shards"]
            for name in (s["file"], s["index_file"])}
    pattern = FileSystems.join(output_dir, "*.tfrecord*")
    stale = [m.path for m in FileSystems.match([pattern])[0].metadata_list
             if m.path.rsplit("/", 1)[-1] not in keep]
    incomplete = FileSystems.join(output_dir, ".incomplete")
    if FileSystems.exists(incomplete):
        stale.append(incomplete)
    if stale:
        FileSystems.delete(stale)


def build(pipeline: beam.Pipeline, opts: ConvertOptions) -> None:
    _ = pipeline | "ConvertArchive" >> ConvertArchive(
        opts.settings(), options=opts.recorded(), version=tool_version())


def run(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """Converts; returns the run summary (see pipeline.summary)."""
    opts = ConvertOptions(**{**opts.__dict__, "output": _absolute(opts.output)})
    validate(opts)
    prepare_output(opts)
    options = make_pipeline_options(beam_args)
    started = time.time()
    pipeline = beam.Pipeline(runner=make_runner(options), options=options)
    build(pipeline, opts)
    pipeline.run().wait_until_finish()
    wall = time.time() - started
    manifest = manifest_lib.read_manifest(opts.output)
    remove_stale_files(opts.output, manifest)
    summary = summarize(manifest, opts.output, wall)
    if not quiet:
        print_summary(summary)
    return summary


def main(argv: Sequence[str]) -> int:
    opts, beam_args = parse_convert(argv)
    run(opts, beam_args)
    return 0
