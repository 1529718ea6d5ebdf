"""DICOM fidelity: transfer syntaxes agree, value modes follow PS3.3, geometry, patient safety."""
import os
import warnings

import numpy as np
import pydicom

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from tests.support import run_convert
from dcm2tfrecord.transforms.images import geometry
from dcm2tfrecord.transforms.dicom import voi
from dcm2tfrecord.transforms.records.build import decode_record
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

SRC = pydicom_test_files()
SMALL = dict(target_shard_mb=1, min_shard_mb=0.1, max_shard_mb=8)


def _decode(name, root=SRC, **settings):
    path = os.path.join(root, name)
    source = SourceFile(path, name, os.path.getsize(path), 0.0)
    opts = DecodeSettings(**settings)
    record = probe_file(source, settings=opts)
    with open(path, "rb") as handle:
        pixels, metadata = decode_record(record, handle, opts)
    assert pixels.shape == record.spec.shape and pixels.dtype == np.dtype(record.spec.dtype)
    return pixels, metadata


def _ds(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pydicom.dcmread(os.path.join(SRC, name))


def test_mr_small_in_every_transfer_syntax_decodes_identically():
    variants = ["MR_small.dcm", "MR_small_bigendian.dcm", "MR_small_implicit.dcm", "MR_small_RLE.dcm",
                "MR_small_jpeg_ls_lossless.dcm", "MR_small_jp2klossless.dcm", "MR_small_expb.dcm"]
    reference, _ = _decode(variants[0])
    for name in variants[1:]:
        pixels, _ = _decode(name)
        assert pixels.dtype == reference.dtype and np.array_equal(pixels, reference), name


def _hand_window(x, center, width):
    x = x.astype(np.float64)
    y = ((x - (center - 0.5)) / (width - 1) + 0.5) * 255
    y[x <= center - 0.5 - (width - 1) / 2] = 0
    y[x > center - 0.5 + (width - 1) / 2] = 255
    return np.rint(y).astype(np.uint8)


def test_window_preset_and_file_window_match_the_formula(tmp_path):
    ds = _ds("CT_small.dcm")
    hu = ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    lung, meta = _decode("CT_small.dcm", dicom_values="window", window="lung")
    assert lung.dtype == np.uint8 and list(meta["dicom/window"]) == [-600.0, 1500.0]
    assert np.array_equal(lung[0, :, :, 0], _hand_window(hu, -600, 1500))
    ds.WindowCenter, ds.WindowWidth = ["40", "400"], ["400", "1500"]   # two windows: the first is used
    ds.save_as(tmp_path / "ct_windowed.dcm")
    own, meta = _decode("ct_windowed.dcm", root=str(tmp_path), dicom_values="window")
    assert voi.file_window(ds) == (40.0, 400.0) and list(meta["dicom/window"]) == [40.0, 400.0]
    assert np.array_equal(own[0, :, :, 0], _hand_window(hu, 40, 400))
    ct, meta = _decode("693_J2KI.dcm", dicom_values="window")
    assert list(meta["dicom/window"]) == [40.0, 100.0]
    explicit, _ = _decode("CT_small.dcm", dicom_values="window", window=(40.0, 400.0), window_bits=16)
    assert explicit.dtype == np.uint16 and explicit.max() <= 65535


def test_monochrome1_is_inverted_in_window_mode():
    name = os.path.join("dicomdirtests", "77654033", "CR1", "6154")
    ds = _ds(name)
    assert ds.PhotometricInterpretation == "MONOCHROME1"
    out, meta = _decode(name, dicom_values="window")
    values = ds.pixel_array * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    center, width = meta["dicom/window"]
    assert np.array_equal(out[0, :, :, 0], 255 - _hand_window(values, center, width))


def test_palette_color_becomes_rgb_through_its_lut():
    from pydicom.pixels import apply_color_lut
    ds = _ds("examples_palette.dcm")
    out, _ = _decode("examples_palette.dcm")
    assert out.shape[-1] == 3
    assert np.array_equal(out[0], apply_color_lut(ds.pixel_array, ds))


def test_stored_mode_keeps_raw_values():
    out, _ = _decode("CT_small.dcm", dicom_values="stored")
    assert np.array_equal(out[0, :, :, 0], _ds("CT_small.dcm").pixel_array)


def test_twelve_bit_lossy_jpeg_agrees_with_a_second_decoder():
    """JPEG-lossy.dcm goes through libjpeg-turbo (imagecodecs); the reference is another codebase.

    pydicom ships the same image as JPGExtended.dcm, "a fixed version of
    JPEG-lossy.dcm": one byte of the scan header differs, which libjpeg-turbo
    tolerates and Thomas Richter's libjpeg (pylibjpeg-libjpeg) does not. That
    second decoder, on the fixed copy, is the reference. Lossy JPEG decoders may
    differ by the IDCT's rounding (ISO/IEC 10918-2 allows it): at most 1 here.
    """
    from libjpeg import decode
    from pydicom.encaps import generate_frames
    out, meta = _decode("JPEG-lossy.dcm")
    assert out.shape == (1, 1024, 256, 1) and meta["dicom/transfer_syntax"] == "1.2.840.10008.1.2.4.51"
    ours, fixed = (next(generate_frames(_ds(n).PixelData, number_of_frames=1))
                   for n in ("JPEG-lossy.dcm", "JPGExtended.dcm"))
    assert len(ours) == len(fixed) and sum(a != b for a, b in zip(ours, fixed)) == 1
    reference = decode(fixed).astype(np.int32)
    assert reference.shape == (1024, 256) and 200 < reference.max() < 4096
    diff = np.abs(out[0, :, :, 0].astype(np.int32) - reference)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.02


def test_resize_modes_and_channels():
    arr = np.arange(2 * 40 * 80 * 3, dtype=np.int16).reshape(2, 40, 80, 3)
    for mode in geometry.ResizeMode:
        out = geometry.resize(arr, (20, 20), mode)
        assert out.shape == (2, 20, 20, 3) and out.dtype == np.int16
    padded = geometry.resize(np.full((1, 40, 80, 1), 100, np.uint8), (20, 20), "pad")
    assert (padded[0, :5, :, 0] == 100).all()   # padded with the image minimum
    gray = geometry.convert_channels(np.full((1, 2, 2, 3), [255, 0, 0], np.uint8), "1")
    assert gray.shape == (1, 2, 2, 1) and gray[0, 0, 0, 0] == 76   # 0.299 * 255
    assert geometry.convert_channels(gray, "3").shape == (1, 2, 2, 3)
    box = geometry.resize(np.array([[0, 100], [100, 0]], np.float32).reshape(1, 2, 2, 1), (1, 1))
    assert box[0, 0, 0, 0] == 50.0   # area average


def test_resize_keeps_the_extremes_of_wide_integer_types():
    """uint32 white (2**32 - 1) must not wrap to 0 through float32's rounding (SC_rgb_rle_32bit)."""
    for dtype in (np.uint32, np.int32, np.uint16, np.int16):
        info = np.iinfo(dtype)
        arr = np.full((1, 8, 8, 3), info.max, dtype)
        arr[0, :4] = info.min
        with np.errstate(all="raise"):
            out = geometry.resize(arr, (4, 4))
        assert out.dtype == dtype
        assert out[0, 0, 0, 0] == info.min and out[0, 3, 3, 2] == info.max, dtype
    resized, _ = _decode("SC_rgb_rle_32bit.dcm", resize=(40, 30), channels="3")
    full, _ = _decode("SC_rgb_rle_32bit.dcm")
    assert resized.max() == full.max() == np.iinfo(np.uint32).max


def test_frames_split_gives_one_record_per_frame():
    path = os.path.join(SRC, "examples_ybr_color.dcm")
    source = SourceFile(path, "x.dcm", os.path.getsize(path), 0.0)
    opts = DecodeSettings(frames="split")
    frames = expand_frames(probe_file(source, settings=opts), opts)
    assert len(frames) == 30 and len({f.record_id for f in frames}) == 30
    stacked, _ = _decode("examples_ybr_color.dcm")
    with open(path, "rb") as handle:
        seventh, _ = decode_record(frames[7], handle, opts)
    assert np.array_equal(seventh[0], stacked[7])


def test_resized_conversion_reads_back_with_a_static_shape(tmp_path):
    archive = tmp_path / "a"
    os.makedirs(archive)
    for name in ("CT_small.dcm", "MR_small.dcm", "JPEG2000.dcm"):
        (archive / name).write_bytes(open(os.path.join(SRC, name), "rb").read())
    run_convert(archive, tmp_path / "out", dicom_values="window", window="abdomen", resize="64x64",
                resize_mode="pad", channels="3", **SMALL)
    images, _ = next(iter(reader.load(str(tmp_path / "out"), batch_size=3)))
    assert images.shape == (3, 64, 64, 3) and images.dtype.name == "uint8"


def _write_identified(root):
    """CT_small copies with known identifiers, names in the paths, and one burned-in image."""
    names = {}
    for i in range(3):
        ds = _ds("CT_small.dcm")
        ds.PatientName, ds.PatientID = f"Smith^Jane{i}", f"MRN-77{i}"
        ds.AccessionNumber = f"ACC9{i}"
        ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.10.{i}"
        folder = root / f"Smith_Jane{i}"
        os.makedirs(folder, exist_ok=True)
        ds.save_as(folder / f"slice_{i}.dcm")
        names[f"Smith_Jane{i}/slice_{i}.dcm"] = ds
    burned = _ds("MR_small.dcm")
    burned.BurnedInAnnotation = "YES"
    burned.save_as(root / "burned.dcm")
    return names


def test_no_identifier_or_path_reaches_the_training_outputs(tmp_path):
    names = _write_identified(tmp_path / "a")
    run_convert(tmp_path / "a", tmp_path / "out", **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    assert manifest["counts"]["skipped"] == {"burned_in_annotation": 1}
    secrets = set()
    for rel, ds in names.items():
        secrets |= {str(ds.PatientName), ds.PatientID, ds.StudyInstanceUID, ds.SeriesInstanceUID,
                    ds.SOPInstanceUID, ds.AccessionNumber, rel, "Smith_Jane", "Smith^Jane"}
    out = tmp_path / "out"
    scanned = 0
    for name in os.listdir(out):
        if name == "errors.jsonl" or name.startswith("."):
            continue
        data = (out / name).read_bytes()
        scanned += 1
        for secret in secrets:
            assert secret.encode() not in data, (name, secret)
    assert scanned >= 3    # shard, index, dataset.json
    for batch in reader.load(str(out), batch_size=1, shuffle=False, output="dict"):
        assert "source_path" not in batch
    from dcm2tfrecord.transforms.hashing import identifier_hash
    from tests.support import TEST_SALT
    import tensorflow as tf
    shard = out / manifest["splits"]["train"]["shards"][0]["file"]
    hashes = {tf.train.Example.FromString(r.numpy()).features.feature["dicom/patient_id_hash"]
              .bytes_list.value[0].decode() for r in tf.data.TFRecordDataset(str(shard))}
    assert hashes == {identifier_hash(f"MRN-77{i}", TEST_SALT) for i in range(3)}


def test_keep_source_path_and_allow_burned_in_are_explicit(tmp_path):
    _write_identified(tmp_path / "a")
    run_convert(tmp_path / "a", tmp_path / "out", keep_source_path=True, allow_burned_in=True,
                keep_tags=("PatientSex",), **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    assert manifest["counts"]["written"] == 4
    assert "source_path" in manifest["features"] and "dicom/PatientSex" in manifest["features"]
    data = (tmp_path / "out" / manifest["splits"]["train"]["shards"][0]["file"]).read_bytes()
    assert b"burned.dcm" in data


def _write_series(root, series, n, z_of=lambda k: 2.5 * k, rows=16, seed=0, shape_of=None):
    """A CT series written in shuffled order; pixel values encode the slice's anatomical index."""
    template = _ds("CT_small.dcm")
    order = np.random.default_rng(seed).permutation(n)
    os.makedirs(root, exist_ok=True)
    for file_index, k in enumerate(order):
        ds = template.copy()
        r = shape_of(k) if shape_of else rows
        ds.Rows = ds.Columns = r
        ds.PixelData = np.full((r, r), 100 + int(k), dtype=np.int16).tobytes()
        ds.SeriesInstanceUID = f"1.2.826.0.1.3680043.9.8.{series}"
        ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.8.{series}.{k}"
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.ImagePositionPatient = [0, 0, z_of(k)]
        ds.InstanceNumber = int(n - k)     # deliberately disagrees with position
        ds.save_as(os.path.join(root, f"s{series}_{file_index:03d}.dcm"))


def test_series_becomes_one_volume_in_anatomical_order(tmp_path):
    _write_series(tmp_path / "a", series=1, n=12)
    _write_series(tmp_path / "a", series=2, n=5, z_of=lambda k: 6.0 if k == 3 else 3.0 * k)   # k=2 and k=3 coincide
    _write_series(tmp_path / "a", series=3, n=4, shape_of=lambda k: 16 if k else 8, seed=1)     # mixed
    run_convert(tmp_path / "a", tmp_path / "out", unit="series", **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    counts = manifest["counts"]
    assert counts["written"] == 12 and counts["records"] == 1
    assert counts["failed"] == {"series_duplicate_position": 5, "series_mixed_shapes": 4}
    batch = next(iter(reader.load(str(tmp_path / "out"), batch_size=1, output="dict")))
    volume = batch["image"][0].numpy()
    assert volume.shape == (12, 16, 16, 1)
    ct_offset = -1024
    assert [int(volume[k, 0, 0, 0]) for k in range(12)] == [100 + k + ct_offset for k in range(12)]
    import tensorflow as tf
    shard = tmp_path / "out" / manifest["splits"]["train"]["shards"][0]["file"]
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(shard)))).numpy())
    assert list(example.features.feature["dicom/slice_spacing"].float_list.value) == [2.5]
    assert example.features.feature["depth"].int64_list.value[0] == 12
