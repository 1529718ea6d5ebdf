"""Which runner a run takes and with which Beam options: a local run in one process or with a
worker process per core (forked from the launcher where it can be: .fork_server), or the
runner ``--runner`` names (Dataflow, a portable runner), which Beam resolves itself."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from dcm2tfrecord.pipeline.launch.beam_args import LOCAL_RUNNERS
from dcm2tfrecord.pipeline.launch.fork_server import ForkServer, local_runner
from dcm2tfrecord.transforms.sources.match import survey_local


def _given(beam_args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in beam_args)


# Local runs of at most this many input files and bytes run in one process: starting a
# worker process per core costs ~3 s of CPU each (imports, Beam set-up) before its
# first element, more than small archives take to convert (docs/BENCHMARKS.md §2).
IN_PROCESS_MAX_FILES = 256
IN_PROCESS_MAX_BYTES = 256 << 20


class ViewCachingOptions(PipelineOptions):
    """PipelineOptions whose ``view_as`` builds each view once.

    Beam's ``view_as`` builds an argparse parser of every registered option (~0.4 ms)
    on each call, and building, translating and fusing this graph calls it ~830 times:
    0.4 s of the launcher's CPU before the first record (docs/BENCHMARKS.md §8.4). A view
    shares its values with the options it came from (Beam's own contract: a change
    through one view shows in all), so handing out the same view again is the same.
    Adds no options of its own."""

    def __init__(self, flags=None, **kwargs):
        super().__init__(flags, **kwargs)
        object.__setattr__(self, "_views", {})

    def view_as(self, cls):
        view = self.__dict__["_views"].get(cls)
        if view is None:
            view = self.__dict__["_views"][cls] = super().view_as(cls)
        return view


def make_pipeline_options(beam_args: Sequence[str], patterns: Sequence[str] = ()) -> PipelineOptions:
    """Beam options. Local runs default to one worker process per core, or to one process
    (in_memory) when the local inputs are small (``local_execution`` says which)."""
    options = ViewCachingOptions(list(beam_args))
    if options.view_as(StandardOptions).runner in LOCAL_RUNNERS:
        direct = options.view_as(DirectOptions)
        workers_given = _given(beam_args, "--direct_num_workers")
        if not workers_given and not _given(beam_args, "--direct_running_mode"):
            small = survey_local(patterns, IN_PROCESS_MAX_FILES, IN_PROCESS_MAX_BYTES) if patterns else None
            direct.direct_num_workers = 1 if small is not None else (os.cpu_count() or 1)
        elif not workers_given:
            direct.direct_num_workers = os.cpu_count() or 1
        if not _given(beam_args, "--direct_running_mode"):
            direct.direct_running_mode = "multi_processing" if direct.direct_num_workers != 1 else "in_memory"
    return options


def local_execution(options: PipelineOptions, forked: bool = False) -> str:
    """How a local run executes, for the summary ("" on other runners); ``forked``: its
    worker processes were forked from the launcher (pipeline.launch.fork_server)."""
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        return ""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory" or direct.direct_num_workers == 1:
        return "one process"
    kind = "threads" if direct.direct_running_mode == "multi_threading" else "processes"
    how = ", forked" if forked else ""
    return f"{direct.direct_num_workers} worker {kind} ({direct.direct_running_mode}{how})"


def forks_workers(options: PipelineOptions) -> bool:
    """Whether a local run's worker processes are forked from the launcher (pipeline.launch.fork_server)."""
    return (options.view_as(StandardOptions).runner in LOCAL_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")


def make_runner(options: PipelineOptions, server: Optional[ForkServer] = None):
    """The in-process FnApiRunner for local runs, its worker processes forked by ``server``
    when there is one.

    Beam's DirectRunner first tries to download and start its Prism runner;
    offline that waits on the network before falling back to this same
    FnApiRunner, so local runs go straight to it.
    """
    runner = options.view_as(StandardOptions).runner
    if runner in LOCAL_RUNNERS:
        return local_runner(server)
    return None   # Beam resolves --runner itself (DataflowRunner, ...)
