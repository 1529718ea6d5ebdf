"""transforms.masks.seg: DICOM SEG masks read back on the grid of the CT series they segment.

Every SEG here is written by highdicom (independent of the module's reading) from a real
single-frame CT series (tests/support/series_builders.regular: pydicom's CT_small cropped to
96 x 80, anisotropic pixels, file names shuffled) and known random masks. The image grid is
the pipeline's own: the files probed (transforms.records.probe) and ordered by
transforms.series.volumes.plan_volumes; the masks read back must equal the known arrays
exactly, slice for slice in that order, placed by source SOP Instance UID and by position.
"""
from __future__ import annotations

import dataclasses
import io
import os

import highdicom as hd
import numpy as np
import pydicom
import pytest
from highdicom.sr import CodedConcept
from pydicom.uid import generate_uid

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import seg as mseg
from dcm2tfrecord.transforms.masks.grid import Grid
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.series.volumes import plan_volumes
from dcm2tfrecord.transforms.record_model import SourceFile
from tests.support import series_builders as sb

N_SLICES, SPACING = 8, 2.5
TISSUE = CodedConcept("85756007", "SCT", "Tissue")
ORGAN = CodedConcept("123037004", "SCT", "Anatomical Structure")
LIVER = CodedConcept("10200004", "SCT", "Liver")
KIDNEY = CodedConcept("64033007", "SCT", "Kidney")
TUMOR = CodedConcept("108369006", "SCT", "Neoplasm")
# (label, category, type, algorithm type): the raw labels as an annotator might type them
SEGMENTS = [("liver (Dr. Smith)", ORGAN, LIVER, "MANUAL"),
            ("kidney_L", ORGAN, KIDNEY, "SEMIAUTOMATIC"),
            ("lesion 1", TISSUE, TUMOR, "AUTOMATIC")]
ALGORITHM = hd.AlgorithmIdentificationSequence(
    name="unet-seg", family=CodedConcept("113859", "DCM", "Machine Learning"), version="1.0")


@dataclasses.dataclass
class Series:
    written: sb.WrittenSeries
    datasets: dict[str, pydicom.Dataset]       # by SOP Instance UID
    grid: Grid                            # the pipeline's record order


def _series(folder: str, **kwargs) -> Series:
    written = sb.regular(folder, N_SLICES, SPACING, **kwargs)
    datasets = {}
    probed = []
    for path in written.paths:
        ds = pydicom.dcmread(path)
        datasets[str(ds.SOPInstanceUID)] = ds
        stat = os.stat(path)
        probed.append(probe_file(SourceFile(path, os.path.basename(path), stat.st_size, stat.st_mtime)))
    [volume] = plan_volumes(probed)
    grid = Grid.of_slices(volume.members, written.pixel_spacing,
                               str(next(iter(datasets.values())).FrameOfReferenceUID))
    return Series(written, datasets, grid)


@pytest.fixture(scope="module")
def ct(tmp_path_factory) -> Series:
    series = _series(str(tmp_path_factory.mktemp("ct")))
    # the grid is in anatomical order (ascending along the axial normal), not the files' name order
    z = [series.datasets[uid].ImagePositionPatient[2] for uid in series.grid.instance_uids]
    assert z == sorted(z) and len(set(z)) == N_SLICES
    assert [os.path.basename(p) for p in series.written.paths] != sorted(os.path.basename(p)
                                                                        for p in series.written.paths)
    return series


def _uid(*parts) -> str:
    return str(generate_uid(entropy_srcs=["test_seg", *map(str, parts)]))


def _descriptions(count: int) -> list[hd.seg.SegmentDescription]:
    out = []
    for number, (label, category, kind, algorithm) in enumerate(SEGMENTS[:count], start=1):
        out.append(hd.seg.SegmentDescription(
            segment_number=number, segment_label=label, segmented_property_category=category,
            segmented_property_type=kind, algorithm_type=algorithm,
            algorithm_identification=None if algorithm == "MANUAL" else ALGORITHM))
    return out


def _write(ct: Series, order: list[str], pixels: np.ndarray, kind: str, name: str, **kwargs) -> pydicom.Dataset:
    """A SEG of ``ct``'s slices ``order`` (pixels[n] segments slice order[n]), saved and read back."""
    count = pixels.shape[-1] if pixels.ndim == 4 else int(pixels.max())
    seg = hd.seg.Segmentation(
        source_images=[ct.datasets[uid] for uid in order], pixel_array=pixels, segmentation_type=kind,
        segment_descriptions=_descriptions(count), series_instance_uid=_uid(name, "series"), series_number=90,
        sop_instance_uid=_uid(name, "sop"), instance_number=1, manufacturer="test", manufacturer_model_name="test",
        software_versions="0", device_serial_number="0", **kwargs)
    buffer = io.BytesIO()
    seg.save_as(buffer)
    return pydicom.dcmread(io.BytesIO(buffer.getvalue()))


def _truth(ct: Series, segments: int, seed: int, empty: dict[int, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Random masks by SOP Instance UID: [rows, columns, segments] bool; ``empty`` maps a grid
    slice k to the segments (0-based) left empty there ([] for none)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, uid in enumerate(ct.grid.instance_uids):
        mask = rng.random((ct.grid.rows, ct.grid.columns, segments)) < 0.3
        for s in (empty or {}).get(k, []):
            mask[..., s] = False
        out[uid] = mask
    return out


def _on_grid(truth: dict[str, np.ndarray], grid: Grid) -> np.ndarray:
    return np.moveaxis(np.stack([truth[uid] for uid in grid.instance_uids]), 3, 0)


def _positions_only(grid: Grid) -> Grid:
    return dataclasses.replace(grid, instance_uids=())


def _uids_only(grid: Grid) -> Grid:
    return dataclasses.replace(grid, positions=(), orientation=(), pixel_spacing=())


def _reason(call) -> str:
    with pytest.raises(ConversionError) as caught:
        call()
    assert not any(label in str(caught.value) for label, *_ in SEGMENTS)    # raw names stay out of messages
    return caught.value.reason


# ---------------------------------------------------------------- binary


def test_binary_three_segments_in_grid_order_by_uid_and_by_position(ct):
    truth = _truth(ct, 3, seed=1)
    order = list(ct.grid.instance_uids)
    ds = _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "binary")
    expected = _on_grid(truth, ct.grid)
    for grid in (ct.grid, _uids_only(ct.grid), _positions_only(ct.grid)):
        masks = mseg.masks_on_grid(ds, grid)
        assert masks.dtype == bool and masks.shape == (3, N_SLICES, 96, 80)
        np.testing.assert_array_equal(masks, expected)
    np.testing.assert_array_equal(mseg.masks_on_grid(ds, ct.grid, segment_numbers=[3, 1]), expected[[2, 0]])


def test_sparse_segments_omitted_frames_are_zeros(ct):
    # slices 0, 3 and 7 hold nothing; segment 3 only on slice 5; segment 2 absent from slice 1
    empty = {0: [0, 1, 2], 3: [0, 1, 2], 7: [0, 1, 2], 1: [1, 2], 2: [2], 4: [2], 6: [2]}
    truth = _truth(ct, 3, seed=2, empty=empty)
    order = list(ct.grid.instance_uids)
    ds = _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "sparse")
    assert int(ds.NumberOfFrames) == 5 + 4 + 1       # highdicom left the empty frames out
    expected = _on_grid(truth, ct.grid)
    for grid in (ct.grid, _positions_only(ct.grid)):
        np.testing.assert_array_equal(mseg.masks_on_grid(ds, grid), expected)


def test_shuffled_source_order_lands_on_our_slices(ct):
    truth = _truth(ct, 2, seed=3, empty={2: [0, 1], 5: [1]})
    order = list(ct.grid.instance_uids)
    np.random.default_rng(4).shuffle(order)
    assert order != list(ct.grid.instance_uids)
    ds = _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "shuffled")
    expected = _on_grid(truth, ct.grid)
    for grid in (ct.grid, _uids_only(ct.grid), _positions_only(ct.grid)):
        np.testing.assert_array_equal(mseg.masks_on_grid(ds, grid), expected)
    # read from a path and from a file object as from a Dataset
    buffer = io.BytesIO()
    ds.save_as(buffer)
    np.testing.assert_array_equal(mseg.masks_on_grid(io.BytesIO(buffer.getvalue()), ct.grid), expected)


def test_a_slice_without_frames_may_be_missing_from_the_grid(ct):
    truth = _truth(ct, 2, seed=5, empty={4: [0, 1]})
    order = list(ct.grid.instance_uids)
    ds = _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "gap")
    keep = [k for k in range(N_SLICES) if k != 4]
    grid = dataclasses.replace(ct.grid, instance_uids=tuple(ct.grid.instance_uids[k] for k in keep),
                               positions=tuple(ct.grid.positions[k] for k in keep))
    np.testing.assert_array_equal(mseg.masks_on_grid(ds, grid), _on_grid(truth, grid))


def test_oblique_series_with_shuffled_sources(tmp_path):
    oblique = _series(str(tmp_path / "oblique"), orientation=sb.OBLIQUE, origin=(10.0, -20.0, 30.0), seed=1)
    assert oblique.grid.orientation == pytest.approx(sb.OBLIQUE)
    truth = _truth(oblique, 2, seed=11, empty={1: [0, 1], 6: [0]})
    order = list(oblique.grid.instance_uids)
    np.random.default_rng(12).shuffle(order)
    ds = _write(oblique, order, np.stack([truth[u] for u in order]), "BINARY", "oblique")
    for grid in (oblique.grid, _positions_only(oblique.grid)):
        np.testing.assert_array_equal(mseg.masks_on_grid(ds, grid), _on_grid(truth, oblique.grid))


# ---------------------------------------------------------------- fractional and label map


def test_fractional_is_the_stored_fraction_or_a_threshold(ct):
    rng = np.random.default_rng(6)
    order = list(ct.grid.instance_uids)[::-1]
    stored = rng.integers(0, 256, (N_SLICES, 96, 80, 2)).astype(np.uint8)
    stored[rng.random(stored.shape) < 0.5] = 0
    stored[3] = 0                                                          # an omitted slice
    fractions = stored.astype(np.float32) / np.float32(255)
    ds = _write(ct, order, fractions, "FRACTIONAL", "fractional", max_fractional_value=255)
    assert ds.SegmentationType == "FRACTIONAL" and int(ds.NumberOfFrames) == 2 * (N_SLICES - 1)
    by_uid = dict(zip(order, fractions))
    expected = np.moveaxis(np.stack([by_uid[u] for u in ct.grid.instance_uids]), 3, 0)
    for grid in (ct.grid, _positions_only(ct.grid)):
        got = mseg.masks_on_grid(ds, grid)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
        half = mseg.masks_on_grid(ds, grid, fractional_threshold=0.5)
        assert half.dtype == bool
        np.testing.assert_array_equal(half, expected >= 0.5)


def test_label_map_segmentation(ct):
    rng = np.random.default_rng(7)
    order = list(ct.grid.instance_uids)
    labels = rng.integers(0, 4, (N_SLICES, 96, 80)).astype(np.uint8)      # 0 background, segments 1-3
    labels[[1, 6]] = 0
    ds = _write(ct, order, labels, "LABELMAP", "labelmap")
    assert ds.SOPClassUID == mseg.LABEL_MAP_SEG_STORAGE and int(ds.NumberOfFrames) == N_SLICES - 2
    assert mseg.segmentation_type(ds) == mseg.LABELMAP
    assert [s.number for s in mseg.segment_info(ds)] == [0, 1, 2, 3]        # highdicom's background segment 0
    expected = np.stack([labels == n for n in (1, 2, 3)])
    for grid in (ct.grid, _positions_only(ct.grid)):
        np.testing.assert_array_equal(mseg.masks_on_grid(ds, grid), expected)


# ---------------------------------------------------------------- metadata


def test_segment_info_and_references_from_the_header_alone(ct):
    truth = _truth(ct, 3, seed=8, empty={0: [0, 1, 2]})
    order = list(ct.grid.instance_uids)
    ds = _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "meta")
    buffer = io.BytesIO()
    ds.save_as(buffer)
    data = buffer.getvalue()
    header = data[:data.rindex(b"\xe0\x7f\x10\x00")]            # the file cut before its Pixel Data
    for source in (lambda: ds, lambda: io.BytesIO(header)):
        segments = mseg.segment_info(source())
        assert [s.number for s in segments] == [1, 2, 3]
        assert [s.label for s in segments] == [label for label, *_ in SEGMENTS]
        assert [s.category for s in segments] == [mseg.Code(c.value, c.scheme_designator, c.meaning)
                                                  for _, c, _, _ in SEGMENTS]
        assert [s.type for s in segments] == [mseg.Code(t.value, t.scheme_designator, t.meaning)
                                              for _, _, t, _ in SEGMENTS]
        assert [s.algorithm_type for s in segments] == ["MANUAL", "SEMIAUTOMATIC", "AUTOMATIC"]
        assert [s.algorithm_name for s in segments] == ["", "unet-seg", "unet-seg"]
        refs = mseg.referenced(source())
        assert refs.series_uids == (ct.written.series_uid,)
        assert set(refs.instance_uids) == set(ct.grid.instance_uids) and len(refs.instance_uids) == N_SLICES
        assert refs.frame_of_reference_uid == ct.grid.frame_of_reference_uid != ""
        assert refs.study_uid == next(iter(ct.datasets.values())).StudyInstanceUID
    assert mseg.segmentation_type(io.BytesIO(header)) == mseg.BINARY
    assert _reason(lambda: mseg.masks_on_grid(io.BytesIO(header), ct.grid)) == reasons.MASK_INVALID   # no pixels


# ---------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def binary(ct) -> pydicom.Dataset:
    truth = _truth(ct, 2, seed=9)
    order = list(ct.grid.instance_uids)
    return _write(ct, order, np.stack([truth[u] for u in order]), "BINARY", "refusals")


def test_a_seg_of_a_cropped_copy_is_a_grid_mismatch(ct, tmp_path):
    # the same series written 64 rows high: the same SOP Instance UIDs and positions
    cropped = _series(str(tmp_path / "cropped"), shape=(64, 80))
    assert cropped.grid.instance_uids == ct.grid.instance_uids
    rng = np.random.default_rng(10)
    order = list(cropped.grid.instance_uids)
    ds = _write(cropped, order, rng.random((N_SLICES, 64, 80, 1)) < 0.3, "BINARY", "cropped")
    assert mseg.masks_on_grid(ds, cropped.grid).shape == (1, N_SLICES, 64, 80)
    for grid in (ct.grid, _uids_only(ct.grid), _positions_only(ct.grid)):
        assert _reason(lambda: mseg.masks_on_grid(ds, grid)) == reasons.MASK_GRID_MISMATCH


def test_other_spacing_orientation_positions_or_frame_of_reference_are_refused(ct, binary):
    others = [dataclasses.replace(ct.grid, pixel_spacing=(0.7, 0.95)),
              dataclasses.replace(ct.grid, orientation=sb.rotated(sb.AXIAL, (0.0, 0.0, 5.0))),
              # UIDs say where; the positions say elsewhere: a SEG of another geometry
              dataclasses.replace(ct.grid, positions=tuple((x, y, z + 0.5) for x, y, z in ct.grid.positions))]
    for grid in others:
        assert _reason(lambda: mseg.masks_on_grid(binary, grid)) == reasons.MASK_GRID_MISMATCH
    other_frame = dataclasses.replace(_positions_only(ct.grid), frame_of_reference_uid="1.2.3.4")
    assert _reason(lambda: mseg.masks_on_grid(binary, other_frame)) == reasons.FRAME_OF_REFERENCE_MISMATCH
    near = tuple((x, y, z + 0.0004) for x, y, z in ct.grid.positions)          # within 1e-3 mm
    assert mseg.masks_on_grid(binary, dataclasses.replace(_positions_only(ct.grid), positions=near)).any()


def test_a_frame_on_a_slice_the_image_lacks_is_unreferenced(ct, binary):
    keep = [k for k in range(N_SLICES) if k != 2]
    fewer = dataclasses.replace(ct.grid, instance_uids=tuple(ct.grid.instance_uids[k] for k in keep),
                                positions=tuple(ct.grid.positions[k] for k in keep))
    for grid in (fewer, _uids_only(fewer), _positions_only(fewer)):
        assert _reason(lambda: mseg.masks_on_grid(binary, grid)) == reasons.MASK_UNREFERENCED
    shifted = tuple((x, y, z + 0.5) for x, y, z in ct.grid.positions)
    assert _reason(lambda: mseg.masks_on_grid(binary, dataclasses.replace(_positions_only(ct.grid),
                                                                          positions=shifted))) \
        == reasons.MASK_UNREFERENCED


def test_not_a_segmentation_is_mask_invalid(ct):
    image = next(iter(ct.datasets.values()))
    for call in (lambda: mseg.segment_info(image), lambda: mseg.referenced(image),
                 lambda: mseg.masks_on_grid(image, ct.grid)):
        assert _reason(call) == reasons.MASK_INVALID


# ---------------------------------------------------------------- one slice at a time (--unit file)


def _one_slice(grid: Grid, k: int) -> Grid:
    return dataclasses.replace(grid, instance_uids=grid.instance_uids[k:k + 1], positions=grid.positions[k:k + 1])


def test_a_part_grid_gets_its_slice_and_leaves_the_others_out(ct, binary):
    """part=True: one slice of the series (by UID, by position), as the volume has it; the same
    grid without part refuses the frames of the other slices."""
    volume = mseg.masks_on_grid(binary, ct.grid)
    loaded = mseg.load(io.BytesIO(_saved(binary)))             # parsed once, placed on every slice
    for k in range(N_SLICES):
        for grid in (_one_slice(ct.grid, k), _positions_only(_one_slice(ct.grid, k))):
            np.testing.assert_array_equal(mseg.masks_on_grid(loaded, grid, part=True)[:, 0], volume[:, k])
    assert _reason(lambda: mseg.masks_on_grid(binary, _one_slice(ct.grid, 3))) == reasons.MASK_UNREFERENCED


def test_check_placement_is_the_volume_rule_on_the_whole_series(ct, binary):
    mseg.check_placement(binary, ct.grid)
    mseg.check_placement(binary, _uids_only(ct.grid))
    mseg.check_placement(binary, _positions_only(ct.grid))
    keep = [k for k in range(N_SLICES) if k != 2]
    fewer = dataclasses.replace(ct.grid, instance_uids=tuple(ct.grid.instance_uids[k] for k in keep),
                                positions=tuple(ct.grid.positions[k] for k in keep))
    for grid in (fewer, _uids_only(fewer), _positions_only(fewer)):
        assert _reason(lambda: mseg.check_placement(binary, grid)) == reasons.MASK_UNREFERENCED
    header = pydicom.dcmread(io.BytesIO(_saved(binary)), stop_before_pixels=True)
    assert _reason(lambda: mseg.check_placement(header, _uids_only(fewer))) == reasons.MASK_UNREFERENCED


def _saved(ds: pydicom.Dataset) -> bytes:
    buffer = io.BytesIO()
    ds.save_as(buffer)
    return buffer.getvalue()


# ---------------------------------------------------------------- hostile sizes and values


def _refused_before_highdicom(monkeypatch, call) -> ConversionError:
    """What ``call`` refuses with, asserting highdicom was never asked to read the SEG."""
    asked = []
    real = hd.seg.Segmentation.from_dataset
    monkeypatch.setattr(hd.seg.Segmentation, "from_dataset",
                        classmethod(lambda cls, *a, **k: asked.append(1) or real(*a, **k)))
    with pytest.raises(ConversionError) as caught:
        call()
    assert not asked, "highdicom read the SEG before its declared sizes were checked"
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("declared", [2 ** 31 - 1, 5000])
def test_declared_frames_the_file_cannot_hold_are_refused_before_highdicom(binary, monkeypatch, declared):
    """A SEG declaring 2^31 - 1 frames made highdicom build a 16 GB list before any check: the
    declared size is checked first, in the parse a worker caches (load)."""
    ds = copy_of(binary)
    ds.NumberOfFrames = declared
    data = _saved(ds)
    error = _refused_before_highdicom(monkeypatch, lambda: mseg.load(io.BytesIO(data)))
    assert error.reason == reasons.MASK_INVALID and str(declared) in str(error), str(error)


def test_a_pixel_data_cut_short_is_refused_before_highdicom(ct, binary, monkeypatch):
    for ds in (copy_of(binary), copy_of(binary)):
        ds.PixelData = ds.PixelData[: len(ds.PixelData) // 2]
    for call in (lambda: mseg.load(io.BytesIO(_saved(ds))), lambda: mseg.masks_on_grid(copy_of(ds), ct.grid)):
        error = _refused_before_highdicom(monkeypatch, call)
        assert error.reason == reasons.MASK_INVALID and "Pixel Data holds" in str(error), str(error)


def test_label_map_values_beyond_its_segments_are_mask_invalid_naming_the_value(ct):
    """A label map value no segment describes failed as decode_error: IndexError (through highdicom,
    placed by UID) or was silently background (placed by position): mask_invalid naming it, both ways."""
    labels = np.random.default_rng(7).integers(0, 4, (N_SLICES, 96, 80)).astype(np.uint8)
    ds = _write(ct, list(ct.grid.instance_uids), labels, "LABELMAP", "labelmap-beyond")
    stored = bytearray(ds.PixelData)
    stored[100] = 9
    ds.PixelData = bytes(stored)
    for grid in (ct.grid, _positions_only(ct.grid)):
        with pytest.raises(ConversionError) as caught:
            mseg.masks_on_grid(copy_of(ds), grid)
        assert caught.value.reason == reasons.MASK_INVALID and "value 9" in str(caught.value), str(caught.value)


def copy_of(ds: pydicom.Dataset) -> pydicom.Dataset:
    return pydicom.dcmread(io.BytesIO(_saved(ds)))


def test_a_seg_a_worker_keeps_reads_its_segments_and_frames_once_for_all_its_slice_records(ct, binary, monkeypatch):
    """Under --unit file each slice record drew the SEG it shares with its series by reading all
    its segments and frames again (and mapping every segment label): a SEG of 10,000 segments
    cost that per record. Parsed by load (what the worker keeps), they are read once, and each
    slice still gets its own frames."""
    from dcm2tfrecord.transforms.masks import classes, sources
    loaded = mseg.load(io.BytesIO(_saved(binary)))
    reads = {"frames": 0, "segments": 0, "grids": 0}
    real_frames, real_segments, real_grid = mseg._frames, mseg._segment_info, mseg._check_grid

    def counted(name, real):
        return lambda *a: reads.__setitem__(name, reads[name] + 1) or real(*a)
    monkeypatch.setattr(mseg, "_frames", counted("frames", real_frames))
    monkeypatch.setattr(mseg, "_segment_info", counted("segments", real_segments))
    monkeypatch.setattr(mseg, "_check_grid", counted("grids", real_grid))
    class_map = classes.parse_mapping('first: ["liver.*"]\nsecond: ["kidney.*"]\n', "map.yaml")
    whole = mseg.masks_on_grid(binary, ct.grid)
    reads.update(frames=0, segments=0, grids=0)
    for k in range(N_SLICES):
        canvas = classes.Canvas((1, ct.grid.rows, ct.grid.columns), 2, classes.BINARY)
        sources.SEG.draw(loaded, sources.MaskTarget(grid=_one_slice(ct.grid, k), part=()), class_map, canvas)
        np.testing.assert_array_equal(np.moveaxis(canvas.array[0], 2, 0).astype(bool), whole[:, k])
    assert reads == {"frames": 1, "segments": 1, "grids": 1}, reads


@pytest.mark.parametrize("syntax", ["native", "jpeg2000"])
def test_highdicom_reads_only_the_segments_asked_for_and_their_frames(tmp_path, syntax, monkeypatch):
    """A SEG of many declared segments cost highdicom's check of every segment description and
    its index of every frame (10,000 segments: 24 s of CPU) whatever the class map mapped: it
    is now handed a copy holding the segments asked for and their frames. Frames of 33 x 35
    BINARY pixels do not start on a byte, so the copy's packed bits are cut, not sliced; the
    frames of an encapsulated one are its items."""
    from pydicom.uid import JPEG2000Lossless
    small = _series(str(tmp_path), shape=(33, 35))
    truth = _truth(small, 3, seed=5, empty={1: [2]})
    order = list(small.grid.instance_uids)
    kwargs = {"transfer_syntax_uid": JPEG2000Lossless} if syntax == "jpeg2000" else {}
    ds = _write(small, order, np.stack([truth[u] for u in order]), "BINARY", f"pruned_{syntax}", **kwargs)
    assert ds.file_meta.TransferSyntaxUID.is_encapsulated == (syntax == "jpeg2000")
    expected = _on_grid(truth, small.grid)
    seen: list[int] = []
    real = hd.seg.Segmentation.from_dataset

    def counted(dataset, *args, **kwargs):
        seen.append(len(dataset.SegmentSequence))
        return real(dataset, *args, **kwargs)
    monkeypatch.setattr(hd.seg.Segmentation, "from_dataset", counted)
    for numbers in ([3], [3, 1], [2], [1, 2, 3]):
        for grid in (small.grid, _positions_only(small.grid)):
            loaded = mseg.load(io.BytesIO(_saved(ds)))
            masks = mseg.masks_on_grid(loaded, grid, segment_numbers=numbers)
            np.testing.assert_array_equal(masks, expected[[n - 1 for n in numbers]])
            assert seen[-1] == len(numbers), seen
    # a segment no frame holds draws zeros without highdicom
    empty = np.zeros((small.grid.depth, 33, 35, 3), bool)
    empty[..., 0] = np.stack([truth[u][..., 0] for u in small.grid.instance_uids])
    seen.clear()
    ds = _write(small, list(small.grid.instance_uids), empty, "BINARY", "one_drawn")
    loaded = mseg.load(io.BytesIO(_saved(ds)))
    assert not mseg.masks_on_grid(loaded, small.grid, segment_numbers=[3]).any()
    assert seen == []
