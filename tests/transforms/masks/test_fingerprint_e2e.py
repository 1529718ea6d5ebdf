"""``--intensity ct`` end to end (issue 44 item 2): NIfTI images with their label maps converted
by Beam's local runner with and without the option. The fingerprint in dataset.json is nnU-Net
v2's pooled statistics of nnU-Net's own draw from each train record's foreground (seeded by the
record's id), never of a test record; every record, train and test, is nnU-Net's
``CTNormalization`` of its plain conversion with it, to the bit; ``reader.intensity`` undoes it
within the clip bounds; another runner mode, with other bundles, writes the same bytes; and
``--incremental`` reuses the committed fingerprint."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import versions
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.images import fingerprint
from tests.support import RUNNER_MODES, run_convert
from tests.support.nifti_tasks import PATTERN, image, labels, save
from tests.support.nifti_tasks import class_map as _class_map

extractor = pytest.importorskip("nnunetv2.experiment_planning.dataset_fingerprint.fingerprint_extractor")
schemes = pytest.importorskip("nnunetv2.preprocessing.normalization.default_normalization_schemes")

CASES = 6
OPTIONS = dict(unit="series", mask_pattern=PATTERN, splits="train=0.5,test=0.5", allow_empty=True,
               target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, keep_source_path=True)


def _archive(root, scale_of=lambda case: 1) -> None:
    for i in range(CASES):
        shape = (9 + i, 7, 5)
        save(os.path.join(root, "imagesTr", f"case_{i}_0000.nii.gz"), (image(shape, i) // 4 * scale_of(i)))
        save(os.path.join(root, "labelsTr", f"case_{i}.nii.gz"), labels(shape, i))


def _convert(root, out, classes, **options) -> dict:
    summary = run_convert(root, out, class_map=classes, **{**OPTIONS, **options})
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    return summary


def _records(out) -> dict:
    """(split, source path) -> record."""
    with open(os.path.join(str(out), "dataset.json")) as handle:
        splits = json.load(handle)["splits"]
    found = {}
    for split in splits:
        access = reader.RandomAccess(str(out), split)
        for i in range(len(access)):
            record = access[i]
            found[(split, bytes(record["source_path"]).decode())] = record
    return found


def _manifest(out) -> dict:
    with open(os.path.join(str(out), "dataset.json")) as handle:
        return json.load(handle)


def _shards(out) -> dict:
    return {name: hashlib.sha256(open(os.path.join(str(out), name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(str(out))) if ".tfrecord" in name}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    base = tmp_path_factory.mktemp("ct")
    root = str(base / "task")
    _archive(root)
    classes = _class_map(base)
    _convert(root, base / "plain", classes)
    _convert(root, base / "ct", classes, intensity="ct")
    return base, root, classes


def test_the_fingerprint_is_nnunets_of_the_train_records_and_every_record_is_nnunets_ct_normalisation(converted):
    base, _, _ = converted
    plain, normalised = _records(base / "plain"), _records(base / "ct")
    assert set(plain) == set(normalised) and {s for s, _ in plain} == {"train", "test"}
    drawn = []
    for (split, _), record in sorted(plain.items()):
        if split != "train":
            continue
        images = np.moveaxis(np.asarray(record["image"], np.float32), -1, 0)
        seg = np.asarray(record["mask"])[None, ..., 0]
        ours, _ = extractor.DatasetFingerprintExtractor.collect_foreground_intensities(
            seg, images, seed=fingerprint.record_seed(bytes(record["id"]).decode()))
        drawn.append(ours[0])
    theirs = np.concatenate(drawn)
    found = _manifest(base / "ct")["fingerprint"]
    assert found["split"] == "train" and found["scheme"] == "ct"
    assert found["voxels"] == [theirs.size] == [len(drawn) * fingerprint.SAMPLES_PER_RECORD]
    low, high = np.percentile(theirs, (0.5, 99.5))
    np.testing.assert_allclose([found["percentile_00_5"][0], found["percentile_99_5"][0]], [low, high], rtol=1e-6)
    np.testing.assert_allclose([found["mean"][0], found["std"][0]], [np.mean(theirs), np.std(theirs)], rtol=1e-5)
    properties = {k: found[k][0] for k in ("mean", "std", "percentile_00_5", "percentile_99_5")}
    for key, record in normalised.items():
        source = np.asarray(plain[key]["image"])
        expected = schemes.CTNormalization(intensityproperties=properties).run(source[..., 0].copy())
        assert record["image"].dtype == np.float32 and np.array_equal(record["image"][..., 0], expected), key
        assert np.array_equal(record["mask"], plain[key]["mask"])
        np.testing.assert_allclose(record[fingerprint.CLIP_LOW], [low], rtol=1e-6)
        back = reader.intensity.denormalize(record["image"], record)
        inside = (source >= found["percentile_00_5"][0]) & (source <= found["percentile_99_5"][0])
        np.testing.assert_allclose(back[inside], source[inside], atol=1e-3 * found["std"][0])
    assert verify_dataset(str(base / "ct")).ok


def test_test_records_never_reach_the_fingerprint_and_train_records_do(converted, tmp_path):
    base, _, classes = converted
    tests = {bytes(r["source_path"]).decode() for (s, _), r in _records(base / "ct").items() if s == "test"}
    test_cases = {int(os.path.basename(p).split("_")[1]) for p in tests}
    other = str(tmp_path / "task")
    _archive(other, lambda case: 3 if case in test_cases else 1)      # the test split's images changed
    _convert(other, tmp_path / "ct", classes, intensity="ct")
    assert _manifest(tmp_path / "ct")["fingerprint"] == _manifest(base / "ct")["fingerprint"]
    train = str(tmp_path / "train")
    _archive(train, lambda case: 1 if case in test_cases else 3)      # and the train split's
    _convert(train, tmp_path / "ct_train", classes, intensity="ct")
    assert _manifest(tmp_path / "ct_train")["fingerprint"]["mean"] != _manifest(base / "ct")["fingerprint"]["mean"]


def test_another_runner_mode_writes_the_same_bytes_and_the_same_fingerprint(converted, tmp_path):
    base, root, classes = converted
    run_convert(root, tmp_path / "threads", RUNNER_MODES["multi_threading"], class_map=classes, intensity="ct",
                **OPTIONS)
    assert _shards(tmp_path / "threads") == _shards(base / "ct")
    assert _manifest(tmp_path / "threads")["fingerprint"] == _manifest(base / "ct")["fingerprint"]


def test_incremental_reuses_the_committed_fingerprint_for_new_records(converted, tmp_path):
    base, _, classes = converted
    task, out = str(tmp_path / "task"), str(tmp_path / "out")
    _archive(task)
    _convert(task, out, classes, intensity="ct", incremental=True)
    first = _manifest(versions.version_dir(out, versions.read_latest(out)))
    assert first["fingerprint"] == _manifest(base / "ct")["fingerprint"]
    shape = (12, 7, 5)
    save(os.path.join(task, "imagesTr", "case_9_0000.nii.gz"), image(shape, 9) * 3)    # brighter than the rest
    save(os.path.join(task, "labelsTr", "case_9.nii.gz"), labels(shape, 9))
    _convert(task, out, classes, intensity="ct", incremental=True)
    latest = versions.version_dir(out, versions.read_latest(out))
    second = _manifest(latest)
    assert second["incremental"]["reused_records"] == CASES and second["fingerprint"] == first["fingerprint"]
    found = _records(latest)
    [new] = [r for (_, path), r in found.items() if "case_9" in path]
    properties = {k: first["fingerprint"][k][0] for k in ("mean", "std", "percentile_00_5", "percentile_99_5")}
    source = np.asarray(image(shape, 9) * 3, np.float32).transpose(2, 1, 0)    # nibabel's [i, j, k] -> [k, j, i]
    expected = schemes.CTNormalization(intensityproperties=properties).run(source.copy())
    assert np.array_equal(new["image"][..., 0], expected)


def test_without_a_train_split_ct_is_refused_before_any_work(tmp_path):
    from dcm2tfrecord.pipeline.options.usage import UsageError
    with pytest.raises(UsageError, match="split named 'train'"):
        run_convert(tmp_path, tmp_path / "out", intensity="ct", splits="a=0.5,b=0.5")
