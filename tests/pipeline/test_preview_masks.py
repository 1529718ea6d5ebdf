"""``dcm2tfrecord preview`` of a --class_map dataset: each mask class outlined on the slice shown,
in its colour, with a legend of the class names (issue 33, item 6).

Real conversions (Beam's local runner) of a CT series annotated by a highdicom-written SEG, beside
a series without one (``--missing_mask empty``: a record without a mask pixel), in both
``--mask_layout``s; the sheet is written by the command line and read back with Pillow. The
expected outline is computed here from the known masks: the middle slice's class regions scaled
to the thumbnail by Pillow's nearest neighbour, less their erosion (scipy). The outlined sheet
must differ from the ``--no_outlines`` sheet on exactly those pixels, in the class colours.
"""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline import cli
from dcm2tfrecord.pipeline.commands import preview as preview_cmd
from dcm2tfrecord.transforms.images.outlines import class_colour
from tests.support import mask_datasets, run_convert, write_png_archive
from tests.support import series_builders as sb

SHAPE = (24, 40)                       # rows, columns: not square, so a transposed outline shows
DEPTH = 5
OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series",
               missing_mask="empty")


def _known() -> np.ndarray:
    """[Liver, Tumour] x [k, j, i] bool in record order: shapes that change from slice to slice;
    on the middle slice the liver runs into the left edge and the tumour overlaps it."""
    jj, ii = np.mgrid[:SHAPE[0], :SHAPE[1]]
    masks = np.zeros((2, DEPTH, *SHAPE), bool)
    for k in range(DEPTH):
        masks[0, k] = (jj >= 3 + k) & (jj < 17) & (ii < 14 + 3 * k)
        masks[1, k] = (jj - 12) ** 2 + (ii - 20 - k) ** 2 <= (3 + k) ** 2
    return masks


@pytest.fixture(scope="module", params=["label_map", "binary"])
def masked(request, tmp_path_factory):
    """(dataset dir, layout, the known masks): series A (DEPTH slices, SEG) and B (3 slices, none)."""
    root = tmp_path_factory.mktemp(f"preview_{request.param}")
    a = mask_datasets.series(root / "in" / "a", DEPTH, 2.5, shape=SHAPE, seed=21)
    sb.regular(str(root / "in" / "b"), 3, 2.5, shape=SHAPE, seed=22, origin=(0.0, 0.0, 500.0))
    known = _known()
    mask_datasets.write_seg(a, known, root / "in" / "seg.dcm", "test_preview_masks")
    out = root / "out"
    summary = run_convert(root / "in", out, class_map=mask_datasets.class_map(root),
                          mask_layout=request.param, **OPTIONS)
    assert summary["records"] == 2 and summary["failed"] == {} and summary["skipped"] == {}, summary
    return str(out), request.param, known


def _preview(capsys, dataset: str, path, *args) -> np.ndarray:
    code = cli.main(["preview", dataset, "-n", "4", "--cols", "2", "--seed", "3", "--out", str(path), *args])
    _, err = capsys.readouterr()
    assert code == 0, err
    image = Image.open(path)
    assert image.mode == "RGB"
    return np.asarray(image)


def _expected_regions(known: np.ndarray, layout: str, depth: int) -> np.ndarray:
    """[classes, h, w] of the middle slice, as the record holds it (label_map: Liver wins overlaps)."""
    if depth != DEPTH:
        return np.zeros((2, *SHAPE), bool)
    liver, tumour = known[:, DEPTH // 2]
    return np.stack([liver, tumour & ~liver] if layout == "label_map" else [liver, tumour])


def _outlines_on_sheet(regions: np.ndarray, slot: int, thumb: int, sheet_shape) -> list[np.ndarray]:
    """Each class's expected outline pixels on the sheet: thumbnail ``slot`` of a 2-column grid."""
    scale = thumb / max(SHAPE)
    width, height = max(1, round(SHAPE[1] * scale)), max(1, round(SHAPE[0] * scale))
    tile_w, tile_h = preview_cmd.tile_size(thumb)
    left = (slot % 2) * tile_w + preview_cmd.MARGIN + (thumb - width) // 2
    top = (slot // 2) * tile_h + preview_cmd.MARGIN + (thumb - height) // 2
    out = []
    for region in regions:
        small = np.asarray(Image.fromarray(region.astype(np.uint8)).resize((width, height),
                                                                            Image.Resampling.NEAREST)) > 0
        edge = small ^ ndimage.binary_erosion(small, border_value=0)
        placed = np.zeros(sheet_shape[:2], bool)
        placed[top:top + height, left:left + width] = edge
        out.append(placed)
    return out


@pytest.mark.parametrize("thumb", [80, 20])               # enlarged (nearest) and shrunk (Lanczos)
def test_outlines_lie_exactly_on_the_mask_boundaries_in_the_class_colours(masked, tmp_path, capsys, thumb):
    dataset, layout, known = masked
    outlined = _preview(capsys, dataset, tmp_path / "outlined.png", "--thumb", str(thumb))
    plain = _preview(capsys, dataset, tmp_path / "plain.png", "--thumb", str(thumb), "--no_outlines")
    grid_w, grid_h = preview_cmd.sheet_size(2, thumb, 2)
    assert plain.shape == (grid_h, grid_w, 3)                 # --no_outlines: no legend either
    assert outlined.shape[1] == grid_w and outlined.shape[0] > grid_h
    # which record each thumbnail shows: preview's seeded order, told apart by depth
    records = preview_cmd.sample_records(dataset, "train", 4, 3, masks=True)
    assert sorted(int(r["depth"]) for r in records) == [3, DEPTH]
    edges = [np.zeros((grid_h, grid_w), bool), np.zeros((grid_h, grid_w), bool)]
    for slot, record in enumerate(records):
        depth = int(record["depth"])
        if depth == DEPTH:                                    # the mask the reader holds is the known one
            stored = record["mask"][..., 0] if layout == "label_map" else record["mask"]
            expected = (known[0] * 1 + (known[1] & ~known[0]) * 2) if layout == "label_map" \
                else np.moveaxis(known, 0, -1)
            np.testing.assert_array_equal(stored, expected)
        regions = _expected_regions(known, layout, depth)
        for c, placed in enumerate(_outlines_on_sheet(regions, slot, thumb, (grid_h, grid_w))):
            edges[c] |= placed
    assert edges[0].sum() > 20 and edges[1].sum() > 8 and (edges[0] & edges[1]).sum() < edges[1].sum()
    grid = outlined[:grid_h]
    changed = (grid != plain).any(-1)
    np.testing.assert_array_equal(changed, edges[0] | edges[1])          # not inside, not outside
    assert (grid[edges[0]] == class_colour(0)).all()                      # Liver drawn on top
    assert (grid[edges[1] & ~edges[0]] == class_colour(1)).all()
    assert class_colour(0) != class_colour(1)
    # the legend, under the grid: a swatch of each class colour, Liver's first
    legend = outlined[grid_h:]
    spots = [np.argwhere((legend == class_colour(c)).all(-1)) for c in (0, 1)]
    assert all(len(s) == preview_cmd.SWATCH_PX ** 2 for s in spots), [len(s) for s in spots]
    assert tuple(spots[0][0]) < tuple(spots[1][0])                       # left of it, or a line above
    assert (legend.max(-1) > 200).sum() > 40                            # the names' text
    assert reader.info(dataset).mask_classes == mask_datasets.CLASSES


@pytest.fixture(scope="module")
def labelless_png(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview_plain")
    write_png_archive(root / "in", count=4, height=30, width=40, channels=1, seed=5)
    run_convert(root / "in", root / "out", target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)
    return str(root / "out")


def test_outlines_need_a_masked_dataset_and_leave_other_sheets_as_they_were(labelless_png, tmp_path, capsys):
    """Without masks the sheet is the one --no_outlines draws, byte for byte, without a legend."""
    default = tmp_path / "default.png"
    off = tmp_path / "off.png"
    sheet = _preview(capsys, labelless_png, default, "--thumb", "48")
    _preview(capsys, labelless_png, off, "--thumb", "48", "--no_outlines")
    assert default.read_bytes() == off.read_bytes()
    assert sheet.shape[:2] == preview_cmd.sheet_size(4, 48, 2)[::-1]


def test_legend_entries_wrap_at_the_sheet_edge_and_long_names_are_cut():
    measure = lambda text: 6 * len(text)                     # noqa: E731  (6 px a character)
    entry = preview_cmd.SWATCH_PX + preview_cmd.SWATCH_GAP
    width = 2 * preview_cmd.MARGIN + 2 * (entry + 30) + preview_cmd.LEGEND_GAP    # two 5-letter names a line
    rows = preview_cmd.legend_rows(["Liver", "Gland", "Heart", "X" * 40], width, measure)
    assert [[i for i, _ in row] for row in rows] == [[0, 1], [2], [3]]
    assert [name for row in rows[:2] for _, name in row] == ["Liver", "Gland", "Heart"]
    cut = rows[2][0][1]
    assert cut.endswith("...") and entry + measure(cut) <= width - 2 * preview_cmd.MARGIN
    assert preview_cmd.legend_rows([], width, measure) == [] and preview_cmd.legend_height([]) == 0
