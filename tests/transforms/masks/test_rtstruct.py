"""RTSTRUCT contours rasterised onto their CT series' grid (transforms/masks/rtstruct.py).

Two independent references:

- rt-utils writes the structure sets from known masks (discs, a ring with a hole, a ring with an
  island in its hole, two disjoint blobs on a slice) on real CT series (tests/support/series_builders),
  axial and oblique, in slice order and against it; our masks must match the known ones (Dice >= 0.99)
  and rt-utils' own reading of the same file up to a one-pixel band at the boundaries. rt-utils 1.2.7
  puts Pixel Spacing's row spacing along the rows (qurit/rt-utils#92) and reads a non-square image's
  masks as [columns, rows]: its series are square with square pixels.
- For anisotropic, non-square and tilted-gantry grids, contours written here with pydicom (polygons
  of 180 points on circles in patient mm) against the circles' own pixel-centre membership.
"""
from __future__ import annotations

import copy

import numpy as np
import pydicom
from pydicom.dataelem import RawDataElement
import pytest
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence as DicomSequence
from rt_utils import RTStructBuilder
from scipy import ndimage

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import rtstruct
from dcm2tfrecord.transforms.masks.grid import Grid
from tests.support import series_builders as sb

# rt-utils 1.2.7 saves through pydicom attributes pydicom 3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

SIZE = 96                                   # rows = columns: rt-utils reads non-square images transposed
SPACING = (0.8, 0.8)
# ROI names as they come: one holds a patient-like name that no error message may repeat
NAMES = ("DOE^JANE disc", "ring", "ring island", "blobs")


def _disc(centre, radius):
    jj, ii = np.mgrid[:SIZE, :SIZE]
    return (jj - centre[0]) ** 2 + (ii - centre[1]) ** 2 <= radius ** 2


def _known_masks(n: int) -> np.ndarray:
    """[roi, k, j, i] in anatomical order (ascending along the slice normal); centres off the
    diagonal so that swapped rows and columns show."""
    masks = np.zeros((len(NAMES), n, SIZE, SIZE), bool)
    for k in range(1, n - 1):
        masks[0, k] = _disc((38 + 2 * k, 55 - k), 10 + 2 * k)
    for k in (2, 3):
        masks[1, k] = _disc((44, 52), 24) & ~_disc((44, 52), 10)
    masks[2, 4] = (_disc((46, 50), 26) & ~_disc((46, 50), 13)) | _disc((46, 50), 5)
    for k in (3, 4):
        masks[3, k] = _disc((22, 26), 9) | _disc((70, 64), 12 - k)
    return masks


EXPECTED_CONTOURS = {0: 1, 1: 2, 2: 3, 3: 2}       # OpenCV's contours a slice of each ROI makes


class Written:
    def __init__(self, series: sb.WrittenSeries, rt_path: str, known: np.ndarray):
        self.series, self.rt_path, self.known = series, rt_path, known
        headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in series.paths]
        self.uids = [str(h.SOPInstanceUID) for h in headers]
        self.frame = str(headers[0].FrameOfReferenceUID)
        self.ds = pydicom.dcmread(rt_path)

    def grid(self, uids: bool = True, **changes) -> Grid:
        """The series' grid in build order (the record order of transforms.series.volumes)."""
        fields = dict(positions=self.series.positions, orientation=self.series.orientation,
                      pixel_spacing=self.series.pixel_spacing, rows=SIZE, columns=SIZE,
                      instance_uids=self.uids if uids else (), frame_of_reference_uid=self.frame)
        fields.update(changes)
        return Grid(**fields)

    def ascending(self) -> np.ndarray:
        """Build index of each slice in rt-utils' order: ascending position along the normal
        (its image_helper.load_sorted_image_series sorts by normal . Image Position)."""
        return np.argsort(self.series.positions @ sb.normal(self.series.orientation))

    def rt_utils_masks(self) -> np.ndarray:
        """rt-utils' reading of the file, [roi, k, j, i] in build order (its masks are
        [rows, columns, slice] in its own slice order)."""
        rt = RTStructBuilder.create_from(dicom_series_path=self.series.folder, rt_struct_path=self.rt_path)
        out = np.zeros_like(self.known)
        for r, name in enumerate(NAMES):
            theirs = rt.get_roi_mask_by_name(name)
            out[r][self.ascending()] = np.moveaxis(theirs, 2, 0)
        return out


def _write(tmp_path_factory, name: str, **series_kwargs) -> Written:
    base = tmp_path_factory.mktemp(name)
    series = sb.regular(str(base / "ct"), shape=(SIZE, SIZE), pixel_spacing=SPACING, **series_kwargs)
    known = _known_masks(len(series.slices))             # anatomical order: rt-utils' slice order
    rt = RTStructBuilder.create_new(dicom_series_path=series.folder)
    for r, roi_name in enumerate(NAMES):
        rt.add_roi(mask=np.moveaxis(known[r], 0, 2), name=roi_name)
    path = str(base / "rtstruct.dcm")
    rt.save(path)
    known_build = np.zeros_like(known)                   # back in build order: the grid's (the record's)
    known_build[:, np.argsort(series.positions @ sb.normal(series.orientation))] = known
    return Written(series, path, known_build)


@pytest.fixture(scope="module")
def axial(tmp_path_factory) -> Written:
    return _write(tmp_path_factory, "rt_axial", n=7, spacing=2.5)


@pytest.fixture(scope="module")
def oblique(tmp_path_factory) -> Written:
    # against the normal: the record order is the reverse of rt-utils' slice order
    return _write(tmp_path_factory, "rt_oblique", n=7, spacing=-3.0, orientation=sb.OBLIQUE)


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * float((a & b).sum()) / float(a.sum() + b.sum())


def _band(mask: np.ndarray) -> np.ndarray:
    """The one-pixel boundary band of each slice of ``mask`` [k, j, i]: dilated minus eroded (3 x 3)."""
    square = np.zeros((3, 3, 3), bool)
    square[1] = True                                   # in-plane only
    return ndimage.binary_dilation(mask, square) & ~ndimage.binary_erosion(mask, square)


@pytest.mark.parametrize("which", ["axial", "oblique"])
def test_masks_match_the_known_masks_and_rt_utils_reading(which, request):
    written: Written = request.getfixturevalue(which)
    ours = rtstruct.rasterise(written.ds, written.grid())
    theirs = written.rt_utils_masks()
    assert ours.shape == written.known.shape and ours.dtype == bool
    for r in range(len(NAMES)):
        assert _dice(ours[r], written.known[r]) >= 0.99, NAMES[r]
        differ = ours[r] ^ theirs[r]
        assert not (differ & ~(_band(ours[r]) | _band(theirs[r]))).any(), NAMES[r]
        assert written.known[r].any(axis=(1, 2)).tolist() == ours[r].any(axis=(1, 2)).tolist()


def test_positions_alone_give_the_same_masks_as_the_referenced_images(oblique):
    assert np.array_equal(rtstruct.rasterise(oblique.ds, oblique.grid(uids=False)),
                          rtstruct.rasterise(oblique.ds, oblique.grid()))


def test_the_hole_stays_empty_and_the_island_in_it_filled(axial):
    ours = rtstruct.rasterise(axial.ds, axial.grid())
    k_ring, k_island = (int(np.flatnonzero(axial.known[r].any(axis=(1, 2)))[0]) for r in (1, 2))
    assert not ours[1, k_ring][_disc((44, 52), 9)].any()
    assert ours[1, k_ring][_disc((44, 52), 23) & ~_disc((44, 52), 11)].all()
    hole = _disc((46, 50), 12) & ~_disc((46, 50), 6)
    assert not ours[2, k_island][hole].any()
    assert ours[2, k_island][_disc((46, 50), 4)].all()
    blobs = ours[3]
    assert ndimage.label(blobs[int(np.flatnonzero(blobs.any(axis=(1, 2)))[0])])[1] == 2


def test_roi_numbers_choose_and_order_the_masks(axial):
    every = rtstruct.rasterise(axial.ds, axial.grid())
    chosen = rtstruct.rasterise(axial.ds, axial.grid(), roi_numbers=[4, 1])
    assert np.array_equal(chosen, every[[3, 0]])


def test_roi_info_and_references(axial):
    rois = rtstruct.roi_info(axial.ds)
    assert [r.number for r in rois] == [1, 2, 3, 4]
    assert [r.name for r in rois] == list(NAMES)
    assert {r.frame_of_reference_uid for r in rois} == {axial.frame}
    slices = axial.known.any(axis=(2, 3)).sum(axis=1)
    assert [r.contours for r in rois] == [EXPECTED_CONTOURS[i] * int(slices[i]) for i in range(len(NAMES))]
    ref = rtstruct.referenced(axial.ds)
    assert ref.series_uids == (axial.series.series_uid,)
    assert ref.frame_of_reference_uid == axial.frame
    assert set(ref.sop_instance_uids) == set(axial.uids)


def test_a_frame_of_reference_mismatch_fails_without_the_roi_name(axial):
    with pytest.raises(ConversionError) as caught:
        rtstruct.rasterise(axial.ds, axial.grid(frame_of_reference_uid="1.2.3.4"))
    assert caught.value.reason == reasons.FRAME_OF_REFERENCE_MISMATCH
    assert "ROI 1" in str(caught.value) and "DOE" not in str(caught.value)


def _moved(ds: Dataset, roi_index: int, by_mm: np.ndarray, drop_images: bool = True) -> Dataset:
    """A copy of ``ds`` with its ROI's first contour moved by ``by_mm`` (LPS)."""
    out = copy.deepcopy(ds)
    contour = out.ROIContourSequence[roi_index].ContourSequence[0]
    points = np.asarray(contour.ContourData, float).reshape(-1, 3) + by_mm
    contour.ContourData = [f"{v:.6f}" for v in points.ravel()]
    if drop_images:
        del contour.ContourImageSequence
    return out


@pytest.mark.parametrize("where", ["beyond the first slice", "far away", "across slices"])
def test_a_contour_on_no_slice_fails_naming_its_roi_number(oblique, where):
    normal = sb.normal(oblique.series.orientation)
    # ROI 1's first contour lies on the second slice along the normal; slices are 3 mm apart
    if where == "across slices":                     # tilted out of the image plane, as if on a reformat
        points = np.asarray(oblique.ds.ROIContourSequence[0].ContourSequence[0].ContourData, float).reshape(-1, 3)
        along = (points - points.mean(axis=0)) @ np.asarray(oblique.series.orientation[:3])
        by = along[:, None] * 0.5 * normal
    else:
        by = normal * 3.0 * (-1.6 if where == "beyond the first slice" else 30.0)
    with pytest.raises(ConversionError) as caught:
        rtstruct.rasterise(_moved(oblique.ds, 0, by), oblique.grid(uids=False))
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID
    assert "ROI 1" in str(caught.value) and "DOE" not in str(caught.value)
    assert ("span" in str(caught.value)) == (where == "across slices")
    # a little less than half a slice off, either way, is still on a slice
    for slices in (0.45, -1.45):
        assert rtstruct.rasterise(_moved(oblique.ds, 0, normal * 3.0 * slices), oblique.grid(uids=False))[0].any()


def test_a_contour_away_from_the_image_it_references_fails(axial):
    # one slice along: by position it lies on the next slice, but it names its own image
    moved = _moved(axial.ds, 0, np.array([0.0, 0.0, 2.5]), drop_images=False)
    assert rtstruct.rasterise(moved, axial.grid(uids=False))[0].any()
    with pytest.raises(ConversionError) as caught:
        rtstruct.rasterise(moved, axial.grid())
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID and "references" in str(caught.value)


def test_a_contour_outside_the_image_fails(axial):
    moved = _moved(axial.ds, 0, np.array([500.0, 0.0, 0.0]))
    with pytest.raises(ConversionError) as caught:
        rtstruct.rasterise(moved, axial.grid())
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID


def test_point_and_open_contours_draw_nothing(axial):
    edited = copy.deepcopy(axial.ds)
    first = edited.ROIContourSequence[0].ContourSequence[0]
    z = float(first.ContourData[2])
    corners = np.array([[-130.0, -100.0, z], [-40.0, -20.0, z], [-130.0, -20.0, z]])   # across the image
    for kind, points in (("OPEN_PLANAR", corners), ("OPEN_NONPLANAR", corners), ("POINT", corners[:1])):
        item = Dataset()
        item.ContourGeometricType = kind
        item.NumberOfContourPoints = len(points)
        item.ContourData = [f"{v:.3f}" for v in points.ravel()]
        edited.ROIContourSequence[0].ContourSequence.append(item)
    assert np.array_equal(rtstruct.rasterise(edited, axial.grid()), rtstruct.rasterise(axial.ds, axial.grid()))
    assert rtstruct.roi_info(edited)[0].contours == rtstruct.roi_info(axial.ds)[0].contours + 3


# ---- contours written here, on grids rt-utils cannot read: anisotropic, non-square, tilted ----

def _circle(centre: np.ndarray, radius: float, row: np.ndarray, col: np.ndarray, points: int = 180) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, points, endpoint=False)
    return centre + radius * (np.cos(t)[:, None] * row + np.sin(t)[:, None] * col)


def _structure_set(frame: str, contours: list[tuple[int, str, np.ndarray]], rois: int) -> Dataset:
    ds = Dataset()
    ds.SOPClassUID = rtstruct.RT_STRUCTURE_SET_STORAGE
    ds.Modality = "RTSTRUCT"
    ref = Dataset()
    ref.FrameOfReferenceUID = frame
    ds.ReferencedFrameOfReferenceSequence = DicomSequence([ref])
    ds.StructureSetROISequence = DicomSequence()
    ds.ROIContourSequence = DicomSequence()
    for number in range(1, rois + 1):
        item = Dataset()
        item.ROINumber, item.ROIName, item.ReferencedFrameOfReferenceUID = number, f"roi {number}", frame
        ds.StructureSetROISequence.append(item)
        roi = Dataset()
        roi.ReferencedROINumber = number
        roi.ContourSequence = DicomSequence()
        ds.ROIContourSequence.append(roi)
    for number, kind, points in contours:
        item = Dataset()
        item.ContourGeometricType = kind
        item.NumberOfContourPoints = len(points)
        item.ContourData = [f"{v:.4f}" for v in points.ravel()]
        ds.ROIContourSequence[number - 1].ContourSequence.append(item)
    return ds


def _pixel_centres(series: sb.WrittenSeries, k: int, shape: tuple[int, int]) -> np.ndarray:
    """[j, i, 3] LPS mm of slice k's pixel centres: its own position + j * row spacing * column
    cosines + i * column spacing * row cosines (PS3.3 C.7.6.2.1.1)."""
    row, col = np.asarray(series.orientation[:3]), np.asarray(series.orientation[3:])
    jj, ii = np.mgrid[:shape[0], :shape[1]]
    dr, dc = series.pixel_spacing
    return series.positions[k] + (jj * dr)[..., None] * col + (ii * dc)[..., None] * row


@pytest.mark.parametrize("build", ["anisotropic_oblique", "tilted_gantry"])
def test_circles_in_patient_space_on_anisotropic_grids(build, tmp_path):
    shape = (96, 80)
    if build == "tilted_gantry":
        series = sb.tilted_gantry(str(tmp_path / "ct"), n=5, shape=shape)
    else:
        series = sb.regular(str(tmp_path / "ct"), 5, -2.0, orientation=sb.OBLIQUE, shape=shape)
    frame = str(pydicom.dcmread(series.paths[0], stop_before_pixels=True).FrameOfReferenceUID)
    row, col = np.asarray(series.orientation[:3]), np.asarray(series.orientation[3:])
    ps = series.pixel_spacing
    expected = np.zeros((2, len(series.slices)) + shape, bool)
    contours = []
    for k in (1, 2, 3):
        # centre 40 rows down, 30 columns along slice k: millimetres differ per axis (0.7 vs 0.9)
        centre = series.positions[k] + 40 * ps[0] * col + 30 * ps[1] * row
        contours.append((1, "CLOSED_PLANAR", _circle(centre, 14.0, row, col)))
        contours += [(2, "CLOSEDPLANAR_XOR", _circle(centre, 20.0, row, col)),
                     (2, "CLOSEDPLANAR_XOR", _circle(centre, 9.0, row, col))]
        distance = np.linalg.norm(_pixel_centres(series, k, shape) - centre, axis=-1)
        expected[0, k] = distance <= 14.0
        expected[1, k] = (distance <= 20.0) & (distance > 9.0)
    grid = Grid(*shape, positions=series.positions, orientation=series.orientation,
                pixel_spacing=series.pixel_spacing, frame_of_reference_uid=frame)
    ours = rtstruct.rasterise(_structure_set(frame, contours, 2), grid)
    for r in range(2):
        assert _dice(ours[r], expected[r]) >= 0.99
        assert not ((ours[r] ^ expected[r]) & ~_band(expected[r])).any()
    # the swapped spacings (rt-utils' reading) would be an ellipse: rows 0.9 mm, columns 0.7 mm
    swapped = Grid(*shape, positions=series.positions, orientation=series.orientation, pixel_spacing=ps[::-1])
    assert _dice(rtstruct.rasterise(_structure_set(frame, contours, 2), swapped)[0], expected[0]) < 0.95


def test_a_grid_of_one_slice_takes_its_spacing(axial):
    k = 3
    alone = _only_slice(axial, k)
    one = axial.grid(positions=axial.series.positions[k:k + 1], instance_uids=[axial.uids[k]])
    assert np.array_equal(rtstruct.rasterise(alone, one)[:, 0], rtstruct.rasterise(axial.ds, axial.grid())[:, k])
    # 1 mm off its slice: within half of a given 2.5 mm spacing, not of the 1 mm default
    off = _moved(alone, 0, np.array([0.0, 0.0, 1.0]))
    assert rtstruct.rasterise(off, axial.grid(positions=one.positions, uids=False, slice_spacing=2.5))[0].any()
    with pytest.raises(ConversionError) as caught:
        rtstruct.rasterise(off, axial.grid(positions=one.positions, uids=False))
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID


def _only_slice(written: Written, k: int) -> Dataset:
    """``written.ds`` with only the contours that name slice k's image."""
    out = copy.deepcopy(written.ds)
    for roi in out.ROIContourSequence:
        roi.ContourSequence = DicomSequence([c for c in roi.ContourSequence
                                             if c.ContourImageSequence[0].ReferencedSOPInstanceUID == written.uids[k]])
    return out


def test_not_a_structure_set_fails(axial):
    image = pydicom.dcmread(axial.series.paths[0], stop_before_pixels=True)
    for call in (rtstruct.roi_info, rtstruct.referenced, lambda ds: rtstruct.rasterise(ds, axial.grid())):
        with pytest.raises(ConversionError) as caught:
            call(image)
        assert caught.value.reason == reasons.INVALID_VALUE and "not an RT Structure Set" in str(caught.value)
    without = copy.deepcopy(axial.ds)
    del without.StructureSetROISequence
    with pytest.raises(ConversionError) as caught:
        rtstruct.roi_info(without)
    assert caught.value.reason == reasons.MISSING_ATTRIBUTE


# ---------------------------------------------------------------- one slice at a time (--unit file)


@pytest.mark.parametrize("which", ["axial", "oblique"])
def test_each_slice_drawn_alone_is_that_slice_of_the_volume(which, request):
    """assign_contours places every contour once, from the slices alone (no Pixel Spacing, no rows
    or columns); each slice drawn with only its contours equals the volume's slice."""
    written = request.getfixturevalue(which)
    volume = rtstruct.rasterise(written.ds, written.grid())
    placed = rtstruct.assign_contours(written.ds, written.grid(pixel_spacing=(), rows=0, columns=0))
    every = [pair for pairs in placed.values() for pair in pairs]
    closed = sum(len(item.ContourSequence) for item in written.ds.ROIContourSequence)
    assert len(every) == len(set(every)) == closed
    for k, position in enumerate(written.series.positions):
        one = written.grid(positions=[position], instance_uids=[written.uids[k]])
        alone = rtstruct.rasterise(written.ds, one, on_slice=placed.get(k, ()))
        np.testing.assert_array_equal(alone[:, 0], volume[:, k])
    assert set(placed) == {k for k in range(len(written.uids)) if volume[:, k].any()}


def test_each_slice_reads_only_the_contours_placed_on_it(axial, monkeypatch):
    """The structure set as a worker keeps it (the mask source's parse: rtstruct.StructureSet, its
    contours indexed once) draws each slice from the contours placed on it alone: over all the
    slices every contour is read once, not once per slice (200,000 contours on 100 slices did
    not finish under --unit file). The slices drawn so equal the volume's."""
    from dcm2tfrecord.transforms.masks import sources
    with open(axial.rt_path, "rb") as handle:
        parsed = sources.RTSTRUCT.parse(handle)
    placed = rtstruct.assign_contours(parsed, axial.grid(pixel_spacing=(), rows=0, columns=0))
    volume = rtstruct.rasterise(axial.ds, axial.grid())
    reads = []
    real = rtstruct._points
    monkeypatch.setattr(rtstruct, "_points", lambda contour, roi, index: reads.append((roi, index)) or
                        real(contour, roi, index))
    for k, position in enumerate(axial.series.positions):
        one = axial.grid(positions=[position], instance_uids=[axial.uids[k]])
        np.testing.assert_array_equal(rtstruct.rasterise(parsed, one, on_slice=placed.get(k, ()))[:, 0], volume[:, k])
    closed = sum(len(item.ContourSequence) for item in axial.ds.ROIContourSequence)
    assert sorted(reads) == sorted(pair for pairs in placed.values() for pair in pairs) and len(reads) == closed


def test_assign_contours_refuses_a_contour_off_the_series(axial):
    ds = copy.deepcopy(axial.ds)
    contour = ds.ROIContourSequence[0].ContourSequence[0]
    contour.ContourData = [float(v) + (30.0 if i % 3 == 2 else 0.0) for i, v in enumerate(contour.ContourData)]
    del contour.ContourImageSequence
    with pytest.raises(ConversionError) as caught:
        rtstruct.assign_contours(ds, axial.grid(pixel_spacing=()))
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID and "ROI 1" in str(caught.value)
    assert not any(name in str(caught.value) for name in NAMES)


@pytest.mark.parametrize("far", [1e308, -1e300, 5e9])
def test_contour_coordinates_that_would_overflow_are_mask_invalid_without_a_warning(axial, far):
    """Contour Data of 1e308 printed numpy's RuntimeWarning (overflow) to the terminal: refused,
    quietly, as mask_invalid naming the ROI by number, whether placed on the series (--unit file's
    join) or drawn on the volume (--unit series)."""
    import warnings
    ds = copy.deepcopy(axial.ds)
    contour = ds.ROIContourSequence[0].ContourSequence[0]
    contour.ContourData = [far if i == 1 else float(v) for i, v in enumerate(contour.ContourData)]
    for call in (lambda: rtstruct.assign_contours(ds, axial.grid(pixel_spacing=())),
                 lambda: rtstruct.rasterise(ds, axial.grid())):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ConversionError) as caught:
                call()
        assert caught.value.reason == reasons.MASK_INVALID and "ROI 1" in str(caught.value), str(caught.value)
        assert not any(name in str(caught.value) for name in NAMES)


def test_on_slice_needs_a_grid_of_one_slice(axial):
    with pytest.raises(ValueError):
        rtstruct.rasterise(axial.ds, axial.grid(), on_slice=())


@pytest.mark.parametrize("encoding", ["as written (implicit VR)", "explicit VR little endian",
                                      "explicit VR big endian"])
def test_contour_image_references_read_from_bytes_equal_pydicoms(axial, tmp_path, encoding):
    """rtstruct reads each contour's Contour Image Sequence UIDs and Contour Data from the raw
    element bytes (pydicom's own element reader, without a Dataset per item): the same values
    pydicom's full parse gives, in every little/big, implicit/explicit encoding."""
    path = axial.rt_path
    if encoding != "as written (implicit VR)":
        ds = pydicom.dcmread(path)
        path = str(tmp_path / "re-encoded.dcm")
        big = "big" in encoding
        ds.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRBigEndian if big else pydicom.uid.ExplicitVRLittleEndian
        pydicom.dcmwrite(path, ds, implicit_vr=False, little_endian=not big,
                         force_encoding=True)
    raw, parsed = pydicom.dcmread(path), pydicom.dcmread(path)
    seen = 0
    for raw_roi, parsed_roi in zip(raw.ROIContourSequence, parsed.ROIContourSequence):
        for raw_contour, parsed_contour in zip(raw_roi.ContourSequence, parsed_roi.ContourSequence):
            expected = [str(i.ReferencedSOPInstanceUID) for i in parsed_contour.ContourImageSequence]
            assert isinstance(raw_contour.get_item(0x30060016), RawDataElement)     # the bytes path is taken
            assert rtstruct._image_uids(raw_contour) == expected and expected
            np.testing.assert_array_equal(rtstruct._contour_values(raw_contour),
                                          np.asarray([float(v) for v in parsed_contour.ContourData]))
            seen += 1
    assert seen == sum(EXPECTED_CONTOURS[r] * int(axial.known[r].any(axis=(1, 2)).sum()) for r in EXPECTED_CONTOURS)
    assert np.array_equal(rtstruct.rasterise(pydicom.dcmread(path), axial.grid()),
                          rtstruct.rasterise(axial.ds, axial.grid()))


def test_a_4d_grid_places_contours_by_the_slice_they_name(axial):
    """Two volumes sharing the series' positions (a 4-D series whose slices --series_4d split makes
    into volumes): each contour lies on the slice whose SOP Instance UID it names, all in the
    first volume here; a contour naming none, at a position two slices share, is refused; a grid
    of shared positions without UIDs is refused as before."""
    n = len(axial.uids)
    positions = np.concatenate([axial.series.positions, axial.series.positions])
    twice = axial.grid(positions=positions, instance_uids=axial.uids + [f"2.25.{k + 1}" for k in range(n)],
                       pixel_spacing=(), rows=0, columns=0)
    placed = rtstruct.assign_contours(axial.ds, twice)
    assert placed == rtstruct.assign_contours(axial.ds, axial.grid(pixel_spacing=(), rows=0, columns=0))
    assert placed and all(k < n for k in placed)
    with pytest.raises(ConversionError) as caught:
        rtstruct.assign_contours(axial.ds, axial.grid(uids=False, positions=positions, pixel_spacing=()))
    assert caught.value.reason == reasons.INVALID_VALUE
    ds = copy.deepcopy(axial.ds)
    del ds.ROIContourSequence[0].ContourSequence[0].ContourImageSequence
    with pytest.raises(ConversionError) as caught:
        rtstruct.assign_contours(ds, twice)
    assert caught.value.reason == reasons.CONTOUR_OFF_GRID and "ROI 1" in str(caught.value)
