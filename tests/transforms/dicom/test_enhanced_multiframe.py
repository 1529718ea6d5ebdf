"""Enhanced multi-frame DICOM converted faithfully (functional groups per frame, frames in space order,
stacks kept apart), checked on objects made by independent code.

The Enhanced files are highdicom's Legacy Converted Enhanced CT of single-frame series
(tests/support/enhanced_objects.py), stored out of order. The oracle is the single-frame originals
converted with ``--unit series`` (or ``--unit file`` for split frames): a code path that reads
the top-level rescale, window and position of classic files, independent of the functional
groups code under test. Every record must equal its oracle record value for value, frame for frame.
"""
from __future__ import annotations

import hashlib
import io
import os
import warnings

import numpy as np
import pydicom
import pytest
from pydicom.pixels import apply_modality_lut

from dcm2tfrecord import reader
from tests.support import enhanced_objects as eo
from tests.support import TEST_SALT, run_convert
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import functional_groups
from dcm2tfrecord.transforms.dicom.pixels import decode_dicom
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.dicom.voi import linear_window
from dcm2tfrecord.transforms.series import volumes
from dcm2tfrecord.transforms.settings import DecodeSettings

PYDICOM_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "pydicom_data")
OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)

# name -> (slice sets of one Enhanced file: each a series of single-frame originals, stored order)
CASES = {
    "shared": [dict(slope="1", intercepts=("-1024",), windows=[("40", "400")])],
    "fractional": [dict(slope="0.5", intercepts=("-1000",), windows=[("-600", "1500")])],
    "alternating": [dict(slope="1", intercepts=("-1024", "-1000"), windows=[("40", "400"), ("60", "160")])],
    # two phases at the same positions (Temporal Position Index 1 and 2), interleaved in the file
    "temporal": [dict(slope="1", intercepts=("-1024",), windows=[("40", "400")]),
                 dict(slope="1", intercepts=("-1000",), windows=[("50", "350")], pixel_offset=500)],
    # an axial and a coronal stack in one file
    "orientations": [dict(slope="1", intercepts=("-1024",), windows=[("40", "400")]),
                     dict(slope="1", intercepts=("-1024",), windows=[("40", "400")],
                          orientation=eo.CORONAL, spacing=3.0, pixel_offset=900)],
}
FRAMES = 6
STORED_ORDER = [3, 0, 5, 1, 4, 2]       # frame k of the file is slice STORED_ORDER[k]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    root = tmp_path_factory.mktemp("enhanced")
    originals, enhanced = root / "originals", root / "enhanced"
    truth = {}
    for name, sets in CASES.items():
        series = [eo.slices(f"{name}{n}", FRAMES, patient=f"P-{name}", **kw) for n, kw in enumerate(sets)]
        for n, datasets in enumerate(series):
            eo.write_slices(originals / f"{name}{n}", datasets)
        everything = [ds for datasets in series for ds in datasets]
        made = eo.legacy_enhanced(everything, name)
        order = [n * FRAMES + k for k in STORED_ORDER for n in range(len(series))]    # interleaved
        by_sop = {ds.SOPInstanceUID: i for i, ds in enumerate(everything)}
        current = [by_sop[sop] for sop in eo.source_of_frames(made)]
        eo.reorder_frames(made, [current.index(i) for i in order])
        assert [by_sop[s] for s in eo.source_of_frames(made)] == order
        if name == "temporal":
            eo.set_temporal_positions(made, {ds.SOPInstanceUID: n + 1 for n, datasets in enumerate(series)
                                             for ds in datasets})
        eo.save(made, enhanced / f"{name}.dcm")
        truth[name] = series
    return str(originals), str(enhanced), truth


def _records(dataset_dir) -> list[dict]:
    info = reader.info(dataset_dir)
    out = []
    for split in info.split_names:
        exact = info.layout(split).dtype
        for batch in reader.load(dataset_dir, split=split, batch_size=1, shuffle=False, output="dict",
                                 dtype=exact):
            out.append({"image": batch["image"][0].numpy(), "dtype": batch["dtype"][0].numpy().decode(),
                        **{k: batch[k][0].numpy() for k in ("dicom/slice_spacing", "dicom/rescale_intercept",
                                                            "dicom/window", "dicom/image_position_patient",
                                                            "dicom/image_orientation_patient")
                           if k in batch}})
    return out


def _by_pixels(records) -> list[dict]:
    return sorted(records, key=lambda r: hashlib.sha256(r["image"].tobytes()).hexdigest())


def _convert(inputs, out, **options) -> list[dict]:
    summary = run_convert(inputs, out, **OPTIONS, **options)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    return _by_pixels(_records(str(out)))


@pytest.mark.parametrize("values", ["modality", "window"])
def test_each_stack_equals_its_single_frame_series(archives, tmp_path, values):
    originals, enhanced, truth = archives
    oracle = _convert(originals, tmp_path / "oracle", unit="series", dicom_values=values)
    got = _convert(enhanced, tmp_path / "enhanced", dicom_values=values)
    assert len(oracle) == len(got) == sum(len(sets) for sets in CASES.values()) == 7
    for want, have in zip(oracle, got):
        assert have["image"].shape == want["image"].shape and have["image"].shape[0] == FRAMES
        assert have["dtype"] == want["dtype"]
        np.testing.assert_array_equal(have["image"], want["image"])
        np.testing.assert_allclose(have["dicom/slice_spacing"], want["dicom/slice_spacing"], atol=1e-4)
    if values == "modality":
        dtypes = sorted(r["dtype"] for r in got)
        assert dtypes == ["float32"] + ["int16"] * 6       # 0.5 / -1000 needs float32; HU are int16


def test_values_are_rescaled_hounsfield_units_in_space_order(archives):
    """The same, against pydicom's modality LUT of each original, without any pipeline."""
    _, enhanced, truth = archives
    settings = DecodeSettings(id_salt=TEST_SALT)
    for name, series in truth.items():
        path = os.path.join(enhanced, f"{name}.dcm")
        records = expand_frames(probe_file(SourceFile(path, f"{name}.dcm", os.path.getsize(path), 1.0),
                                           settings=settings), settings)
        assert len(records) == len(series)
        wants = [np.stack([apply_modality_lut(ds.pixel_array, ds) for ds in datasets]) for datasets in series]
        matched = []
        for record in records:
            with open(path, "rb") as handle:
                have, _, _ = decode_dicom(handle, settings, frames=record.stacks[0].frames)
            assert str(have.dtype) == record.spec.dtype
            matched += [n for n, want in enumerate(wants) if np.array_equal(have[..., 0], want)]
        assert sorted(matched) == list(range(len(series))), name


def test_split_frames_carry_their_own_rescale_window_and_position(archives, tmp_path):
    originals, enhanced, truth = archives
    oracle = _convert(originals, tmp_path / "oracle", dicom_values="window")
    got = _convert(enhanced, tmp_path / "split", frames="split", dicom_values="window")
    assert len(got) == len(oracle) == 7 * FRAMES
    for want, have in zip(oracle, got):
        np.testing.assert_array_equal(have["image"], want["image"])
        assert have["dtype"] == want["dtype"]
        np.testing.assert_array_equal(have["dicom/window"], want["dicom/window"])
        np.testing.assert_array_equal(have["dicom/rescale_intercept"], want["dicom/rescale_intercept"])
    at = {}      # (position, orientation) -> the originals there (several cases share a position)
    for series in truth.values():
        for datasets in series:
            for ds in datasets:
                key = tuple(np.float32(float(v))
                            for v in list(ds.ImagePositionPatient) + list(ds.ImageOrientationPatient))
                at.setdefault(key, []).append(ds)
    for record in got:
        key = tuple(record["dicom/image_position_patient"]) + tuple(record["dicom/image_orientation_patient"])
        image = record["image"].reshape(128, 128)
        assert any(np.array_equal(image, linear_window(apply_modality_lut(ds.pixel_array, ds),
                                                       float(ds.WindowCenter), float(ds.WindowWidth), 8))
                   for ds in at[key])


def test_stacks_of_one_file_are_records_of_their_own(archives):
    _, enhanced, _ = archives
    settings = DecodeSettings(id_salt=TEST_SALT)
    path = os.path.join(enhanced, "temporal.dcm")
    record = probe_file(SourceFile(path, "temporal.dcm", os.path.getsize(path), 1.0), settings=settings)
    assert [s.label for s in record.stacks] == ["temporal=1", "temporal=2"]
    # interleaved in the file: phase 1 in even frames, phase 2 in odd, each stored out of order
    assert [s.frames for s in record.stacks] == [(2, 6, 10, 0, 8, 4), (3, 7, 11, 1, 9, 5)]
    records = expand_frames(record, settings)
    assert len({r.record_id for r in records}) == 2 and [r.counts_sources for r in records] == [True, False]
    assert [r.spec.depth for r in records] == [FRAMES, FRAMES]
    path = os.path.join(enhanced, "orientations.dcm")
    record = probe_file(SourceFile(path, "orientations.dcm", os.path.getsize(path), 1.0), settings=settings)
    assert sorted(s.spacing for s in record.stacks) == [pytest.approx(2.5), pytest.approx(3.0)]
    assert all(s.label.startswith("orientation=") for s in record.stacks)


def test_window_preset_wins_over_frame_voi(archives):
    _, enhanced, truth = archives
    settings = DecodeSettings(id_salt=TEST_SALT, dicom_values="window", window="lung")
    path = os.path.join(enhanced, "alternating.dcm")
    record = probe_file(SourceFile(path, "alternating.dcm", os.path.getsize(path), 1.0), settings=settings)
    with open(path, "rb") as handle:
        have, _, window = decode_dicom(handle, settings, frames=record.stacks[0].frames)
    want = np.stack([linear_window(apply_modality_lut(ds.pixel_array, ds), -600, 1500, 8)
                     for ds in truth["alternating"][0]])
    np.testing.assert_array_equal(have[..., 0], want)
    assert {(w["source"], w["center"], w["width"]) for w in window["frames"]} == {("preset", -600, 1500)}


def test_unit_series_over_one_enhanced_file_and_over_several(archives, tmp_path):
    _, enhanced, _ = archives
    by_series = _convert(enhanced, tmp_path / "series", unit="series")
    assert len(by_series) == 7
    settings = DecodeSettings(id_salt=TEST_SALT)
    wants = []
    for name in CASES:
        path = os.path.join(enhanced, f"{name}.dcm")
        for record in expand_frames(probe_file(SourceFile(path, f"{name}.dcm", os.path.getsize(path), 1.0),
                                               settings=settings), settings):
            with open(path, "rb") as handle:
                wants.append(decode_dicom(handle, settings, frames=record.stacks[0].frames)[0])
    # the reader gives the split's one exact dtype (float32 here, for the fractional rescale)
    # (shared and the first temporal phase hold equal values: match as multisets)
    matched = [{n for n, want in enumerate(wants) if np.array_equal(have["image"], want)} for have in by_series]
    assert all(matched) and set().union(*matched) == set(range(7))
    # two Enhanced files of one series are not stacked together: the series fails, with the reason
    records = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.dcm"
        made = eo.legacy_enhanced(eo.slices(f"two{name}", 3, windows=[("40", "400")]), f"two{name}")
        eo.save(made, path)
        records += expand_frames(probe_file(SourceFile(str(path), f"{name}.dcm", os.path.getsize(path), 1.0),
                                            settings=settings), settings)
    with pytest.raises(ConversionError) as caught:
        volumes.volume_records("1.2.3", records, TEST_SALT)
    assert caught.value.reason == reasons.SERIES_ENHANCED and "--unit file" in str(caught.value)
    assert volumes.volume_records("1.2.3", records[:1], TEST_SALT) == records[:1]


def _with_frames(made, edit) -> bytes:
    edit(made)
    buffer = io.BytesIO()
    made.save_as(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("edit, expected", [
    (lambda m: [setattr(i.PlanePositionSequence[0], "ImagePositionPatient",
                        m.PerFrameFunctionalGroupsSequence[0].PlanePositionSequence[0].ImagePositionPatient)
                for i in m.PerFrameFunctionalGroupsSequence[:2]], "same position"),
    (lambda m: delattr(m.PerFrameFunctionalGroupsSequence[1], "PlanePositionSequence"), "others not"),
])
def test_frames_that_cannot_be_ordered_fail_with_a_reason(tmp_path, edit, expected):
    path = tmp_path / "bad.dcm"
    path.write_bytes(_with_frames(eo.legacy_enhanced(eo.slices("bad", 4), "bad"), edit))
    with pytest.raises(ConversionError) as caught:
        probe_file(SourceFile(str(path), "bad.dcm", os.path.getsize(path), 1.0),
                   settings=DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reasons.FRAMES_UNORDERED and expected in str(caught.value)


def test_per_frame_functional_groups_must_match_the_number_of_frames(tmp_path):
    made = eo.legacy_enhanced(eo.slices("short", 3), "short")
    made.PerFrameFunctionalGroupsSequence = made.PerFrameFunctionalGroupsSequence[:2]
    with pytest.raises(ConversionError) as caught:
        functional_groups.frame_attributes(made)
    assert caught.value.reason == reasons.INVALID_VALUE and "2 items for 3 frames" in str(caught.value)


def test_modality_lut_in_the_functional_groups_is_applied(tmp_path):
    """A Modality LUT Sequence in the Pixel Value Transformation replaces the rescale, frame by frame."""
    from pydicom.dataset import Dataset
    made = eo.legacy_enhanced(eo.slices("lut", 2, windows=[("40", "400")]), "lut")
    shared = made.SharedFunctionalGroupsSequence[0]
    if "PixelValueTransformationSequence" in shared:
        del shared.PixelValueTransformationSequence
    for n, item in enumerate(made.PerFrameFunctionalGroupsSequence):
        lut = Dataset()
        lut.LUTDescriptor = [4, 0, 16]       # 4 entries from stored value 0; beyond: the last entry
        lut.ModalityLUTType = "HU"
        lut.add_new("LUTData", "US", [10 * n, 20, 30, 40 + n])
        transform = Dataset()
        transform.ModalityLUTSequence = pydicom.sequence.Sequence([lut])
        item.PixelValueTransformationSequence = pydicom.sequence.Sequence([transform])
    path = tmp_path / "lut.dcm"
    eo.save(made, path)
    settings = DecodeSettings(id_salt=TEST_SALT)
    record = expand_frames(probe_file(SourceFile(str(path), "lut.dcm", os.path.getsize(path), 1.0),
                                      settings=settings), settings)[0]
    assert record.spec.dtype == "uint16"
    with open(path, "rb") as handle:
        have, ds, _ = decode_dicom(handle, settings, frames=record.stacks[0].frames)
    views = functional_groups.value_views(ds)
    for k, frame in enumerate(record.stacks[0].frames):
        stored = ds.pixel_array[frame]
        np.testing.assert_array_equal(have[k, ..., 0], apply_modality_lut(stored, views[frame]))
    assert sorted(int(have[k].max()) for k in range(2)) == [40, 41]      # each frame its own LUT



@pytest.mark.parametrize("broken, says", [
    (lambda lut: delattr(lut, "LUTDescriptor"), "no usable LUT Descriptor (0028,3002)"),
    (lambda lut: setattr(lut, "LUTDescriptor", [4, 0]), "no usable LUT Descriptor (0028,3002)"),
    (lambda lut: delattr(lut, "LUTData"), "no LUT Data (0028,3006)"),
])
def test_a_modality_lut_without_its_descriptor_or_data_is_invalid_value(tmp_path, broken, says):
    """Issue 35 item 8: it failed as unexpected_error (an AttributeError)."""
    from pydicom.dataset import Dataset
    made = eo.legacy_enhanced(eo.slices("badlut", 2), "badlut")
    shared = made.SharedFunctionalGroupsSequence[0]
    if "PixelValueTransformationSequence" in shared:
        del shared.PixelValueTransformationSequence
    for item in made.PerFrameFunctionalGroupsSequence:
        lut = Dataset()
        lut.LUTDescriptor = [4, 0, 16]
        lut.ModalityLUTType = "HU"
        lut.add_new("LUTData", "US", [10, 20, 30, 40])
        broken(lut)
        transform = Dataset()
        transform.ModalityLUTSequence = pydicom.sequence.Sequence([lut])
        item.PixelValueTransformationSequence = pydicom.sequence.Sequence([transform])
    path = tmp_path / "badlut.dcm"
    eo.save(made, path)
    with pytest.raises(ConversionError) as caught:
        expand_frames(probe_file(SourceFile(str(path), "badlut.dcm", os.path.getsize(path), 1.0),
                                 settings=DecodeSettings(id_salt=TEST_SALT)), DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reasons.INVALID_VALUE and says in str(caught.value), str(caught.value)


# ---------------------------------------------------------------- pydicom's Enhanced MR files


EMRI = ("emri_small.dcm", "emri_small_big_endian.dcm", "emri_small_RLE.dcm",
        "emri_small_jpeg_2k_lossless.dcm", "emri_small_jpeg_ls_lossless.dcm")


@pytest.mark.parametrize("values", ["stored", "modality", "window"])
def test_pydicom_enhanced_mr_files_under_every_value_mode(values):
    """pydicom-data's emri_small* (Enhanced MR, 10 frames, no functional groups left in them):
    frames as stored, values as pydicom's decode; every encoding the same."""
    settings = DecodeSettings(id_salt=TEST_SALT, dicom_values=values)
    first = None
    for name in EMRI:
        path = os.path.join(PYDICOM_DATA, name)
        record = probe_file(SourceFile(path, name, os.path.getsize(path), 1.0), settings=settings)
        with open(path, "rb") as handle:
            have, _, window = decode_dicom(handle, settings)
        assert have.shape == record.spec.shape == (10, 64, 64, 1) and str(have.dtype) == record.spec.dtype
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(path)
            want = ds.pixel_array
        if values == "window":
            lo, hi = float(want.min()), float(want.max())
            assert window["source"] == "auto"
            want = linear_window(want, (lo + hi + 1) / 2, max(hi - lo + 1, 2.0), 8)
        np.testing.assert_array_equal(have[..., 0], want)
        first = have if first is None else first
        np.testing.assert_array_equal(have, first)


# ---------------------------------------------------------------- other pydicom test files


def test_jpeg2000_with_a_corrupt_size_marker_fails_with_that_reason():
    """JPEG2000-embedded-sequence-delimiter.dcm is JPEG2000.dcm with 4 bytes of the codestream's SIZ
    marker overwritten by a Sequence Delimiter (pydicom's README says so): its image would be
    3722445056 columns wide. GDCM's gdcmconv --raw fails on it too ("Invalid number of tiles"); the
    DICOM structure around it parses, and the intact JPEG2000.dcm still decodes."""
    from tests.support import pydicom_test_files
    settings = DecodeSettings(id_salt=TEST_SALT)
    broken = os.path.join(pydicom_test_files(), "JPEG2000-embedded-sequence-delimiter.dcm")
    with open(broken, "rb") as handle, pytest.raises(ConversionError) as caught:
        decode_dicom(handle, settings)
    assert caught.value.reason == reasons.DECODE_ERROR
    assert "SIZ) describes a 3722445056 x 1024 image" in str(caught.value)
    with open(os.path.join(pydicom_test_files(), "JPEG2000.dcm"), "rb") as handle:
        assert decode_dicom(handle, settings)[0].shape == (1, 1024, 256, 1)


def test_frame_voi_lut_sequence_is_applied_per_frame(tmp_path):
    """A VOI LUT Sequence in each frame's Frame VOI LUT: each frame as its single-frame original
    with the same VOI LUT at its top level (the classic path) decodes."""
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence as Seq
    originals = eo.slices("voilut", 2)
    luts = []
    for n in range(2):
        lut = Dataset()
        lut.LUTDescriptor = [2048, -1024 if n else -1000, 8]
        lut.add_new("LUTData", "US", [(v // 8 + 40 * n) % 256 for v in range(2048)])
        luts.append(lut)
    made = eo.legacy_enhanced(originals, "voilut")
    shared = made.SharedFunctionalGroupsSequence[0]
    if "FrameVOILUTSequence" in shared:
        del shared.FrameVOILUTSequence
    by_sop = {ds.SOPInstanceUID: n for n, ds in enumerate(originals)}
    for item, sop in zip(made.PerFrameFunctionalGroupsSequence, eo.source_of_frames(made)):
        voi = Dataset()
        voi.VOILUTSequence = Seq([luts[by_sop[sop]]])
        item.FrameVOILUTSequence = Seq([voi])
    path = eo.save(made, tmp_path / "voilut.dcm")
    settings = DecodeSettings(id_salt=TEST_SALT, dicom_values="window")
    record = probe_file(SourceFile(path, "voilut.dcm", os.path.getsize(path), 1.0), settings=settings)
    with open(path, "rb") as handle:
        have, _, _ = decode_dicom(handle, settings, frames=record.stacks[0].frames)
    for n, ds in enumerate(originals):
        ds.VOILUTSequence = Seq([luts[n]])
        buffer = io.BytesIO()
        ds.save_as(buffer)
        buffer.seek(0)
        want, _, window = decode_dicom(buffer, settings)
        assert window["source"] == "lut"
        np.testing.assert_array_equal(have[n], want[0])
    assert not np.array_equal(have[0], have[1])


def _frames_dataset(frames: list[dict], pointers=()):
    """A header with one Per-frame Functional Groups item per ``frames`` entry: keys ``z`` (position
    along an axial normal), ``stack``, ``in_stack``, ``echo``, ``dim`` (Dimension Index Values)."""
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence as Seq

    def item(**values):
        out = Dataset()
        for keyword, value in values.items():
            setattr(out, keyword, value)
        return out
    ds = Dataset()
    ds.NumberOfFrames = len(frames)
    ds.SharedFunctionalGroupsSequence = Seq([item(PlaneOrientationSequence=Seq([item(
        ImageOrientationPatient=[1, 0, 0, 0, 1, 0])]))])
    items = []
    for frame in frames:
        group = item(PlanePositionSequence=Seq([item(ImagePositionPatient=[0, 0, frame["z"]])]))
        content = Dataset()
        if "stack" in frame:
            content.StackID, content.InStackPositionNumber = frame["stack"], frame["in_stack"]
        if "dim" in frame:
            content.DimensionIndexValues = frame["dim"]
        group.FrameContentSequence = Seq([content])
        if "echo" in frame:
            group.MREchoSequence = Seq([item(EffectiveEchoTime=frame["echo"])])
        items.append(group)
    ds.PerFrameFunctionalGroupsSequence = Seq(items)
    if pointers:
        ds.DimensionIndexSequence = Seq([item(DimensionIndexPointer=p) for p in pointers])
    return ds


def test_stack_id_echo_and_dimension_indices_separate_stacks():
    # Stack ID: two stacks interleaved, each ordered along the normal, not by storage
    ds = _frames_dataset([{"z": z, "stack": s, "in_stack": 1} for z, s in
                          ((5, "2"), (0, "1"), (5, "1"), (0, "2"), (10, "1"))])
    stacks = functional_groups.plan_stacks(ds)
    assert [(s.label, s.frames, s.spacing) for s in stacks] == [("stack=1", (1, 2, 4), 5.0), ("stack=2", (3, 0), 5.0)]
    # echoes at the same positions
    ds = _frames_dataset([{"z": z, "echo": e} for z, e in ((0, 9.5), (0, 20), (3, 9.5), (3, 20))])
    assert [(s.label, s.frames) for s in functional_groups.plan_stacks(ds)] == [("echo=9.5", (0, 2)),
                                                                                  ("echo=20", (1, 3))]
    # a b-value dimension (Diffusion b-value pointer) beside the position dimension
    ds = _frames_dataset([{"z": z, "dim": [p, b]} for z, p, b in ((2, 2, 1), (2, 2, 2), (0, 1, 2), (0, 1, 1))],
                         pointers=(0x00200032, 0x00189087))
    assert [(s.label, s.frames) for s in functional_groups.plan_stacks(ds)] == [("dimension=1", (3, 0)),
                                                                                  ("dimension=2", (2, 1))]
    # the same positions twice with nothing to tell them apart: not ordered
    ds = _frames_dataset([{"z": 0}, {"z": 0}])
    with pytest.raises(ConversionError) as caught:
        functional_groups.plan_stacks(ds)
    assert caught.value.reason == reasons.FRAMES_UNORDERED
    # stacks come in the order of their values: echo 9 before 9.5 before 20
    ds = _frames_dataset([{"z": 0, "echo": e} for e in (20, 9.5, 9)])
    assert [s.label for s in functional_groups.plan_stacks(ds)] == ["echo=9", "echo=9.5", "echo=20"]


def test_colour_frames_are_reordered_and_keep_their_values(tmp_path):
    """Functional groups on an RGB file: no rescale or window applies to colour, the order does."""
    from tests.support import pydicom_test_files
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence as Seq
    ds = pydicom.dcmread(os.path.join(pydicom_test_files(), "SC_rgb_rle_2frame.dcm"))
    orientation, shared = Dataset(), Dataset()
    orientation.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    shared.PlaneOrientationSequence = Seq([orientation])
    ds.SharedFunctionalGroupsSequence = Seq([shared])
    items = []
    for z in (5.0, 0.0):             # stored frame 0 lies above frame 1
        position, item = Dataset(), Dataset()
        position.ImagePositionPatient = [0, 0, z]
        item.PlanePositionSequence = Seq([position])
        items.append(item)
    ds.PerFrameFunctionalGroupsSequence = Seq(items)
    path = tmp_path / "rgb.dcm"
    ds.save_as(path)
    for values in ("modality", "window", "stored"):
        settings = DecodeSettings(id_salt=TEST_SALT, dicom_values=values)
        record = probe_file(SourceFile(str(path), "rgb.dcm", os.path.getsize(path), 1.0), settings=settings)
        assert record.stacks[0].frames == (1, 0) and record.spec.dtype == "uint8"
        with open(path, "rb") as handle:
            have, _, _ = decode_dicom(handle, settings, frames=record.stacks[0].frames)
        np.testing.assert_array_equal(have, ds.pixel_array[::-1])
