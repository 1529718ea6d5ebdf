"""``dcm2tfrecord inspect`` and ``dcm2tfrecord preview``."""
import re

import numpy as np
import pytest
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline import cli
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.pipeline.commands import preview as preview_cmd
from dcm2tfrecord.pipeline.commands.inspect import format_training_view
from dcm2tfrecord.transforms.images import display
from tests.support import run_convert, write_png_archive
from tests.support.nifti_tasks import PATTERN
from tests.support.nifti_tasks import class_map as nifti_class_map
from tests.support.preprocessed import OPTIONS as PREPROCESSED, msd_with_background



@pytest.fixture(scope="module")
def labelled_dataset(tmp_path_factory):
    """cat: 64x64 RGB, dog: 48x80 gray (a mixed split), two splits, one skipped file."""
    root = tmp_path_factory.mktemp("inspect")
    archive = root / "archive"
    write_png_archive(archive / "cat", count=20, height=64, width=64, channels=3, seed=1)
    write_png_archive(archive / "dog", count=20, height=48, width=80, channels=1, seed=2)
    (archive / "cat" / "notes.txt").write_text("not an image")
    out = root / "out"
    run_convert(archive, out, labels_from_dirs=True, splits="train=0.75,validation=0.25",
                target_shard_mb=0.1, min_shard_mb=0.05, max_shard_mb=0.2)
    return str(out)


def _cli(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- inspect


def test_inspect_shows_schema_options_splits_shards_balance_and_reasons(labelled_dataset, capsys):
    code, out, _ = _cli(capsys, "inspect", labelled_dataset)
    assert code == 0
    manifest = reader.info(labelled_dataset)
    sections = ["Schema", "Options used", "Splits", "Shards", "Class balance", "Inputs not written"]
    positions = [out.index(f"\n{title}") for title in sections]
    assert positions == sorted(positions)
    for name, spec in manifest["features"].items():
        assert re.search(rf"^  {re.escape(name)} +{spec['dtype']} ", out, re.M), name
    assert "labels_from_dirs = True" in out and "splits = {'train': 0.75, 'validation': 0.25}" in out
    assert "labels: class from folders; classes: cat, dog" in out
    for name, entry in manifest["splits"].items():
        row = re.search(rf"^  {name} +(\d+) +(\d+) +([\d.]+) ", out, re.M)
        assert row and (int(row[1]), int(row[2])) == (entry["num_records"], len(entry["shards"]))
        for shard in entry["shards"]:
            pattern = rf"^  {re.escape(shard['file'])} +{shard['num_records']} records"
            assert re.search(pattern, out, re.M)
        balance = out[out.index("\nClass balance"):]
        block = balance[balance.index(f"  {name}:"):]
        for key, n in entry["label_counts"].items():
            cls = ["cat", "dog"][int(key)]
            assert re.search(rf"^    {cls} \({key}\) +{n} +[\d.]+%$", block, re.M), (name, cls)
    assert re.search(r"^  skipped  unsupported_format +1$", out, re.M)
    assert f"which files and why: {labelled_dataset}/errors.jsonl" in out


def test_inspect_one_record_summarizes_its_image(labelled_dataset, capsys):
    code, out, _ = _cli(capsys, "inspect", labelled_dataset, "--record", "2", "--split", "validation")
    assert code == 0
    fields = dict(re.findall(r"^  (\S+) +(.*)$", out, re.M))
    assert "image_raw" not in fields
    assert set(reader.info(labelled_dataset)["features"]) - {"image_raw"} <= set(fields)
    height, width, channels = int(fields["height"]), int(fields["width"]), int(fields["channels"])
    assert (height, width, channels) in ((64, 64, 3), (48, 80, 1))
    summary = re.match(r"shape \[(.*)\], dtype (\w+), min ([\d.]+), max ([\d.]+), mean ([\d.]+)",
                       fields["image"])
    assert summary, fields["image"]
    assert [int(x) for x in summary[1].split(", ")] == [height, width, channels]
    assert summary[2] == "uint8"
    low, high, mean = float(summary[3]), float(summary[4]), float(summary[5])
    assert 0 <= low < mean < high <= 255
    assert fields["label"] in ("0 (cat)", "1 (dog)")
    assert fields["label"].endswith("(cat)") == (channels == 3)


@pytest.mark.parametrize("args, message", [
    (["--record", "999", "--split", "train"], "--record 999"),
    (["--record", "0", "--split", "nope"], "--split 'nope'"),
])
def test_inspect_usage_errors_exit_2(labelled_dataset, capsys, args, message):
    code, _, err = _cli(capsys, "inspect", labelled_dataset, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_inspect_of_a_directory_without_dataset_json_exits_2(tmp_path, capsys):
    code, _, err = _cli(capsys, "inspect", str(tmp_path))
    assert code == 2 and "dataset.json" in err


def test_inspect_shows_the_training_view_only_when_used(labelled_dataset, tmp_path, capsys):
    """--spacing, --crop and --intensity: a "Training view" section after the options, naming each
    (none of a plain dataset); no fingerprint facts where dataset.json holds none."""
    _, plain, _ = _cli(capsys, "inspect", labelled_dataset)
    assert "Training view" not in plain
    msd_with_background(tmp_path / "msd")
    out = str(tmp_path / "out")
    summary = run_convert(tmp_path / "msd", out, class_map=nifti_class_map(tmp_path), mask_pattern=PATTERN,
                          **PREPROCESSED, spacing="1.2,1.1,2.0", crop="foreground", intensity="zscore")
    assert summary["records"] == 3, summary
    code, text, _ = _cli(capsys, "inspect", out)
    assert code == 0
    assert text.index("\nOptions used") < text.index("\nTraining view") < text.index("\nSplits")
    section = text[text.index("\nTraining view"):text.index("\nSplits")]
    assert "  target spacing: 1.2,1.1,2.0 mm (X,Y,Z: column, row, slice step" in section
    assert "  crop: foreground (the box of the mask's non-zero voxels); the box kept as dicom/crop_box" in section
    assert "  intensity: zscore (per image and channel" in section
    assert "dataset facts" not in section


def _view_manifest(options: dict, **extra) -> Manifest:
    return Manifest.from_json({"format_version": 1, "splits": {}, "features": {}, "options": options, **extra})


def test_the_training_view_section_shows_the_fingerprint_where_dataset_json_holds_one():
    """--intensity ct's fingerprint, a line per channel; nothing of it when absent; no section
    without the options."""
    assert format_training_view(_view_manifest({"spacing": None, "crop": "off", "intensity": "none"})) == []
    assert format_training_view(_view_manifest({})) == []
    lines = format_training_view(_view_manifest(
        {"spacing": "1,1,1", "crop": "off", "intensity": "ct"},
        fingerprint={"split": "train", "rule": "nnU-Net v2 CTNormalization", "percentile_00_5": [-1000.25],
                     "percentile_99_5": [2950.5], "mean": [11.125], "std": [301.0625], "voxels": [40000]}))
    assert lines[1] == "Training view (--spacing, --crop, --intensity)"
    assert "  crop: off" in lines
    assert any(line.startswith("  intensity: ct (clipped to the train split's foreground 0.5/99.5 percentiles")
               and line.endswith("; intensity/clip_low, clip_high, mean and std kept per channel") for line in lines)
    facts = lines[lines.index("  dataset facts:") + 1:]
    assert facts == ["    fingerprint of split 'train': nnU-Net v2 CTNormalization",
                     "    channel 0: clip -1000.25 .. 2950.5, mean 11.125, std 301.062 (40000 voxels)"], facts
    zscore = format_training_view(_view_manifest({"intensity": "zscore"}))
    assert "dataset facts" not in "\n".join(zscore)


# ---------------------------------------------------------------- preview


def _thumbnails(path, count, thumb, cols):
    """The thumbnail squares of a sheet, row by row, as float arrays."""
    sheet = np.asarray(Image.open(path).convert("L"), dtype=np.float64)
    m = preview_cmd.MARGIN
    tile_w, tile_h = thumb + 2 * m, thumb + 2 * m + preview_cmd.CAPTION_PX
    return [sheet[(i // cols) * tile_h + m:(i // cols) * tile_h + m + thumb,
                  (i % cols) * tile_w + m:(i % cols) * tile_w + m + thumb] for i in range(count)]


def test_preview_is_a_grid_of_16_captioned_thumbnails_that_are_not_blank(labelled_dataset, tmp_path,
                                                                          capsys):
    out = tmp_path / "preview.png"
    code, stdout, _ = _cli(capsys, "preview", labelled_dataset, "--split", "train", "-n", "16",
                           "--out", str(out), "--thumb", "96")
    assert code == 0 and out.exists(), stdout
    image = Image.open(out)
    assert image.format == "PNG" and image.mode == "RGB"
    tile_w = 96 + 2 * preview_cmd.MARGIN
    tile_h = 96 + 2 * preview_cmd.MARGIN + preview_cmd.CAPTION_PX
    assert image.size == (4 * tile_w, 4 * tile_h)           # 16 -> 4 x 4
    assert np.asarray(image.convert("L"), dtype=np.float64).var() > 200
    for i, square in enumerate(_thumbnails(out, 16, 96, 4)):
        assert square.var() > 50, f"thumbnail {i} is blank"
    # each caption area holds text (class name, metadata)
    gray = np.asarray(image.convert("L"))
    for i in range(16):
        top = (i // 4) * tile_h + 96 + 2 * preview_cmd.MARGIN
        caption = gray[top:top + preview_cmd.CAPTION_PX, (i % 4) * tile_w:(i % 4 + 1) * tile_w]
        assert (caption > 128).sum() > 20, f"caption {i} is empty"


def test_preview_is_deterministic_with_seed(labelled_dataset, tmp_path, capsys):
    paths = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        paths[name] = tmp_path / f"{name}.png"
        code, _, err = _cli(capsys, "preview", labelled_dataset, "-n", "9", "--seed", seed,
                            "--out", str(paths[name]), "--thumb", "48")
        assert code == 0, err
    assert paths["a"].read_bytes() == paths["b"].read_bytes()
    assert paths["a"].read_bytes() != paths["c"].read_bytes()
    assert Image.open(paths["a"]).size == preview_cmd.sheet_size(9, 48)


def test_preview_of_the_sample_archive_shows_dicom_and_volumes(sample_dataset, tmp_path, capsys):
    out = tmp_path / "sample.png"
    code, _, err = _cli(capsys, "preview", sample_dataset, "-n", "16", "--out", str(out),
                        "--seed", "0", "--thumb", "64")
    assert code == 0, err
    assert Image.open(out).size == preview_cmd.sheet_size(16, 64)
    squares = _thumbnails(out, 16, 64, 4)
    assert sum(square.var() > 50 for square in squares) >= 12    # a few tiny test files are flat


def test_preview_usage_errors_exit_2(labelled_dataset, tmp_path, capsys):
    code, _, err = _cli(capsys, "preview", labelled_dataset, "--split", "test", "--out",
                        str(tmp_path / "x.png"))
    assert code == 2 and "--split 'test'" in err
    code, _, err = _cli(capsys, "preview", labelled_dataset, "-n", "0")
    assert code == 2 and "-n 0" in err
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------- display values


def test_ct_in_hounsfield_units_is_auto_windowed_and_volumes_show_their_middle_slice():
    rng = np.random.default_rng(0)
    volume = np.full((5, 32, 32, 1), -1000, np.int16)               # air
    volume[2, 8:24, 8:24, 0] = rng.integers(0, 80, (16, 16))        # soft tissue, middle slice only
    record = {"depth": 5, "height": 32, "width": 32, "channels": 1, "dtype": b"int16",
              "format": b"dicom", "dicom/photometric_interpretation": b"MONOCHROME2"}
    rgb = display.display_image(volume.astype(np.float64), record)
    assert rgb.shape == (32, 32, 3) and rgb.dtype == np.uint8
    assert rgb[0, 0, 0] == 0 and rgb[16, 16].max() > 0 and rgb.std() > 50
    inverted = display.display_image(volume, {**record, "dicom/photometric_interpretation":
                                                   b"MONOCHROME1"})
    assert (inverted == 255 - rgb).all()
    # already windowed to uint16 by the converter: shown as value / 257, neither re-windowed
    # nor inverted (the converter inverted MONOCHROME1 itself)
    stored = np.array([[0, 257], [32896, 65535]], np.uint16).reshape(1, 2, 2, 1)
    windowed = display.display_image(stored, {**record, "depth": 1, "height": 2, "width": 2,
                                              "dtype": b"uint16",
                                              "dicom/photometric_interpretation": b"MONOCHROME1"},
                                     windowed=True)
    assert windowed.dtype == np.uint8 and windowed.shape == (2, 2, 3)
    assert windowed[..., 0].tolist() == [[0, 1], [128, 255]]
    assert (windowed[..., 0] == windowed[..., 2]).all()


def test_padding_is_cropped_and_uint8_shown_as_stored():
    padded = np.zeros((40, 50, 3), np.uint8)
    padded[:20, :30, 0] = np.arange(30, dtype=np.uint8)
    rgb = display.display_image(padded, {"depth": 1, "height": 20, "width": 30, "channels": 1,
                                             "dtype": b"uint8"})
    assert rgb.shape == (20, 30, 3) and (rgb[0, :, 1] == np.arange(30)).all()


def test_caption_names_the_class_and_metadata():
    record = {"label": np.int64(1), "depth": 1, "height": 512, "width": 512, "channels": 1,
              "dtype": b"int16", "format": b"dicom", "dicom/modality": b"CT",
              "dicom/photometric_interpretation": b"MONOCHROME2",
              "dicom/pixel_spacing": np.array([0.7, 0.7], np.float32)}
    assert preview_cmd.caption(record, ["normal", "nodule"]) == [
        "nodule", "CT 512x512x1 int16", "MONOCHROME2 0.7mm"]
    assert preview_cmd.caption({**record, "label": np.int64(-1), "depth": 30}, [])[::2] == [
        "unlabeled", "slice 15 of 30"]
