"""Mask outlines for ``preview`` (transforms/images/outlines.py): regions of the slice shown,
their boundary, nearest-neighbour scaling and the colours (checked against scipy's erosion)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from dcm2tfrecord.transforms.images import outlines


def _record(depth, height, width, mask_channels, channels=1) -> dict:
    return {"depth": depth, "height": height, "width": width, "channels": channels,
            "mask_channels": mask_channels}


def test_boundary_is_the_region_xor_its_erosion_closed_at_the_image_edge():
    region = np.zeros((7, 9), bool)
    region[1:6, 2:7] = True                                   # a 5x5 square: its ring
    ring = region.copy()
    ring[2:5, 3:6] = False
    np.testing.assert_array_equal(outlines.boundary(region), ring)
    rng = np.random.default_rng(0)
    blobs = ndimage.binary_opening(rng.random((40, 50)) < 0.6)
    blobs[:, :6] = True                                        # touches three edges
    expected = blobs ^ ndimage.binary_erosion(blobs, border_value=0)
    np.testing.assert_array_equal(outlines.boundary(blobs), expected)
    assert outlines.boundary(blobs)[:, 0].all() and not outlines.boundary(blobs)[5:-5, 3].any()
    assert not outlines.boundary(np.zeros((4, 4), bool)).any()
    np.testing.assert_array_equal(outlines.boundary(np.ones((1, 3), bool)), np.ones((1, 3), bool))


def test_label_map_regions_are_the_middle_slice_cropped_and_one_per_class():
    mask = np.zeros((5, 6, 8, 1), np.uint8)                  # zero-padded from a 4x5x7 record
    mask[2, 1:3, 1:4, 0] = 1
    mask[2, 3, 2:6, 0] = 3
    mask[2, 5, :, 0] = 2                                      # in the padding: cropped away
    mask[1, 0, 0, 0] = 2                                      # another slice: not shown
    regions = outlines.class_regions(mask, _record(4, 5, 7, 1), 3)   # depth 4: slice 2
    assert regions.shape == (3, 5, 7) and regions.dtype == bool
    np.testing.assert_array_equal(regions[0], mask[2, :5, :7, 0] == 1)
    assert not regions[1].any()
    np.testing.assert_array_equal(regions[2], mask[2, :5, :7, 0] == 3)
    # a 2-D record's [h, w, c] mask; no class at all
    flat = outlines.class_regions(mask[2], _record(1, 6, 8, 1), 3)
    np.testing.assert_array_equal(flat[1], mask[2, ..., 0] == 2)
    assert outlines.class_regions(mask[2], _record(1, 6, 8, 1), 0).shape == (0, 6, 8)


def test_binary_regions_are_the_channels_and_may_overlap():
    rng = np.random.default_rng(1)
    mask = (rng.random((3, 6, 5, 2)) < 0.5).astype(np.uint8)
    regions = outlines.class_regions(mask, _record(3, 6, 5, 2), 2)
    np.testing.assert_array_equal(regions, np.moveaxis(mask[1], -1, 0).astype(bool))
    assert (regions[0] & regions[1]).any()


def test_scaled_is_pillows_nearest_neighbour():
    from PIL import Image
    region = np.zeros((6, 10), bool)
    region[1:4, 2:9] = True
    for size in ((20, 12), (5, 3), (10, 6)):
        pillow = np.asarray(Image.fromarray(region.astype(np.uint8)).resize(size, Image.Resampling.NEAREST)) > 0
        np.testing.assert_array_equal(outlines.scaled(region, size), pillow)


def test_draw_outlines_paints_only_the_scaled_boundaries_first_class_on_top():
    image = np.full((8, 12, 3), 90, np.uint8)
    liver = np.zeros((4, 6), bool)
    liver[0:3, 0:4] = True
    tumour = np.zeros((4, 6), bool)
    tumour[1:4, 2:6] = True
    drawn = outlines.draw_outlines(image, [liver, tumour])
    edges = [outlines.boundary(np.kron(r, np.ones((2, 2), bool)).astype(bool)) for r in (liver, tumour)]
    changed = (drawn != image).any(-1)
    np.testing.assert_array_equal(changed, edges[0] | edges[1])
    assert (drawn[edges[0]] == outlines.class_colour(0)).all()
    assert (drawn[edges[1] & ~edges[0]] == outlines.class_colour(1)).all()
    assert (image == 90).all()                                # not drawn in place
    np.testing.assert_array_equal(outlines.draw_outlines(image, [np.zeros((4, 6), bool)] * 2), image)


def test_class_colours_are_fixed_distinct_and_never_grey():
    count = 64
    colours = [outlines.class_colour(i) for i in range(count)]
    assert colours == [outlines.class_colour(i) for i in range(count)]
    assert len(set(colours)) == count
    assert all(len(set(c)) > 1 and all(0 <= v <= 255 for v in c) for c in colours)
    assert colours[:len(outlines.PALETTE)] == list(outlines.PALETTE)
