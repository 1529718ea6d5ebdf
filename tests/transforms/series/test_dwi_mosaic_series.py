"""The reported case: nibabel's two Siemens DTI mosaics (b = 0 and b = 1000) of one series, each
a whole volume at the same position. They were stacked as a 2-"slice" volume 3 mm apart; with
--unit series they are now the 2 volumes of a 4-D series, as dcm2niix writes them."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import run_convert
from tests.support.diffusion_objects import siemens_dwi, with_random_pixels
from tests.support.geometry_refs import assert_same_geometry, dcm2niix_volumes, fsl_bvecs_to_lps


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("dwi_series") / "in"
    for n, path in enumerate(siemens_dwi(folder)):     # the files' pixels are all zero: random ones
        with open(path, "rb") as handle:
            data = with_random_pixels(handle.read(), seed=n + 1)
        with open(path, "wb") as handle:
            handle.write(data)
    return str(folder)


@pytest.fixture(scope="module")
def reference(series, tmp_path_factory):
    [volume] = dcm2niix_volumes(series, str(tmp_path_factory.mktemp("dwi_dcm2niix")))
    return volume


def _records(out: str) -> list[dict]:
    records = reader.RandomAccess(out, "train")
    return sorted((records[i] for i in range(len(records))), key=lambda r: int(r["dicom/volume_index"]))


def _pixels(record: dict) -> np.ndarray:
    return np.asarray(record["image"])         # [depth, height, width, channels]


def test_split_gives_a_record_per_volume_each_equal_to_dcm2niix_volume(series, reference, tmp_path):
    out = str(tmp_path / "out")
    run_convert(series, out, unit="series")
    records = _records(out)
    assert [int(r["dicom/volume_index"]) for r in records] == [0, 1]
    assert {int(r["dicom/volumes"]) for r in records} == {2}
    assert reference.data.ndim == 4 and reference.data.shape[3] == 2
    np.testing.assert_allclose([float(r["dicom/diffusion_bvalue"][0]) for r in records], reference.bval, atol=1e-3)
    expected = fsl_bvecs_to_lps(reference.bvec, reference.affine_ras)
    assert records[0]["dicom/diffusion_gradient"].size == 0          # b = 0: no direction
    np.testing.assert_allclose(records[1]["dicom/diffusion_gradient"], expected[1], atol=1e-3)
    for t, record in enumerate(records):
        pixels = _pixels(record)[..., 0]
        assert pixels.shape[0] > 2                                    # slices, not 2 "slices" of mosaics
        lps = reader.geometry.affine(record)
        worst = assert_same_geometry(lps, pixels, reference.affine_ras, reference.data[..., t], their_space="ras")
        assert worst <= 1e-3


def test_stack_gives_one_4d_record(series, reference, tmp_path):
    out = str(tmp_path / "out")
    run_convert(series, out, unit="series", series_4d="stack")
    [record] = _records(out)
    assert int(record["dicom/volume_index"]) == -1 and int(record["dicom/volumes"]) == 2
    volumes = reader.geometry.volumes(_pixels(record), record)
    assert volumes.shape[0] == 2
    np.testing.assert_allclose(record["dicom/diffusion_bvalue"], reference.bval, atol=1e-3)
    gradients = record["dicom/diffusion_gradient"].reshape(2, 3)
    np.testing.assert_allclose(gradients[0], 0.0)
    np.testing.assert_allclose(gradients[1], fsl_bvecs_to_lps(reference.bvec, reference.affine_ras)[1], atol=1e-3)
    lps = reader.geometry.affine(record)
    for t in range(2):
        assert assert_same_geometry(lps, volumes[t, ..., 0], reference.affine_ras, reference.data[..., t],
                                    their_space="ras") <= 1e-3
    assert os.path.exists(os.path.join(out, "dataset.json"))
