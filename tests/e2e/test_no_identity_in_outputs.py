"""No patient identity in any byte a run writes, whatever the options
(docs/CONVERTING.md, "Patient safety").

The needles come from the inputs themselves, not from a hand-picked list:
every string value of every element of every input DICOM (file meta and
nested sequences included, person names also by component), every component
of every input path and of the labels file's path, and the salt. The inputs
are two archives each named after its patient, as archives often are
(``--input .../Smith_Jane_12345``), holding identified copies of pydicom's CT
and multi-frame RT dose files.

The haystack is every file the run writes: everything under ``--output``
(hidden folders, versions, ``LATEST``, ``*.records.json``, a failed run's
``run_failed.json``) and the ``--summary_json`` file, searched as UTF-8 and
UTF-16 (both byte orders). One part is excluded by design: the ``uri`` of
each ``errors.jsonl`` line, which docs/CONVERTING.md says names the failing source
file on purpose, for the operator (not training data; the reader never opens
it). Every other field of those lines is searched. And the summary's timing fields
(TIMING_FIELDS: wall time and throughput), which differ every run: a rounded one can
equal a number of the input by chance. In JSON files, numbers and digests are compared
whole with the needles (a value copied from an input is copied whole), not searched for
substrings (``"num_bytes": 118601`` holds CT_small's Exposure Time 1601 by chance).

Which values are needles (the rule):
- every value of a text VR (AE AS CS DA DS DT IS LO LT PN SH ST TM UC UI UR UT),
  each value of a multi-valued element, and each component of a person name;
- except values shorter than ``MIN_NEEDLE`` characters ("1", "CT", "F"): they
  identify no one and occur by chance in pixel bytes;
- except the attributes docs/CONVERTING.md lists as written by design under ``dicom/``
  (modality, body part, manufacturer and model, photometric interpretation,
  view position, laterality, spacings, slice thickness, KVP, bits stored,
  rescale, window, transfer syntax) — the list is restated here from the
  guide, not imported from the code under test;
- except Coded String values (CS: defined terms of the standard such as
  ORIGINAL, PRIMARY, AXIAL — the same words in every hospital's files) and
  UIDs defined by the standard itself (root 1.2.840.10008: SOP classes,
  transfer syntaxes), which name no instance.
Path components below the test's temporary folder are needles; the
temporary folder's own components are not (the output lives there too, and
the summary names the output directory).
"""
from __future__ import annotations

import json
import math
import re
import os

import pydicom
import pytest

from dcm2tfrecord.pipeline.convert import ConversionFailed
from tests.support import pydicom_test_files
from tests.support import run_convert
from tests.support.identity import STANDARD_UID_ROOT, TEXT_VRS, _identify
from tests.support.processes import tree_bytes

SALT = "phi-test-salt-7d1e0c9b"
MIN_NEEDLE = 4
# docs/CONVERTING.md, "Patient safety": the attributes written under dicom/ by default.
WRITTEN_BY_DESIGN = frozenset((
    "Modality", "BodyPartExamined", "Manufacturer", "ManufacturerModelName",
    "PhotometricInterpretation", "ViewPosition", "Laterality", "ImageLaterality",
    "PixelSpacing", "ImagerPixelSpacing", "SliceThickness", "SpacingBetweenSlices", "KVP",
    "BitsStored", "RescaleSlope", "RescaleIntercept", "WindowCenter", "WindowWidth",
    "TransferSyntaxUID"))
PATIENTS = (("Smith_Jane_12345", "Smith^Jane^Q", "12345"), ("Doe_John_67890", "Doe^John", "67890"))


def _write_patient(root: str, name: str, patient_id: str) -> list[str]:
    """Three CT slices of one series, one 15-frame RT dose file, and the slices as one Legacy
    Converted Enhanced CT (highdicom), whose attributes sit in functional groups too."""
    from tests.support.enhanced_objects import legacy_enhanced
    src = pydicom_test_files()
    # each patient's own file names: two --input roots holding one relative path are refused
    # (both files would get one record id), and the names are needles too
    tag = patient_id[-3:]
    paths = [os.path.join(root, "CT_chest", f"slice_{tag}_{i:02d}.dcm") for i in range(3)]
    paths.append(os.path.join(root, "RT_plan", f"dose_volume_{tag}.dcm"))
    slices = []
    for i, path in enumerate(paths):
        ds = pydicom.dcmread(os.path.join(src, "rtdose.dcm" if "RT_plan" in path else "CT_small.dcm"))
        _identify(ds, name, patient_id, i if i < 3 else 10)
        if i < 3:
            ds.ImagePositionPatient, ds.InstanceNumber = [0.0, 0.0, 5.0 * i], i + 1
            slices.append(ds)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ds.save_as(path)
    enhanced = legacy_enhanced(slices, f"phi-{patient_id}")
    _identify(enhanced, name, patient_id, 20)
    # a name no feature name or description holds ("volume" is in dicom/volumes)
    paths.append(os.path.join(root, "CT_enhanced", f"legacy_mf_{tag}.dcm"))
    os.makedirs(os.path.dirname(paths[-1]), exist_ok=True)
    enhanced.save_as(paths[-1])
    return paths


def _value_needles(path: str) -> set[str]:
    ds = pydicom.dcmread(path)
    needles: set[str] = set()
    for elem in list(ds.file_meta.iterall()) + list(ds.iterall()):
        if elem.VR not in TEXT_VRS or elem.VR == "CS" or elem.keyword in WRITTEN_BY_DESIGN:
            continue
        values = elem.value if isinstance(elem.value, (list, tuple, pydicom.multival.MultiValue)) \
            else [elem.value]
        for value in values:
            text = str(value).strip()
            parts = [text] + ([p for p in text.replace("=", "^").split("^")] if elem.VR == "PN" else [])
            needles |= {p for p in parts if not p.startswith(STANDARD_UID_ROOT)}
    return needles


def _path_needles(path: str, below: str) -> set[str]:
    parts = os.path.relpath(path, below).split(os.sep)
    return set(parts) | {os.path.splitext(p)[0] for p in parts}


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("phi"))
    inputs, files = [], []
    for folder, name, patient_id in PATIENTS:
        inputs.append(os.path.join(base, folder))
        files += _write_patient(inputs[-1], name, patient_id)
    labels_dir = os.path.join(base, "Lothian_Jones_Mary_labels")
    os.makedirs(labels_dir)
    labels = os.path.join(labels_dir, "Smith_Jane_12345_findings.csv")
    with open(labels, "w") as handle:
        handle.write("path,label\n")
        for i, path in enumerate(sorted(files)):
            root = next(r for r in inputs if path.startswith(r + os.sep))
            handle.write(f"{os.path.relpath(path, root)},{('nodule', 'clear')[i % 2]}\n")
    wrong_labels = os.path.join(labels_dir, "Doe_John_67890_findings.csv")   # matches no file
    with open(wrong_labels, "w") as handle:
        handle.write("path,label\nnot/a/file.dcm,nodule\n")
    needles = {SALT} | _path_needles(labels, base) | _path_needles(wrong_labels, base)
    for path in files:
        needles |= _value_needles(path) | _path_needles(path, base)
    needles = {n for n in needles if len(n) >= MIN_NEEDLE}
    return dict(inputs=inputs, labels=labels, wrong_labels=wrong_labels, needles=needles)


_DIGEST = re.compile(rb"[0-9a-f]{64}")
# summary.json's fields that time the run (pipeline/summary.py): they differ every run, and a
# rounded figure ("records_per_second": 16.01) can equal a number of the input by chance. Only
# these are left out of the search; every other field of summary.json is searched.
TIMING_FIELDS = ("wall_seconds", "mb_per_second", "records_per_second")


def _split_json(value, tokens: set):
    """A JSON value with what the converter computes from bytes taken out into ``tokens``, each
    whole: numbers (sizes, counts), as JSON writes them, and 64-hex digests (sha256 of shards).
    Searched as substrings, a 4-digit needle (CT_small's Exposure Time 1601) turns up in them by
    chance ("num_bytes": 118601, "sha256": "eb1601..."); a value copied from an input is copied
    whole, so each token is compared whole with the needles (_leaks). Strings other than digests
    stay, searched as they are, and so do the keys."""
    if isinstance(value, dict):
        return {k: _split_json(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_split_json(v, tokens) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        tokens.add(json.dumps(value))
        return 0
    if isinstance(value, str) and _DIGEST.fullmatch(value.encode()):
        tokens.add(value)
        return "#"
    return value


def _whole_needles(needles: set[str]) -> set[str]:
    """The needles as a JSON number or digest copied from them would read: each as it is, and
    a number also as JSON writes it as an int and as a float ("16.010" -> 16.01, "1601" -> 1601
    and 1601.0), where that still has MIN_NEEDLE characters ("0000" is not 0)."""
    out = set(needles)
    for needle in needles:
        try:
            number = float(needle)
        except ValueError:
            continue
        if not math.isfinite(number):
            continue
        forms = [json.dumps(number)] + ([json.dumps(int(number))] if number.is_integer() else [])
        out |= {form for form in forms if len(form) >= MIN_NEEDLE}
    return out


def _written_files(directory: str) -> tuple[dict[str, bytes], dict[str, set]]:
    """Every file under ``directory``, and the whole tokens of its JSON files: errors.jsonl with
    each line's uri taken out; JSON files with their computed numbers and digests taken out
    into the tokens (_split_json)."""
    out, tokens = tree_bytes(directory), {}
    for name, data in out.items():
        if os.path.basename(name) == "errors.jsonl":
            lines = [json.loads(line) for line in data.decode("utf-8").splitlines()]
            assert all("uri" in line for line in lines)
            tokens[name] = set()
            out[name] = "\n".join(json.dumps(_split_json({k: v for k, v in line.items() if k != "uri"},
                                                         tokens[name]))
                                  for line in lines).encode("utf-8")
        elif name.endswith(".json"):
            tokens[name] = set()
            out[name] = json.dumps(_split_json(json.loads(data.decode("utf-8")), tokens[name]),
                                   ensure_ascii=False).encode()
    return out, tokens


def _summary_searched(summarized: dict) -> tuple[bytes, set]:
    """summary.json as searched: every field but TIMING_FIELDS, split as _split_json does."""
    # the names still hold: a failed run's summary (issue 43) times the run, no throughput
    timed = set(TIMING_FIELDS) if summarized.get("status", "committed") == "committed" else {"wall_seconds"}
    assert timed <= set(summarized), sorted(summarized)
    tokens: set = set()
    kept = {k: v for k, v in summarized.items() if k not in TIMING_FIELDS}
    return json.dumps(_split_json(kept, tokens)).encode(), tokens


def _leaks(haystack: dict[str, bytes], needles: set[str], tokens: dict[str, set]) -> list[tuple[str, str]]:
    found = []
    for name, data in sorted(haystack.items()):
        for needle in sorted(needles):
            if any(needle.encode(codec) in data for codec in ("utf-8", "utf-16-le", "utf-16-be")):
                found.append((name, needle))
    whole = _whole_needles(needles)
    for name, values in sorted(tokens.items()):
        found += [(name, value) for value in sorted(values & whole)]
    return found


# Each run also writes --summary_json (a committed one), so that file is searched too.
MATRIX = {
    "plain": dict(labels="labels"),
    "unit_series": dict(unit="series"),
    "frames_split": dict(frames="split", labels="labels"),
    "incremental": dict(incremental=True, labels="labels"),
    # every record fails (its label is missing and that is an error): nothing commits
    "failed_run": dict(labels="wrong_labels", missing_label="error", max_failure_ratio=0.0),
}


def test_the_needles_are_the_inputs_own_values(archive):
    """The rule keeps what identifies and drops only what the docstring says."""
    needles = archive["needles"]
    assert {"Smith_Jane_12345", "Doe_John_67890", "Smith^Jane^Q", "Smith", "MRN12345", "19580312",
            "066Y", "St Elsewhere Hospital", "CTSTATION07", "STY12345", "20240229", "134501.250",
            "1.2.826.0.1.3680043.9.7771.12345.4", "PACSNODE9", "NHS67890", "Lothian Health Board",
            "Follow-up for Doe^John", "Lothian_Jones_Mary_labels", "Smith_Jane_12345_findings.csv",
            "Doe_John_67890_findings.csv", "slice_345_01.dcm", "dose_volume_345", "CT_chest", SALT} <= needles
    assert "1.2.840.10008.1.2.1" not in needles and "ORIGINAL" not in needles
    assert len(needles) > 80


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_no_input_value_or_path_in_any_written_byte(archive, tmp_path, case):
    options = {k: (archive[v] if k == "labels" else v) for k, v in MATRIX[case].items()}
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    run = lambda: run_convert(archive["inputs"], out, id_salt=SALT, summary_json=str(summary),  # noqa: E731
                              target_shard_mb=0.05, min_shard_mb=0.01, max_shard_mb=4, **options)
    if case == "failed_run":
        with pytest.raises(ConversionFailed):
            run()
        assert (out / "run_failed.json").exists() and not (out / "dataset.json").exists()
    else:
        result = run()
        assert summary.exists()
        assert result["failed"] == {} and result["written"] >= 6, result   # the Enhanced files too
    haystack, tokens = _written_files(str(out))
    if summary.exists():
        haystack["summary.json"], tokens["summary.json"] = _summary_searched(json.loads(summary.read_text()))
    assert case == "failed_run" or any(n.endswith(".tfrecord") for n in haystack), sorted(haystack)
    if case == "incremental":
        assert any(n.endswith(".records.json") for n in haystack) and "LATEST" in haystack
    leaks = _leaks(haystack, archive["needles"], tokens)
    assert leaks == [], leaks


def test_locations_are_recorded_as_a_keyed_hash_unless_asked_for():
    from dcm2tfrecord.dataset.versions import changed_options
    from dcm2tfrecord.pipeline.options.table import PLACEMENT_OPTIONS, ConvertOptions
    from dcm2tfrecord.transforms.hashing import location_hash
    inputs = ("gs://hospital-archive/Smith_Jane_12345/ct", "/archive/Doe_John_67890")
    labels = "gs://hospital-archive/Smith_Jane_12345_labels.csv"
    opts = ConvertOptions(inputs=inputs, output="/data/out", labels=labels, id_salt=SALT)
    recorded = opts.recorded()      # what convert writes as dataset.json's "options"
    assert recorded["inputs"] == [f"gs://hospital-archive/<hmac:{location_hash(inputs[0], SALT)}>",
                                  f"file://<hmac:{location_hash(inputs[1], SALT)}>"]
    assert recorded["labels"] == f"gs://hospital-archive/<hmac:{location_hash(labels, SALT)}>"
    assert "Smith" not in json.dumps(recorded) and "Doe" not in json.dumps(recorded)
    given = opts.replace(record_input_paths=True).recorded()
    assert given["inputs"] == list(inputs) and given["labels"] == labels
    # --incremental: neither the locations nor the switch make the next version rebuild
    assert {"inputs", "labels", "record_input_paths"} <= PLACEMENT_OPTIONS
    assert changed_options(given, recorded, PLACEMENT_OPTIONS) == []


def test_json_numbers_are_searched_whole_and_only_the_timing_fields_left_out():
    """The search itself (issue 35: a rounded throughput figure in summary.json once equalled a
    number of the input): a timing field of summary.json is left out by name, whatever its value;
    any other number copied whole from an input is found, as an int, a float or a string; a
    number or digest that merely contains a needle is not."""
    needles = {"1601", "16.010", "Smith", "0000"}
    summary, tokens = _summary_searched({"wall_seconds": 1601, "mb_per_second": 16.01,
                                         "records_per_second": 1601.0, "written": 3,
                                         "bytes_written": 118601, "output": "/x/out"})
    assert _leaks({"summary.json": summary}, needles, {"summary.json": tokens}) == []
    for leaked, found in ((1601, "1601"), (1601.0, "1601.0"), (16.01, "16.01"), ("a 1601 b", "1601"),
                          ("Smith", "Smith")):
        summary, tokens = _summary_searched({"wall_seconds": 0.5, "mb_per_second": 0.0,
                                             "records_per_second": 0.0, "notes": [leaked], "written": 0})
        assert _leaks({"summary.json": summary}, needles, {"summary.json": tokens}) == \
            [("summary.json", found)], leaked
    digest = "eb1601" + "0" * 58
    tokens = set()
    data = json.dumps(_split_json({"sha256": digest, "num_bytes": 118601}, tokens)).encode()
    assert _leaks({"dataset.json": data}, needles, {"dataset.json": tokens}) == []
