"""Where the CPU of ``--spacing 1,1,1 --intensity ct`` goes, function by function (docs/BENCHMARKS.md
§23, "Where the CPU goes"): one generated CT volume of bench_preprocess's kind (default 512 x 512 x
130 at 0.7 x 0.7 x 3 mm, anisotropic; ``--isotropic``: 512 x 512 x 150 at 0.8 mm) and its mask,
each step timed alone (process CPU, the best of ``--repeat``), and the designs tried against ours:

  decode        the .nii.gz image and mask read back (nibabel: gzip and the array), what every
                conversion pays once and --intensity ct's fingerprint pass a second time
  fingerprint   transforms.images.fingerprint.sample on the decoded pixels and the foreground
  normalize     transforms.images.fingerprint.normalize (clip, z-score, float32)
  resample_image / resample_mask   ours (transforms.images.spacing), and their parts
  floors        what the interpolation alone costs: the spline prefilter (float64, scipy's), the
                order-3 interpolation of prefiltered data, and designs that change the bytes
                (float32 prefilter; separable 1-D order-3 per axis), each with its max abs
                difference from ours

    PYTHONPATH=... .venv/bin/python -m benchmarks.profile_spacing --json /tmp/profile_spacing.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np                                                                       # noqa: E402

from benchmarks.bench_preprocess import _save, _volume                                   # noqa: E402


def cpu(fn, repeat: int):
    """(best process CPU seconds over ``repeat`` calls, the last result)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    return best, result


def _separable(volume: np.ndarray, scale, shape, axes) -> np.ndarray:
    """Design C (bytes differ): order-3 resampling as one 1-D pass per axis of ``axes``, each scipy's
    pipeline along that axis alone (edge pad 12, spline_filter1d in float64, the 4 cubic B-spline
    taps per output voxel gathered with numpy), float64 between the passes, float32 at the end."""
    from scipy import ndimage
    out = volume.astype(np.float64)
    for axis in axes:
        pad = [(0, 0)] * out.ndim
        pad[axis] = (12, 12)
        filtered = ndimage.spline_filter1d(np.pad(out, pad, mode="edge"), 3, axis=axis, output=np.float64,
                                           mode="nearest")
        x = np.arange(shape[axis], dtype=np.float64) * scale[axis] + 12.0
        start = np.floor(x)
        t = x - start
        start = start.astype(np.intp) - 1
        weights = ((1 - t) ** 3 / 6, (3 * t ** 3 - 6 * t ** 2 + 4) / 6, (-3 * t ** 3 + 3 * t ** 2 + 3 * t + 1) / 6,
                   t ** 3 / 6)
        view = [None] * out.ndim
        view[axis] = slice(None)
        acc = None
        for k, w in enumerate(weights):
            term = np.take(filtered, start + k, axis=axis) * w[tuple(view)]
            acc = term if acc is None else acc + term
        out = acc
    return out.astype(np.float32)


def _separable_sparse(volume: np.ndarray, scale, shape, axes) -> np.ndarray:
    """Design D (bytes differ): as :func:`_separable`, each axis' 4 taps a sparse matrix (scipy.sparse,
    compiled) applied to the prefiltered volume with that axis first (4 multiply-adds per output
    voxel and axis, against 64 for a 3-D order-3 spline and 16 for a 2-D one)."""
    from scipy import ndimage, sparse
    out = volume.astype(np.float64)
    for axis in axes:
        pad = [(0, 0)] * out.ndim
        pad[axis] = (12, 12)
        filtered = ndimage.spline_filter1d(np.pad(out, pad, mode="edge"), 3, axis=axis, output=np.float64,
                                           mode="nearest")
        x = np.arange(shape[axis], dtype=np.float64) * scale[axis] + 12.0
        start = np.floor(x)
        t = x - start
        start = start.astype(np.intp) - 1
        weights = np.stack(((1 - t) ** 3 / 6, (3 * t ** 3 - 6 * t ** 2 + 4) / 6,
                            (-3 * t ** 3 + 3 * t ** 2 + 3 * t + 1) / 6, t ** 3 / 6), axis=1)
        columns = start[:, None] + np.arange(4)[None, :]
        rows = np.repeat(np.arange(shape[axis]), 4)
        op = sparse.csr_matrix((weights.reshape(-1), (rows, columns.reshape(-1))),
                               shape=(shape[axis], filtered.shape[axis]))
        moved = np.ascontiguousarray(np.moveaxis(filtered, axis, 0))
        rest = moved.shape[1:]
        out = np.moveaxis((op @ moved.reshape(moved.shape[0], -1)).reshape((shape[axis],) + rest), 0, axis)
    return np.ascontiguousarray(out).astype(np.float32)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isotropic", action="store_true", help="512 x 512 x 150 at 0.8 mm instead")
    parser.add_argument("--slices", type=int, default=None, help="slices (default 130, 150 --isotropic)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import nibabel as nib
    from scipy import ndimage

    from dcm2tfrecord.transforms.images import fingerprint, spacing
    xyz = (0.8, 0.8, 0.8) if args.isotropic else (0.7, 0.7, 3.0)
    depth = args.slices or (150 if args.isotropic else 130)
    spec = {"shape": (depth, 512, 512), "spacing": xyz}
    image, labels = _volume(spec, 0)
    src = tuple(reversed(xyz))                      # (depth, height, width) mm
    target = (1.0, 1.0, 1.0)
    shape = spacing.planned_shape(image.shape, src, target)
    print(f"volume {image.shape[::-1]} (x y z) at {xyz} mm -> {shape[::-1]}; anisotropic "
          f"{spacing.anisotropic(src, target)}", flush=True)
    rows = []

    def row(step, seconds, note=""):
        rows.append({"step": step, "cpu_s": round(seconds, 3), "note": note})
        print(f"  {step:<58} {seconds:7.3f} s  {note}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        _save(os.path.join(tmp, "i", "img.nii.gz"), image, xyz)
        _save(os.path.join(tmp, "l", "lab.nii.gz"), labels, xyz)
        t, _ = cpu(lambda: np.asarray(nib.load(os.path.join(tmp, "i", "img.nii.gz")).dataobj), args.repeat)
        row("decode image (.nii.gz, nibabel)", t)
        t, _ = cpu(lambda: np.asarray(nib.load(os.path.join(tmp, "l", "lab.nii.gz")).dataobj), args.repeat)
        row("decode mask (.nii.gz, nibabel)", t)
    pixels, mask = image[..., None], labels[..., None]
    t, _ = cpu(lambda: fingerprint.sample(pixels, fingerprint.foreground(pixels, mask), "r"), args.repeat)
    row("fingerprint.sample (+ foreground)", t)
    bounds = [(-50.0, 700.0, 60.0, 20.0)]
    t, normed = cpu(lambda: fingerprint.normalize(pixels, bounds), args.repeat)
    row("fingerprint.normalize (clip, z-score)", t)

    t_img, ours = cpu(lambda: spacing.resample_image(normed, src, target, shape), args.repeat)
    row("resample_image (ours, total)", t_img)
    t_mask, ours_mask = cpu(lambda: spacing.resample_mask(mask, src, target, shape), args.repeat)
    row("resample_mask (ours, total, 2 classes)", t_mask)

    vol = normed[..., 0]
    scale = [t_ / s for s, t_ in zip(src, target)]
    aniso = spacing.anisotropic(src, target)
    if aniso:
        def inplane():
            planes = np.empty((vol.shape[0], shape[1], shape[2]), np.float32)
            for d in range(vol.shape[0]):
                planes[d] = spacing._affine(vol[d], scale[1:], shape[1:], 3)
            return planes
        t, planes = cpu(inplane, args.repeat)
        row("  image: in-plane order 3, slice by slice", t)
        t, _ = cpu(lambda: spacing._affine(planes, (scale[0], 1.0, 1.0), shape, 0), args.repeat)
        row("  image: along z, order 0 (3-D affine_transform)", t)
        idx = np.clip(np.floor(np.arange(shape[0], dtype=np.float64) * scale[0] + 0.5), 0,
                      planes.shape[0] - 1).astype(np.intp)
        t, taken = cpu(lambda: np.take(planes, idx, axis=0), args.repeat)
        same = np.array_equal(taken, ours[..., 0])
        row("  design A: along z, order 0 as np.take of slices", t, f"bytes identical: {same}")
        # the parts of the in-plane pass, on all slices
        def pad():
            return [np.pad(vol[d], 12, mode="edge") for d in range(vol.shape[0])]
        t_pad, padded = cpu(pad, 1)
        row("    floor parts: edge pad 12 (scipy's, mode nearest)", t_pad)
        t_f64, filt = cpu(lambda: [ndimage.spline_filter(p, 3, output=np.float64, mode="nearest") for p in padded], 1)
        row("    floor parts: spline prefilter, float64 (scipy's)", t_f64)
        t_int, _ = cpu(lambda: [ndimage.affine_transform(f, np.asarray(scale[1:]), offset=12.0, output_shape=shape[1:],
                                                         order=3, mode="nearest", prefilter=False,
                                                         output=np.float32) for f in filt], 1)
        row("    floor parts: order-3 interpolation of prefiltered slices (16 taps)", t_int)
        t_f32, filt32 = cpu(lambda: [ndimage.spline_filter(p, 3, output=np.float32, mode="nearest") for p in padded], 1)
        def interp32():
            out = np.empty((vol.shape[0], shape[1], shape[2]), np.float32)
            for d, f in enumerate(filt32):
                out[d] = ndimage.affine_transform(f, np.asarray(scale[1:]), offset=12.0, output_shape=shape[1:],
                                                  order=3, mode="nearest", prefilter=False, output=np.float32)
            return out
        t_i32, out32 = cpu(interp32, 1)
        d32 = float(np.abs(np.take(out32, idx, axis=0) - ours[..., 0]).max())
        row("  design B: float32 prefilter + interpolation, in-plane", t_f32 + t_i32 + t_pad,
            f"max abs diff {d32:.2e}, bytes identical: {d32 == 0}")
        t_sep, sep = cpu(lambda: _separable(vol, scale, (vol.shape[0], shape[1], shape[2]), (1, 2)), 1)
        dsep = float(np.abs(np.take(sep, idx, axis=0) - ours[..., 0]).max())
        nsep = int(np.sum(np.take(sep, idx, axis=0) != ours[..., 0]))
        row("  design C: separable 1-D order 3 (rows, then columns; numpy taps)", t_sep,
            f"max abs diff {dsep:.2e}, {nsep} voxels differ")
        t_sp, sp = cpu(lambda: _separable_sparse(vol, scale, (vol.shape[0], shape[1], shape[2]), (1, 2)), 1)
        dsp = float(np.abs(np.take(sp, idx, axis=0) - ours[..., 0]).max())
        nsp = int(np.sum(np.take(sp, idx, axis=0) != ours[..., 0]))
        row("  design D: separable 1-D order 3 (rows, columns; sparse 4-tap matrices)", t_sp,
            f"max abs diff {dsp:.2e}, {nsp} voxels differ")
        # the mask: per class, order 1 in-plane then z nearest
        def mask_inplane():
            out = []
            for value in (1, 2):
                ind = (labels == value).astype(np.float32)
                out.append(np.stack([spacing._affine(ind[d], scale[1:], shape[1:], 1) for d in range(ind.shape[0])]))
            return out
        t, _ = cpu(mask_inplane, 1)
        row("  mask: 2 classes in-plane order 1", t)
        # floor of any tool: one order-3 in-plane resampling of the volume (scipy.ndimage.zoom)
        t, _ = cpu(lambda: ndimage.zoom(vol, (1.0, shape[1] / vol.shape[1], shape[2] / vol.shape[2]), order=3,
                                        mode="nearest", output=np.float32, grid_mode=False), 1)
        row("floor: scipy.ndimage.zoom order 3, in-plane only (3-D call)", t)
    else:
        t_f64, filt = cpu(lambda: ndimage.spline_filter(np.pad(vol, 12, mode="edge"), 3, output=np.float64,
                                                        mode="nearest"), 1)
        row("  image: pad + spline prefilter, float64, 3-D", t_f64)
        t_int, _ = cpu(lambda: ndimage.affine_transform(filt, np.asarray(scale), offset=12.0, output_shape=shape,
                                                        order=3, mode="nearest", prefilter=False,
                                                        output=np.float32), 1)
        row("  image: order-3 interpolation, 3-D (64 taps)", t_int)
        t_sep, sep = cpu(lambda: _separable(vol, scale, shape, (0, 1, 2)), 1)
        dsep = float(np.abs(sep - ours[..., 0]).max())
        nsep = int(np.sum(sep != ours[..., 0]))
        row("  design C: separable 1-D order 3 (z, rows, columns; numpy taps)", t_sep,
            f"max abs diff {dsep:.2e}, {nsep} voxels differ")
        t_sp, sp = cpu(lambda: _separable_sparse(vol, scale, shape, (0, 1, 2)), 1)
        dsp = float(np.abs(sp - ours[..., 0]).max())
        nsp = int(np.sum(sp != ours[..., 0]))
        row("  design D: separable 1-D order 3 (z, rows, columns; sparse 4-tap matrices)", t_sp,
            f"max abs diff {dsp:.2e}, {nsp} voxels differ")
        t, _ = cpu(lambda: ndimage.zoom(vol, [n / o for n, o in zip(shape, vol.shape)], order=3, mode="nearest",
                                        output=np.float32), 1)
        row("floor: scipy.ndimage.zoom order 3, 3-D", t)
    result = {"shape_xyz": list(image.shape[::-1]), "spacing_xyz": list(xyz), "target_shape_xyz": list(shape[::-1]),
              "anisotropic": aniso, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
