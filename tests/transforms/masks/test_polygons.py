"""The scanline polygon fill (transforms/masks/polygons.py) against two independent answers.

- **The definition, by brute force**: every pixel centre tested against every edge in exact
  rational arithmetic (fractions.Fraction): on an edge (zero cross product, within the edge's
  box), or an odd number of edges crossed by the ray to its left (half-open in rows). Written
  here from the rule's words, sharing no code with the product.
- **scikit-image's point-in-polygon** (``grid_points_in_poly``, the rasteriser the product
  used before): for every pixel centre on no contour's path it must give the same even-odd
  answer. On the path it is not a reference: it misses some centres on horizontal edges and
  on two-point polygons (``test_scikit_image_misses_centres_on_some_paths``), which the
  product marks, as C.8.8.6.3 asks.

Polygons: random, self-crossing, several at once (holes, islands, overlaps), with vertices on
pixel centres (contours traced from masks), on half pixels, and anywhere on the 1/256 grid,
partly outside the image.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from skimage.measure import grid_points_in_poly

from dcm2tfrecord.transforms.masks import polygons

S = polygons.SCALE


def _brute_force(shape, polys) -> tuple[np.ndarray, np.ndarray]:
    """(inside an odd number of polygons, on a path), pixel by pixel, in exact arithmetic."""
    odd = np.zeros(shape, bool)
    path = np.zeros(shape, bool)
    for j in range(shape[0]):
        for i in range(shape[1]):
            y, x = j * S, i * S
            for poly in polys:
                pts = [tuple(map(int, p)) for p in poly]
                for (r0, c0), (r1, c1) in zip(pts, pts[1:] + pts[:1]):
                    if (r1 - r0) * (x - c0) == (c1 - c0) * (y - r0) and min(r0, r1) <= y <= max(r0, r1) \
                            and min(c0, c1) <= x <= max(c0, c1):
                        path[j, i] = True
                    if min(r0, r1) <= y < max(r0, r1) and c0 + Fraction((y - r0) * (c1 - c0), r1 - r0) < x:
                        odd[j, i] ^= True
    return odd, path


def _random_case(rng, kind: str):
    shape = (int(rng.integers(1, 13)), int(rng.integers(1, 13)))
    size = max(shape)
    polys = []
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.integers(1, 9))
        if kind == "pixel centres":
            v = rng.integers(-2, size + 2, size=(n, 2)) * S
        elif kind == "half pixels":
            v = rng.integers(-4, 2 * size + 4, size=(n, 2)) * (S // 2)
        else:
            v = rng.integers(-2 * S, (size + 2) * S, size=(n, 2))
        polys.append(v.astype(np.int64))
    return shape, polys


@pytest.mark.parametrize("kind", ["pixel centres", "half pixels", "anywhere"])
def test_the_fill_is_the_definition_and_agrees_with_scikit_image_off_the_path(kind):
    rng = np.random.default_rng(["pixel centres", "half pixels", "anywhere"].index(kind))
    paths = 0
    for _ in range(150):
        shape, polys = _random_case(rng, kind)
        odd, path = _brute_force(shape, polys)
        assert np.array_equal(polygons.fill(shape, polys), odd | path), (shape, [p.tolist() for p in polys])
        theirs = np.zeros(shape, bool)
        for poly in polys:
            theirs ^= grid_points_in_poly(shape, poly / S, binarize=False) == 1
        assert np.array_equal(theirs[~path], odd[~path])
        paths += int(path.sum())
    assert paths > 50 or kind == "anywhere"   # lattice vertices reach the path rule, not only interiors


def test_holes_islands_and_the_image_edge():
    square = lambda lo, hi: np.array([[lo, lo], [lo, hi], [hi, hi], [hi, lo]]) * S  # noqa: E731
    out = polygons.fill((12, 12), [square(-3, 14), square(2, 9), square(4, 7)])
    rows = np.arange(12)
    outer = np.ones((12, 12), bool)
    hole = (rows[:, None] > 2) & (rows[:, None] < 9) & (rows > 2) & (rows < 9)     # its edge stays in
    island = (rows[:, None] >= 4) & (rows[:, None] <= 7) & (rows >= 4) & (rows <= 7)
    assert np.array_equal(out, (outer & ~hole) | island)


def test_degenerate_polygons_draw_their_path_only():
    assert polygons.fill((3, 3), [np.array([[S, S]])]).sum() == 1                  # one point
    line = polygons.fill((5, 5), [np.array([[0, 0], [4 * S, 4 * S]])])             # a diagonal
    assert np.array_equal(line, np.eye(5, dtype=bool))
    assert not polygons.fill((3, 3), [np.array([[S // 2, 0], [S // 2, 2 * S]])]).any()  # between rows
    assert not polygons.fill((0, 4), [np.array([[0, 0], [S, S], [0, S]])]).any()
    assert not polygons.fill((4, 4), []).any()


def test_scikit_image_misses_centres_on_some_paths():
    """Why the brute force, not scikit-image, is the reference on the path: a horizontal edge and
    a two-point polygon through pixel centres that its labels leave out."""
    shape = (6, 18)
    poly = np.array([[12, 0], [-2, 14], [12, 2], [11, 7], [1, 5], [1, 12]]) * S
    two = np.array([[1, 17], [-1, 11]]) * S                                       # through (0, 14)
    for polys, centre in (([poly], (1, 11)), ([two], (0, 14))):
        _, path = _brute_force(shape, polys)
        assert path[centre] and polygons.fill(shape, polys)[centre]
        assert grid_points_in_poly(shape, polys[0] / S, binarize=False)[centre] == 0
