"""Planar polygons filled on a pixel grid, exactly, in time linear in their rows and edges.

``fill`` answers, for every pixel centre (j, i) of a ``rows x columns`` grid, the question
PS3.3 C.8.8.6.3 asks of an RTSTRUCT ROI's contours on one image: is the centre on the path of
any contour (a vertex or an edge: "Points in space lying along the path defined by the contour
are considered to be part of the ROI"), or inside an odd number of them (the even-odd rule,
which is the XOR of CLOSEDPLANAR_XOR contours and of nested CLOSED_PLANAR ones: a hole, an
island in the hole)? tests/transforms/masks/test_polygons.py checks it, pixel for pixel on
random, self-crossing, nested and pixel-aligned polygons, against that definition evaluated by
brute force in exact rationals, and against scikit-image's point-in-polygon labels
(``skimage.measure.grid_points_in_poly(..., binarize=False)``) off the path; on the path
scikit-image misses some centres (on horizontal edges, on two-point polygons) that this marks.

Why not scikit-image itself: it tests each pixel of a polygon's bounding box against each of
its edges, O(box pixels x edges): a structure set of 10 ROIs on a 200-slice CT took 44 s of
CPU, against ~4 s to convert the images (docs/BENCHMARKS.md, "11. Masks"). OpenCV's
``fillPoly`` is fast but rounds
vertex rows to whole pixels and draws each edge as a line, so it marks pixels whose centres lie
up to a pixel outside (a 14 mm circle on 0.7 mm pixels loses 3 % of Dice); Pillow's polygon
rounds every vertex to a whole pixel.

The method: a scanline per pixel row. Coordinates are fixed point, integers in units of
1/``SCALE`` pixel (callers snap them there: transforms.masks.rtstruct), so every test below is
exact integer arithmetic, no rounding anywhere:

- **inside**: an edge from (r0, c0) to (r1, c1) crosses row j when min(r0, r1) <= j < max(r0,
  r1) (half-open, so a vertex between a rising and a falling edge counts once, a peak zero or
  two times), at column x = c0 + (j - r0)(c1 - c0)/(r1 - r0); it toggles the parity of every
  pixel centre strictly right of x. A row's parity is the running XOR of its toggles.
  Horizontal edges cross no row.
- **on the path**: a pixel centre (j, i) lies on an edge when j is within the edge's closed row
  range and x = i exactly (the division's remainder is zero), or, for a horizontal edge on row
  j, when i is within its closed column range.

Pure numpy; no Beam, no files.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

SCALE = 256                      # fixed-point units per pixel


def _edges(polygons: Sequence[np.ndarray]) -> np.ndarray:
    """[e, 4] int64 (r0, c0, r1, c1) of every polygon's edges, closing edges included."""
    parts = []
    for polygon in polygons:
        points = np.asarray(polygon, dtype=np.int64).reshape(-1, 2)
        if len(points):
            parts.append(np.concatenate([points, np.roll(points, -1, axis=0)], axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, 4), np.int64)


def _rows_of(low: np.ndarray, high: np.ndarray, rows: int, closed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(edge index, row j) for each row j with low <= j * SCALE < high (``closed``: <= high),
    0 <= j < rows, of every edge."""
    first = np.maximum(-(-low // SCALE), 0)                          # ceil(low / SCALE)
    last = high // SCALE if closed else -(-high // SCALE) - 1        # floor / ceil - 1
    last = np.minimum(last, rows - 1)
    counts = np.maximum(last - first + 1, 0)
    edge = np.repeat(np.arange(len(low)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return edge, first[edge] + offsets


def fill(shape: tuple[int, int], polygons: Sequence[np.ndarray]) -> np.ndarray:
    """bool [rows, columns]: the pixel centres on any polygon's path or inside an odd number of
    them (module docstring). Each polygon is [n, 2] integer (row, column) vertices in 1/SCALE
    pixels, closed implicitly; a polygon of one or two points has only a path."""
    rows, columns = int(shape[0]), int(shape[1])
    out = np.zeros((rows, columns), bool)
    edges = _edges(polygons)
    if not len(edges) or rows <= 0 or columns <= 0:
        return out
    r0, c0, r1, c1 = edges.T
    slanted = r0 != r1
    # inside: half-open row ranges of the non-horizontal edges
    e, j = _rows_of(np.minimum(r0, r1)[slanted], np.maximum(r0, r1)[slanted], rows, closed=False)
    sr0, sc0, sr1, sc1 = (a[slanted][e] for a in (r0, c0, r1, c1))
    num = sc0 * (sr1 - sr0) + (j * SCALE - sr0) * (sc1 - sc0)       # x = num / den, in 1/SCALE pixels
    den = (sr1 - sr0) * SCALE                                        # x / SCALE in pixels
    flip = den < 0
    num, den = np.where(flip, -num, num), np.where(flip, -den, den)
    start = np.clip(num // den + 1, 0, columns)                      # first centre strictly right of x
    toggles = np.zeros((rows, columns + 1), np.uint8)
    np.bitwise_xor.at(toggles.reshape(-1), j * (columns + 1) + start, 1)
    out |= np.bitwise_xor.accumulate(toggles, axis=1)[:, :columns].view(bool)
    # on the path: slanted edges' closed row ranges, where the crossing is a whole column
    e, j = _rows_of(np.minimum(r0, r1)[slanted], np.maximum(r0, r1)[slanted], rows, closed=True)
    sr0, sc0, sr1, sc1 = (a[slanted][e] for a in (r0, c0, r1, c1))
    num = sc0 * (sr1 - sr0) + (j * SCALE - sr0) * (sc1 - sc0)
    den = (sr1 - sr0) * SCALE
    exact = num % den == 0                                           # den's sign: remainder 0 either way
    i = num[exact] // den[exact]
    keep = (i >= 0) & (i < columns)
    out[j[exact][keep], i[keep]] = True
    # on the path: horizontal edges on a pixel row, their closed column ranges
    flat = ~slanted & (r0 % SCALE == 0) & (r0 >= 0) & (r0 < rows * SCALE)
    row = r0[flat] // SCALE
    low = np.maximum(-(-np.minimum(c0, c1)[flat] // SCALE), 0)
    high = np.minimum(np.maximum(c0, c1)[flat] // SCALE, columns - 1)
    edge, i = _rows_of(low * SCALE, high * SCALE, columns, closed=True)   # each edge's columns low..high
    out[row[edge], i] = True
    return out
