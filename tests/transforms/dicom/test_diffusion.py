"""Diffusion b-values and gradients (transforms.dicom.diffusion) against dcm2niix's .bval/.bvec and
nibabel's Siemens wrapper, on nibabel's real Siemens DTI mosaics and on GE / Philips / Siemens private /
standard files built from pydicom's MR_small.dcm; and Enhanced stacks from the Dimension Index
(transforms.dicom.functional_groups.plan_stacks) against nibabel's MultiframeWrapper."""
import os
import subprocess
import warnings

import nibabel as nib
import numpy as np
import pydicom
import pytest
from nibabel.nicom import dicomwrappers
from pydicom.sequence import Sequence

from tests.support import diffusion_objects as dw
from tests.support.enhanced_objects import enhanced_mr_4d
from dcm2tfrecord.transforms.dicom import functional_groups, record_elements
from dcm2tfrecord.transforms.dicom.diffusion import standard_values, Diffusion, diffusion, frame_diffusion
from dcm2tfrecord.transforms.dicom.header import read_probe_header
from dcm2tfrecord.transforms.errors import ConversionError
from tests.support.geometry_refs import DCM2NIIX

TOL = 1e-3
VOLUMES = [(0, (0.0, 0.0, 0.0)), (1000, (0.6, 0.0, 0.8)), (1000, (0.0, 0.6, 0.8)), (1500, (0.36, 0.48, 0.8))]
SAGITTAL = (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)


def _dcm2niix(folder, tmp_path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bvals, bvecs 3 x N, the NIfTI affine's rotation, columns unit) of dcm2niix on ``folder``."""
    out = tmp_path / "nii"
    out.mkdir()
    subprocess.run([DCM2NIIX, "-z", "n", "-b", "y", "-f", "out", "-o", str(out), str(folder)],
                   check=True, capture_output=True)
    affine = nib.load(str(out / "out.nii")).affine[:3, :3]
    return (np.atleast_1d(np.loadtxt(out / "out.bval")), np.loadtxt(out / "out.bvec").reshape(3, -1),
            affine / np.linalg.norm(affine, axis=0))


def _fsl(gradient: tuple, rotation: np.ndarray) -> np.ndarray:
    """Our LPS gradient in dcm2niix's .bvec frame: FSL's, the NIfTI's voxel axes (the columns of
    its affine's rotation, RAS), the first axis negated when that rotation's determinant is
    positive (FSL's bvecs are in radiological voxel order). LPS -> RAS negates x and y."""
    if not gradient:
        return np.zeros(3)
    bvec = rotation.T @ (np.asarray(gradient) * [-1.0, -1.0, 1.0])
    if np.linalg.det(rotation) > 0:
        bvec[0] = -bvec[0]
    return bvec


def _check_against_dcm2niix(paths, per_volume: int, tmp_path, folder) -> list[Diffusion]:
    bvals, bvecs, rotation = _dcm2niix(folder, tmp_path)
    ours = [diffusion(pydicom.dcmread(p)) for p in paths[::per_volume]]
    assert len(ours) == len(bvals)
    for k, d in enumerate(ours):
        assert d is not None
        assert abs(d.bvalue - bvals[k]) < TOL, k
        np.testing.assert_allclose(_fsl(d.gradient, rotation), bvecs[:, k], atol=TOL, err_msg=str(k))
    return ours


def test_siemens_mosaics_agree_with_dcm2niix_and_nibabel(tmp_path):
    paths = dw.siemens_dwi(tmp_path / "in")
    ours = _check_against_dcm2niix(paths, 1, tmp_path, tmp_path / "in")
    assert ours[0] == Diffusion(0.0, ()) and ours[1].bvalue == 1000.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = dicomwrappers.wrapper_from_data(pydicom.dcmread(paths[1]))
        # nibabel's b_vector is in its voxel axes (rotation_matrix: columns = column cosine, row
        # cosine, normal), from the B matrix: its sign is not kept; its b-value (992) is the B
        # matrix's trace, not the CSA B_value that dcm2niix and we report
        lps = wrapper.rotation_matrix @ np.asarray(wrapper.b_vector)
    assert min(np.abs(lps - ours[1].gradient).max(), np.abs(lps + ours[1].gradient).max()) < TOL


def test_siemens_csa_read_at_probe_time(tmp_path):
    path = dw.siemens_dwi(tmp_path / "in")[1]
    with open(path, "rb") as f:
        header, _ = read_probe_header(f, file_size=os.path.getsize(path))
    assert 0x00291010 in header._values          # the CSA header converted by the probe, for Siemens MR
    assert diffusion(header) == diffusion(pydicom.dcmread(path))


# dcm2niix's geCorrectBvecs says "Reorienting for ROW phase-encoding untested"; its coronal ROW result
# disagrees (x and y of its bvec negated) with the rule it applies to the other orientations, which we follow
@pytest.mark.parametrize("orientation,phase", [(dw.AXIAL, "COL"), (dw.AXIAL, "ROW"), (dw.OBLIQUE, "COL"),
                                               (dw.OBLIQUE, "ROW"), (dw.CORONAL, "COL"), (SAGITTAL, "COL"),
                                               (SAGITTAL, "ROW")])
def test_ge_agrees_with_dcm2niix(tmp_path, orientation, phase):
    paths = dw.write(tmp_path / "in", dw.ge_dwi("ge", VOLUMES, orientation, phase))
    ours = _check_against_dcm2niix(paths, 2, tmp_path, tmp_path / "in")
    assert [d.bvalue for d in ours] == [0.0, 1000.0, 1000.0, 1500.0]     # the 1e9 bias taken off


@pytest.mark.parametrize("orientation", [dw.OBLIQUE, SAGITTAL])
def test_philips_agrees_with_dcm2niix(tmp_path, orientation):
    paths = dw.write(tmp_path / "in", dw.philips_dwi("ph", VOLUMES, orientation))
    ours = _check_against_dcm2niix(paths, 2, tmp_path, tmp_path / "in")
    np.testing.assert_allclose(ours[3].gradient, VOLUMES[3][1], atol=1e-6)   # patient frame already


@pytest.mark.parametrize("orientation", [dw.AXIAL, dw.OBLIQUE])
def test_siemens_private_elements_agree_with_dcm2niix(tmp_path, orientation):
    # no CSA header: (0019,100C) B_value and (0019,100E) DiffusionGradientDirection, in LPS
    paths = dw.write(tmp_path / "in", dw.siemens_private_dwi("sp", VOLUMES, orientation))
    ours = _check_against_dcm2niix(paths, 2, tmp_path, tmp_path / "in")
    assert [d.bvalue for d in ours] == [0.0, 1000.0, 1000.0, 1500.0] and ours[0].gradient == ()
    np.testing.assert_allclose(ours[3].gradient, VOLUMES[3][1], atol=1e-6)   # patient frame already


def _implicit(folder, datasets) -> list[str]:
    os.makedirs(str(folder), exist_ok=True)
    paths = []
    for i, ds in enumerate(datasets):
        ds.file_meta.TransferSyntaxUID = pydicom.uid.ImplicitVRLittleEndian
        paths.append(os.path.join(str(folder), f"dwi_{i:03d}.dcm"))
        ds.save_as(paths[-1], enforce_file_format=True)
    return paths


def test_siemens_private_elements_without_their_creator_agree_with_dcm2niix(tmp_path):
    # Implicit VR, Private Creator stripped: pydicom reads them as UN bytes (IS text, FD doubles);
    # dcm2niix reads them by tag alone, at the usual block
    paths = _implicit(tmp_path / "in", dw.siemens_private_dwi("sp", VOLUMES, dw.OBLIQUE, creator=False))
    assert isinstance(pydicom.dcmread(paths[2])[0x0019100E].value, bytes)
    ours = _check_against_dcm2niix(paths, 2, tmp_path, tmp_path / "in")
    np.testing.assert_allclose(ours[1].gradient, VOLUMES[1][1], atol=1e-6)


def test_siemens_private_block_found_by_its_creator():
    ds = dw.siemens_private_dwi("sp", VOLUMES[3:], slices=1, block=0x11)[0]
    ds.add_new(0x00190010, "LO", "SOMEONE ELSE")          # (0019,100C) is another creator's, not read
    ds.add_new(0x0019100C, "IS", "7")
    assert diffusion(ds) == Diffusion(1500.0, (0.36, 0.48, 0.8))
    assert record_elements.vendor_private_tags(ds, {0x00080060: "MR", 0x00080070: "SIEMENS"}) == (
        0x0019110C, 0x0019110E)
    del ds[0x00190011]                                     # no SIEMENS MR HEADER block: nothing read
    assert diffusion(ds) is None


def test_siemens_csa_comes_before_the_private_elements(tmp_path):
    path = dw.siemens_dwi(tmp_path / "in")[1]
    ds = pydicom.dcmread(path)
    csa = diffusion(ds)
    ds[0x0019100C].value = "500"
    assert diffusion(ds) == csa                          # the CSA header's B_value wins, as in dcm2niix
    del ds[0x00291010]                                   # without it, the MR header's own copies
    assert diffusion(ds).bvalue == 500.0
    np.testing.assert_allclose(diffusion(ds).gradient, csa.gradient, atol=1e-6)


def test_siemens_private_elements_read_at_probe_and_write_time(tmp_path):
    path = _implicit(tmp_path / "in", dw.siemens_private_dwi("sp", VOLUMES[3:], slices=1))[0]
    with open(path, "rb") as f:
        header, _ = read_probe_header(f, file_size=os.path.getsize(path))
    assert 0x0019100C in header._values and 0x0019100E in header._values     # converted by the probe
    assert diffusion(header) == diffusion(pydicom.dcmread(path)) == Diffusion(1500.0, (0.36, 0.48, 0.8))
    ds, values = pydicom.dcmread(path), {}
    record_elements.convert_needed_elements(ds, values=values)      # the write path converts them too
    assert list(values[0x0019100E]) == [0.36, 0.48, 0.8] and diffusion(ds) == diffusion(header)


def test_siemens_garbled_private_elements_give_none():
    def one():
        return dw.siemens_private_dwi("sp", VOLUMES[1:2], slices=1)[0]
    ds = one()
    ds[0x0019100C] = pydicom.DataElement(0x0019100C, "UN", b"10x0")   # not an integer
    assert diffusion(ds) is None
    ds = one()
    ds[0x0019100C].value = "-5"
    assert diffusion(ds) is None
    ds = one()
    ds[0x0019100E].value = [1.0, 0.0]                                 # two values of three
    assert diffusion(ds) is None
    ds = one()
    ds[0x0019100E] = pydicom.DataElement(0x0019100E, "UN", b"\x00" * 7)
    assert diffusion(ds) is None
    ds = one()
    ds[0x0019100E].value = [float("nan"), 0.0, 1.0]
    assert diffusion(ds) is None
    ds = one()
    del ds[0x0019100E]                                                # no gradient: b alone
    assert diffusion(ds) == Diffusion(1000.0, ())


def test_standard_attributes_agree_with_dcm2niix(tmp_path):
    paths = dw.write(tmp_path / "in", dw.standard_dwi("st", VOLUMES, dw.CORONAL))
    ours = _check_against_dcm2niix(paths, 2, tmp_path, tmp_path / "in")
    np.testing.assert_allclose(ours[2].gradient, VOLUMES[2][1], atol=1e-6)


def test_standard_attributes_come_first_and_nested():
    ds = dw.philips_dwi("ph", VOLUMES[1:2], slices=1)[0]
    ds.DiffusionBValue = 700.0               # the standard attribute wins over (2001,1003)
    assert diffusion(ds).bvalue == 700.0
    del ds.DiffusionBValue
    item, direction = pydicom.Dataset(), pydicom.Dataset()
    item.DiffusionBValue, item.DiffusionDirectionality = 2000.0, "DIRECTIONAL"
    direction.DiffusionGradientOrientation = [0.0, 0.0, -2.0]
    item.DiffusionGradientDirectionSequence = Sequence([direction])
    ds.MRDiffusionSequence = Sequence([item])
    assert diffusion(ds) == Diffusion(2000.0, (0.0, 0.0, -1.0))
    item.DiffusionDirectionality = "ISOTROPIC"
    assert diffusion(ds) == Diffusion(2000.0, ())


def test_no_diffusion_and_garbled_values():
    plain = pydicom.dcmread(pydicom.data.get_testdata_file("MR_small.dcm"))
    assert diffusion(plain) is None
    ct = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    assert diffusion(ct) is None
    ge = dw.ge_dwi("ge", VOLUMES[1:2], slices=1)[0]
    # not an integer (as an Implicit VR file's unknown element holds it): vendor data that does not parse
    ge[0x00431039] = pydicom.DataElement(0x00431039, "UN", b"1000001000x\\8")
    assert diffusion(ge) is None
    philips = dw.philips_dwi("ph", VOLUMES[1:2], slices=1)[0]
    philips[0x20011003] = pydicom.DataElement(0x20011003, "UN", b"\xff")   # one byte for an FL
    assert diffusion(philips) is None
    siemens = dw.standard_dwi("s", VOLUMES[1:2], slices=1)[0]
    del siemens.DiffusionBValue
    siemens.add_new(0x00290010, "LO", "SIEMENS CSA HEADER")
    siemens.add_new(0x00291010, "OB", b"SV10\4\3\2\1garbage")
    assert diffusion(siemens) is None
    bad = dw.standard_dwi("s", VOLUMES[1:2], slices=1)[0]
    bad.DiffusionGradientOrientation = [1.0, 0.0]
    # a malformed standard attribute is no diffusion encoding, and fails no file (any file's
    # probe reads it): as if absent
    assert diffusion(bad) is None
    with pytest.raises(ConversionError) as caught:
        standard_values(bad.DiffusionBValue, bad.DiffusionGradientOrientation)
    assert caught.value.reason == "invalid_value"


def test_private_tags_only_for_vendor_mr():
    ct = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    assert record_elements.vendor_private_tags(ct, {0x00080060: "CT", 0x00080070: "GE MEDICAL SYSTEMS"}) == ()
    ge = dw.ge_dwi("ge", VOLUMES[1:2], slices=1)[0]
    assert record_elements.vendor_private_tags(ge, {0x00080060: "MR", 0x00080070: "GE MEDICAL SYSTEMS"}) == (
        0x00431039, 0x001910BB, 0x001910BC, 0x001910BD)


def test_enhanced_frames_lift_diffusion():
    ds = enhanced_mr_4d(phases=2, slices=3, pointers=("InStackPositionNumber", "DiffusionBValue"))
    for n, item in enumerate(ds.PerFrameFunctionalGroupsSequence):
        mr, direction = pydicom.Dataset(), pydicom.Dataset()
        mr.DiffusionBValue, mr.DiffusionDirectionality = 1000.0 * (n // 3), "DIRECTIONAL"
        direction.DiffusionGradientOrientation = [0.0, 1.0, 0.0]
        mr.DiffusionGradientDirectionSequence = Sequence([direction])
        item.MRDiffusionSequence = Sequence([mr])
    attrs = functional_groups.frame_attributes(ds)
    assert [frame_diffusion(a) for a in attrs] == [Diffusion(0.0, ())] * 3 + [Diffusion(1000.0, (0.0, 1.0, 0.0))] * 3
    stacks = functional_groups.plan_stacks(ds)
    # the dimension index and the attributes agree: the attributes' labels (as before this key existed)
    assert [s.label for s in stacks] == ["temporal=1 b=0 dimension=1", "temporal=2 b=1000 dimension=2"]
    assert [len(s.frames) for s in stacks] == [3, 3]


def _nibabel_volumes(path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = dicomwrappers.wrapper_from_data(pydicom.dcmread(path))
        assert type(wrapper).__name__ == "MultiframeWrapper"
        return wrapper.get_data()


@pytest.mark.parametrize("pointers", [("StackID", "InStackPositionNumber", "TemporalPositionIndex"),
                                      ("StackID", "InStackPositionNumber", "TriggerDelayTime"),
                                      ("InStackPositionNumber", "TemporalPositionIndex")])
def test_enhanced_4d_stacks_come_from_the_dimension_index(tmp_path, pointers):
    # the reported file: 2 phases x 56 slices, Temporal Position Index 1..21 disagreeing with the
    # Dimension Index Values' 1..2 (it became 21 records); stored slice-major, backwards
    order = [(t, s) for s in range(56) for t in range(2)][::-1]
    ds = enhanced_mr_4d(2, 56, temporal_indices=lambda t, s: (t * 56 + s) % 21 + 1, pointers=pointers,
                        order=order)
    path = str(tmp_path / "e4d.dcm")
    ds.save_as(path, enforce_file_format=True)
    ds = pydicom.dcmread(path)
    stacks = functional_groups.plan_stacks(ds)
    assert [len(s.frames) for s in stacks] == [56, 56]
    assert [s.spacing for s in stacks] == [3.0, 3.0]
    ours = np.stack([ds.pixel_array[list(s.frames)] for s in stacks])        # (phase, slice, rows, cols)
    reference = _nibabel_volumes(path)                                         # (rows, cols, slice, phase)
    assert reference.shape == (8, 8, 56, 2)
    # nibabel's slice axis runs the other way along the normal here (its first slice the highest)
    np.testing.assert_array_equal(ours, reference.transpose(3, 2, 0, 1)[:, ::-1])
    assert ours[1, 0, 0, 0] == 1000 and ours[0, 55, 0, 0] == 55


def test_enhanced_labels_unchanged_where_the_dimension_index_agrees():
    ds = enhanced_mr_4d(2, 4)       # Temporal Position Index = the Dimension Index Value: the old key's
    assert [s.label for s in functional_groups.plan_stacks(ds)] == ["temporal=1", "temporal=2"]
    ds = enhanced_mr_4d(2, 4, pointers=("StackID", "InStackPositionNumber", "TriggerDelayTime"))
    assert [s.label for s in functional_groups.plan_stacks(ds)] == ["temporal=1 dimension=1",
                                                                     "temporal=2 dimension=2"]
    # where they disagree the dimension index makes the stacks, and names them
    ds = enhanced_mr_4d(2, 4, temporal_indices=lambda t, s: s + 1,
                        pointers=("StackID", "InStackPositionNumber", "TriggerDelayTime"))
    assert [s.label for s in functional_groups.plan_stacks(ds)] == ["dimension=1", "dimension=2"]
