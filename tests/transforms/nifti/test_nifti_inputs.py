"""Issue 33, item 2, end to end: ``.nii`` / ``.nii.gz`` files among the inputs become volume records
with their affine, next to a PNG.

Real conversions (``run_convert``: Beam's local runner, in process) of volumes nibabel writes
(int16, oblique affine; a 4-D file becomes one record per volume). Read back with
``reader.RandomAccess``: the image is the written array in our ``[k, j, i]`` order
(``data.transpose(2, 1, 0)``, transforms/nifti/read.py), ``reader.geometry.affine`` is
read_volume's and ``nifti_affine`` of it nibabel's own; ``verify_dataset`` passes; a corrupt
``.nii.gz`` fails with its reason in errors.jsonl while the others convert.
"""
from __future__ import annotations

import json
import os

import nibabel as nib
import numpy as np
from nibabel.affines import from_matvec
from nibabel.eulerangles import euler2mat
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.nifti import read as nifti
from dcm2tfrecord.transforms.sources import sniff
from tests.support import run_convert
from tests.support.processes import errors_of

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, keep_source_path=True)
OBLIQUE = from_matvec(euler2mat(0.3, -0.2, 0.45) @ np.diag((0.7, 0.9, 2.5)), [-101.5, 40.25, -12.0])


def _data(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1024, 3000, size=shape, dtype=np.int16)


def _write(path: str, data: np.ndarray, affine=OBLIQUE) -> None:
    img = nib.Nifti1Image(data, affine)
    img.header.set_data_dtype(np.int16)
    nib.save(img, path)


def _inputs(root) -> dict:
    """name -> the data written (voxels [i, j, k(, t)]); a PNG and a corrupt .nii.gz beside them."""
    os.makedirs(root, exist_ok=True)
    written = {"plain.nii": _data((7, 6, 5), 1), "packed.nii.gz": _data((9, 4, 3), 2),
               "series.nii.gz": _data((5, 4, 3, 2), 3)}
    for name, data in written.items():
        _write(os.path.join(root, name), data)
    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(6, 8)).save(os.path.join(root, "photo.png"))
    with open(os.path.join(root, "packed.nii.gz"), "rb") as handle:
        whole = handle.read()
    with open(os.path.join(root, "broken.nii.gz"), "wb") as handle:
        handle.write(whole[:len(whole) // 2])             # cut short inside its compressed voxels
    return written


def _records(out) -> dict:
    access = reader.RandomAccess(str(out), "train")
    by_name: dict = {}
    for n in range(len(access)):
        record = access[n]
        name = os.path.basename(bytes(record["source_path"]).decode() if not isinstance(record["source_path"], str)
                                else record["source_path"])
        by_name.setdefault(name, []).append(record)
    return by_name


def _text(value) -> str:
    return value if isinstance(value, str) else bytes(value).decode()


def test_sniff_knows_nifti(tmp_path):
    written = _inputs(tmp_path)
    for name in list(written) + ["broken.nii.gz"]:
        with open(tmp_path / name, "rb") as handle:
            assert sniff.sniff(handle.read(sniff.HEAD_BYTES), name) == sniff.NIFTI, name
    with open(tmp_path / "photo.png", "rb") as handle:
        assert sniff.sniff(handle.read(sniff.HEAD_BYTES), "photo.png") == sniff.IMAGE
    assert sniff.HEAD_BYTES >= nifti.HEAD_BYTES


def test_nifti_volumes_convert_with_their_affine(tmp_path):
    root, out = tmp_path / "in", tmp_path / "out"
    written = _inputs(str(root))
    summary = run_convert(str(root), str(out), **OPTIONS)
    assert summary["records"] == 1 + 1 + 2 + 1, summary        # the 4-D file: a record per volume
    records = _records(out)
    assert sorted(records) == ["packed.nii.gz", "photo.png", "plain.nii", "series.nii.gz"]
    for name, data in written.items():
        expected = data.transpose(*reversed(range(data.ndim)))            # [(t,) k, j, i]
        volumes = expected if data.ndim == 4 else expected[None]
        got = records[name]
        assert len(got) == len(volumes)
        pixels, lps = nifti.read_volume(str(root / name))
        assert np.array_equal(pixels[..., 0], expected)
        images = {r["image"].tobytes(): r for r in got}
        ids = {_text(r["id"]) for r in got}
        assert len(ids) == len(got)                                     # path#volume=v for a 4-D file
        for volume in volumes:
            record = images[np.ascontiguousarray(volume[..., None]).tobytes()]
            assert record["image"].dtype == np.int16 and record["image"].shape == volume.shape + (1,)
            assert _text(record["format"]) == "nifti"
            np.testing.assert_allclose(reader.geometry.affine(record), lps, atol=1e-4)
            np.testing.assert_allclose(reader.geometry.nifti_affine(reader.geometry.affine(record)), OBLIQUE,
                                       atol=1e-4)
            positions = np.asarray(record[patient_space.POSITION], float).reshape(-1, 3)
            assert len(positions) == volume.shape[0]
            for k, position in enumerate(positions):
                np.testing.assert_allclose(position, (lps @ [k, 0, 0, 1])[:3], atol=1e-3)
            cosines = np.asarray(record[patient_space.ORIENTATION], float)
            np.testing.assert_allclose(cosines[:3], lps[:3, 2] / np.linalg.norm(lps[:3, 2]), atol=1e-5)
            np.testing.assert_allclose(cosines[3:], lps[:3, 1] / np.linalg.norm(lps[:3, 1]), atol=1e-5)
            assert not [k for k in record if k.startswith("dicom/") and k not in patient_space.FEATURES
                        and np.asarray(record[k]).size]
    assert _text(records["photo.png"][0]["format"]) == "image"
    with open(out / "dataset.json") as handle:
        schema = json.load(handle)["features"]
    assert set(patient_space.FEATURES) <= set(schema)
    assert not [k for k in schema if k.startswith("dicom/") and k not in patient_space.FEATURES]
    errors = errors_of(out)
    assert [(os.path.basename(e["uri"]), e["reason"]) for e in errors] == [("broken.nii.gz", reasons.TRUNCATED_FILE)], \
        errors
    assert verify_dataset(str(out)).verdict().startswith("OK")


def test_nifti_resize_labels_and_splits(tmp_path):
    root, out = tmp_path / "in", tmp_path / "out"
    written = _inputs(str(root))
    os.remove(root / "broken.nii.gz")
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\nplain.nii,1\npacked.nii.gz,2\nseries.nii.gz,3\nphoto.png,4\n")
    summary = run_convert(str(root), str(out), labels=str(labels), label_key="path", resize="8x8",
                          splits="train=0.5,test=0.5", **OPTIONS)
    assert summary["records"] == 5, summary
    found: dict = {}
    for split in ("train", "test"):
        try:
            access = reader.RandomAccess(str(out), split)
        except Exception:
            continue
        for n in range(len(access)):
            record = access[n]
            found.setdefault(os.path.basename(_text(record["source_path"])), []).append((split, record))
    assert sorted(found) == ["packed.nii.gz", "photo.png", "plain.nii", "series.nii.gz"]
    assert len({split for split, _ in found["series.nii.gz"]}) == 1     # a file's volumes share a split
    for name, label in (("plain.nii", 1), ("packed.nii.gz", 2), ("series.nii.gz", 3)):
        depth = written[name].shape[2]
        _, lps = nifti.read_volume(str(root / name))
        for _, record in found[name]:
            assert int(np.asarray(record["label"]).reshape(-1)[0]) == label
            assert record["image"].shape == (depth, 8, 8, 1)
            affine = reader.geometry.affine(record)
            np.testing.assert_allclose(affine[:, 0], lps[:, 0], atol=1e-4)         # the slice step unchanged
            assert not np.allclose(affine[:3, 1:3], lps[:3, 1:3])                   # the in-plane steps scaled
    assert verify_dataset(str(out)).verdict().startswith("OK")
