"""The pure rules the Beam steps only route: label joining and the commit policy."""
from __future__ import annotations

import dataclasses
import math

import pytest

from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.labels import join
from dcm2tfrecord.transforms.labels.table import LabelRow, LabelSpaceAccumulator
from dcm2tfrecord.transforms.output.commit import accounting_verdict, empty_verdict, failure_verdict, leak_verdict
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.record_model import Identifiers, ImageSpec, ProbedRecord, SourceFile


def _record(rel: str, patient: str = "P1") -> ProbedRecord:
    return ProbedRecord(source=SourceFile(f"/in/{rel}", rel, 10, 1.0), record_id=rel, kind="dicom",
                        spec=ImageSpec(1, 2, 2, 1, "uint8"), ids=Identifiers(patient_id=patient))


def _settings(**options):
    return ConvertOptions(inputs=("/in",), output="/out", id_salt="s" * 8, **options).settings()


def _space(*values, multi=False):
    acc = LabelSpaceAccumulator(multi)
    for value in values:
        acc.add(value)
    return acc.result()


def _join_rows(key, rows, records, space, settings):
    """The records of one patient joined with the rows of that patient."""
    settings = dataclasses.replace(settings, label_key="patient_id")
    matches, _ = join.match_rows(rows, records, settings)
    return [join.encode_match(match, space, settings) for match in matches]


def test_join_key_per_label_key():
    record = _record("a/b.dcm", patient="P7")
    assert join.join_key(record, "path") == "a/b.dcm"
    assert join.join_key(record, "patient_id") == "P7"
    assert join.join_key(dataclasses.replace(record, ids=None), "patient_id") == ""


def test_the_row_labels_every_record_of_its_key():
    settings, space = _settings(labels=None), _space("cat", "dog")
    rows = [LabelRow("P1", "dog", None, 2)]
    results = _join_rows("P1", rows, [_record("a.dcm"), _record("b.dcm")], space, settings)
    assert [r.label for r in results] == [1, 1]


@pytest.mark.parametrize("missing_label,status", [("skip", reasons.SKIPPED), ("error", reasons.FAILED)])
def test_a_record_without_a_row_follows_missing_label(missing_label, status):
    settings = _settings(missing_label=missing_label)
    [(result,)] = _join_rows("P1", [], [_record("a.dcm")], _space("cat"), settings)
    assert isinstance(result, Outcome) and result.status == status
    assert result.reason == reasons.MISSING_LABEL


@pytest.mark.parametrize("rows,reason", [([], reasons.MISSING_LABEL),
                                         ([LabelRow("P1", "7.5", None, 2)], reasons.INVALID_LABEL)])
def test_a_volume_without_a_usable_label_is_one_outcome_per_slice(rows, reason):
    """matched counts files: a --unit series volume of N slices that is not labelled is N
    inputs not written (else the counts check refuses the run as unaccounted)."""
    slices = tuple(SourceFile(f"/in/s/{i}.dcm", f"s/{i}.dcm", 10, 1.0) for i in range(3))
    volume = dataclasses.replace(_record("s/0.dcm"), members=slices)
    [outcomes] = _join_rows("P1", rows, [volume], _space("1", "2"), _settings(missing_label="error"))
    assert sorted(o.uri for o in outcomes) == sorted(s.uri for s in slices)
    assert {(o.status, o.reason) for o in outcomes} == {(reasons.FAILED, reason)}
    assert all(o.message.startswith("series of 3 slices: ") for o in outcomes)


def test_unlabeled_keeps_the_record_with_the_kinds_missing_value():
    settings = _settings(missing_label="unlabeled")
    [record] = _join_rows("P1", [], [_record("a.dcm")], _space("cat"), settings)
    assert record.label == -1
    [record] = _join_rows("P1", [], [_record("a.dcm")], _space("0.5", "1.5"), settings)
    assert math.isnan(record.label)


def test_a_value_outside_the_label_space_is_invalid_label():
    settings = _settings()
    [(result,)] = _join_rows("P1", [LabelRow("P1", "7.5", None, 2)], [_record("a.dcm")],
                              _space("1", "2"), settings)
    assert isinstance(result, Outcome) and result.reason == reasons.INVALID_LABEL


@pytest.mark.parametrize("split,ok", [("train", True), ("fold-2", True), ("../x", False), ("", False),
                                      ("a/b", False), (".hidden", False)])
def test_split_column_values_are_checked_before_they_name_anything(split, ok):
    settings = _settings(split_column="fold")
    [result] = _join_rows("P1", [LabelRow("P1", "cat", split, 2)], [_record("a.dcm")],
                              _space("cat"), settings)
    if ok:
        assert result.split == split
    else:
        [outcome] = result
        assert isinstance(outcome, Outcome) and outcome.reason == reasons.INVALID_SPLIT


def test_failure_threshold_by_ratio_and_by_count():
    assert failure_verdict(5, 100, 0.05, None) == ""
    assert "6 of 100 inputs failed" in failure_verdict(6, 100, 0.05, None)
    assert failure_verdict(3, 100, 1.0, 3) == ""
    assert "--max_failures 3" in failure_verdict(4, 100, 1.0, 3)
    assert failure_verdict(0, 0, 0.0, None) == ""


def _counts(matched, written, skipped=None, failed=None, records=None):
    skipped, failed = skipped or {}, failed or {}
    return {"matched": matched, "written": written, "skipped": skipped, "failed": failed,
            "records": written if records is None else records,
            "unaccounted": matched - written - sum(skipped.values()) - sum(failed.values())}


def test_counts_must_add_up_to_commit():
    assert accounting_verdict(_counts(10, 8, {"duplicate": 1}, {"decode_error": 1})) == ""
    assert "+2 unaccounted" in accounting_verdict(_counts(10, 8))
    assert "-1 unaccounted" in accounting_verdict(_counts(10, 11))


def test_nothing_converted_is_no_dataset_unless_allowed():
    counts = _counts(2, 0, {"unsupported_format": 2})
    assert "none of the 2 matched inputs" in empty_verdict(counts, False)
    assert "unsupported_format: 2" in empty_verdict(counts, False)
    assert empty_verdict(counts, True) == ""
    assert empty_verdict(_counts(0, 0), False) == ""      # no input at all: refused before any work


def test_a_group_in_several_splits_is_refused_unless_allowed():
    assert leak_verdict((0, ()), "patient", False) == ""
    verdict = leak_verdict((3, ("test", "train")), "patient", False)
    assert verdict.startswith("3 group(s) (split by patient) appear in more than one split")
    assert "across splits test, train" in verdict and "--allow_split_leak" in verdict
    assert leak_verdict((3, ("test", "train")), "patient", True) == ""


def test_splits_of_a_group_merge_by_union_whatever_the_partial_results():
    from dcm2tfrecord.transforms.splits.steps import LeakSummary, SplitsOfGroup
    fn = SplitsOfGroup()
    parts = [fn.add_input(fn.create_accumulator(), s) for s in ("train", "test", "train")]
    assert fn.extract_output(fn.merge_accumulators(parts)) == ("test", "train")
    nested = fn.merge_accumulators([fn.merge_accumulators(parts[:2]), fn.merge_accumulators(parts[2:])])
    assert fn.extract_output(nested) == ("test", "train")
    leak = LeakSummary()
    a = leak.add_input(leak.create_accumulator(), ("g1", ("test", "train")))
    b = leak.add_input(leak.create_accumulator(), ("g2", ("train", "validation")))
    assert leak.extract_output(leak.merge_accumulators([a, b, leak.create_accumulator()])) == (
        2, ("test", "train", "validation"))
    assert leak.extract_output(leak.create_accumulator()) == (0, ())


def test_split_fractions_are_met_to_sampling_precision():
    """200,000 groups: each split's share within 5 standard deviations of its fraction."""
    from collections import Counter
    from dcm2tfrecord.transforms.splits.assign import assign_split
    fractions = (("train", 0.7), ("validation", 0.15), ("test", 0.1), ("empty", 0.0), ("rest", 0.05))
    n = 200_000
    got = Counter(assign_split(f"patient_id:P{i:07d}", fractions) for i in range(n))
    assert got["empty"] == 0
    for name, fraction in fractions:
        assert abs(got[name] / n - fraction) <= 5 * math.sqrt(fraction * (1 - fraction) / n), (name, got)
