"""MatchInputs: --input patterns -> every matched file once, and broken links as Outcomes."""
from __future__ import annotations

from typing import Iterable

import apache_beam as beam

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.progress import write_worker_started
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.counters import count, count_outcome
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.sources.match import broken_links, expand_pattern, uri_key
from dcm2tfrecord.transforms.dicom.quiet import silence_pydicom
from dcm2tfrecord.transforms.settings import OUTAGE_INPUTS, DecodeSettings, with_salt
from dcm2tfrecord.transforms.sources.read import configure_storage_retry, process_breaker


class ReadsSourcesFn(beam.DoFn):
    """Base of the steps that open source files (probe, write): on each worker, pydicom kept
    quiet, the storage retry budget applied, the salt read from its file, and the process's
    outage breaker (shared with every other such step in the process), which stops the run
    when storage stops answering."""

    def __init__(self, settings: DecodeSettings, storage_retry_s: float = 0.0, run: str = ""):
        super().__init__()
        self.settings, self.storage_retry_s = settings, storage_retry_s
        self.run = run      # which run's breaker: the steps of one run share it in each process

    def setup(self):
        install_beam_storage()      # the salt file, the progress files, the shards: Beam's FileSystems
        silence_pydicom()
        configure_storage_retry(self.storage_retry_s)
        self.settings = with_salt(self.settings)
        self.breaker = process_breaker(self.run, OUTAGE_INPUTS, self.storage_retry_s)


class ExpandPatternFn(beam.DoFn):
    """--input pattern -> every file it matches (listing gs:// within the storage retry budget)."""

    def __init__(self, storage_retry_s: float = 0.0, output_dir: str = ""):
        super().__init__()
        self.storage_retry_s = storage_retry_s
        self.output_dir = output_dir     # where this worker marks that it started (pipeline.launch.worker_start)

    def setup(self):
        install_beam_storage()      # the worker-started mark: Beam's FileSystems
        configure_storage_retry(self.storage_retry_s)
        if self.output_dir:
            write_worker_started(self.output_dir)

    def process(self, pattern: str) -> Iterable[SourceFile]:
        for source in expand_pattern(pattern):
            count("files_matched")
            yield source


def _broken_links(pattern: str) -> Iterable[Outcome]:
    for path in broken_links(pattern):
        outcome = Outcome(path, reasons.FAILED, "match", reasons.BROKEN_SYMLINK,
                          "symbolic link to a missing target")
        count("files_matched")
        count_outcome(outcome)
        yield outcome


def _first_by_rel_path(sources: Iterable[SourceFile]) -> SourceFile:
    return min(sources, key=lambda s: s.rel_path)


class MatchInputs(beam.PTransform):
    """--input patterns -> (every matched file once, broken links as Outcomes)."""

    def __init__(self, patterns: list[str], storage_retry_s: float = 0.0, output_dir: str = ""):
        super().__init__()
        self.patterns = sorted(set(patterns))
        self.storage_retry_s = storage_retry_s
        self.output_dir = output_dir

    def expand(self, pbegin):
        patterns = pbegin | "ListInputPatterns" >> beam.Create(self.patterns)
        broken = (patterns
                  | "FindBrokenLinks" >> beam.FlatMap(_broken_links)
                  | "KeyLinkByUri" >> beam.Map(lambda o: (uri_key(o.uri), o))
                  | "DropRepeatedLinks" >> beam.CombinePerKey(lambda outcomes: min(outcomes, key=lambda o: o.uri))
                  | "DropLinkKey" >> beam.Values())
        return (patterns
                | "ExpandPatterns" >> beam.ParDo(ExpandPatternFn(self.storage_retry_s, self.output_dir))
                # SourceFile
                | "KeyByUri" >> beam.Map(lambda s: (uri_key(s.uri), s))
                | "DropRepeatedMatches" >> beam.CombinePerKey(_first_by_rel_path)
                | "DropUriKey" >> beam.Values()), broken
                # SourceFile, each uri once; Outcome per broken link
