"""Fuzz inputs: seeds (pydicom's test files, generated PNG and JPEG), the mutations, a
reproducible ``Case``, and the inputs fuzzing found (transforms/records/test_fuzz.py
holds them to the contract; transforms/records/test_probe_equivalence.py and
transforms/dicom/test_record_elements.py probe a derandomized corpus of them; tools/fuzz_long.py
runs the same mutations for as long as asked)."""
from __future__ import annotations

import dataclasses
import functools
import io
import os
import random
import struct
import zlib
from typing import Optional

import numpy as np
from hypothesis import strategies as st
from PIL import Image

from tests.support import pydicom_test_files, synthetic_image


# Small enough that a mutated header claiming a huge image is refused before a
# large allocation; the classification contract does not depend on the value.
FUZZ_MAX_PIXELS = 1 << 22


SEED_MAX_BYTES = 64 * 1024   # seeds above this make the bounded run slow, not better


_NOT_DICOM = {".txt", ".json", ".icc", ".dump", ".gz", ".py"}


def _dicom_seeds(max_bytes: Optional[int]) -> dict[str, bytes]:
    root = pydicom_test_files()
    seeds = {}
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.splitext(name)[1].lower() in _NOT_DICOM or name.upper().startswith("README"):
                continue
            if max_bytes is not None and os.path.getsize(path) > max_bytes:
                continue
            with open(path, "rb") as handle:
                seeds["dicom/" + os.path.relpath(path, root)] = handle.read()
    return seeds


def _encoded(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def _png_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(11)
    gray, rgb = synthetic_image(rng, 24, 20, 1), synthetic_image(rng, 18, 22, 3)
    rgba = synthetic_image(rng, 16, 16, 4)
    gray16 = synthetic_image(rng, 20, 17, 1, dtype="uint16")
    return {
        "png/gray8": _encoded(Image.fromarray(gray, "L"), "PNG"),
        "png/rgb8": _encoded(Image.fromarray(rgb, "RGB"), "PNG"),
        "png/rgba8": _encoded(Image.fromarray(rgba, "RGBA"), "PNG"),
        "png/gray16": _encoded(Image.fromarray(gray16), "PNG"),
        "png/palette": _encoded(Image.fromarray(rgb, "RGB").convert("P"), "PNG"),
        "png/bilevel": _encoded(Image.fromarray(gray, "L").convert("1"), "PNG"),
        "png/gray_alpha": _encoded(Image.fromarray(gray, "L").convert("LA"), "PNG"),
        "png/interlaced": _encoded(Image.fromarray(rgb, "RGB"), "PNG", interlace=1),
    }


def _jpeg_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(12)
    gray, rgb = synthetic_image(rng, 24, 32, 1), synthetic_image(rng, 32, 24, 3)
    return {
        "jpeg/gray": _encoded(Image.fromarray(gray, "L"), "JPEG", quality=90),
        "jpeg/rgb": _encoded(Image.fromarray(rgb, "RGB"), "JPEG", quality=90),
        "jpeg/rgb_444": _encoded(Image.fromarray(rgb, "RGB"), "JPEG", quality=75, subsampling=0),
        "jpeg/progressive": _encoded(Image.fromarray(rgb, "RGB"), "JPEG", progressive=True),
        "jpeg/optimized": _encoded(Image.fromarray(gray, "L"), "JPEG", optimize=True, quality=50),
        "jpeg/cmyk": _encoded(Image.fromarray(rgb, "RGB").convert("CMYK"), "JPEG"),
    }


@functools.lru_cache(maxsize=None)
def seeds(family: str, max_bytes: Optional[int] = SEED_MAX_BYTES) -> dict[str, bytes]:
    """Seed inputs by family: ``dicom``, ``png``, ``jpeg`` or ``all``."""
    if family == "all":
        return {**seeds("dicom", max_bytes), **seeds("png"), **seeds("jpeg")}
    return {"dicom": lambda: _dicom_seeds(max_bytes), "png": _png_seeds, "jpeg": _jpeg_seeds}[family]()


INTERESTING = (0, 1, 2, 7, 8, 12, 15, 16, 17, 31, 32, 33, 63, 64, 127, 128, 255, 256, 0x7FFF,
               0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, (1 << 64) - 1)


# Image Pixel module and friends (PS3.3 C.7.6.3), file meta, encapsulation items.
DICOM_TAGS = {
    "TransferSyntaxUID": (0x0002, 0x0010), "FileMetaGroupLength": (0x0002, 0x0000),
    "SamplesPerPixel": (0x0028, 0x0002), "PhotometricInterpretation": (0x0028, 0x0004),
    "PlanarConfiguration": (0x0028, 0x0006), "NumberOfFrames": (0x0028, 0x0008),
    "Rows": (0x0028, 0x0010), "Columns": (0x0028, 0x0011), "BitsAllocated": (0x0028, 0x0100),
    "BitsStored": (0x0028, 0x0101), "HighBit": (0x0028, 0x0102),
    "PixelRepresentation": (0x0028, 0x0103), "RescaleIntercept": (0x0028, 0x1052),
    "RescaleSlope": (0x0028, 0x1053), "RedPaletteDescriptor": (0x0028, 0x1101),
    "RedPaletteData": (0x0028, 0x1201), "ModalityLUTSequence": (0x0028, 0x3000),
    "LUTDescriptor": (0x0028, 0x3002), "PixelData": (0x7FE0, 0x0010),
    "Item": (0xFFFE, 0xE000), "SequenceDelimiter": (0xFFFE, 0xE0DD),
}


DICOM_STRINGS = (
    "1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2", "1.2.840.10008.1.2.5",
    "1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.57",
    "1.2.840.10008.1.2.4.70", "1.2.840.10008.1.2.4.80", "1.2.840.10008.1.2.4.90",
    "1.2.840.10008.1.2.1.99", "1.2.3.4", "MONOCHROME1", "MONOCHROME2", "RGB", "YBR_FULL",
    "YBR_FULL_422", "PALETTE COLOR", "", "0", "1", "-1", "3", "65536", "1e308", "-1e308", "NaN",
    "inf", "0.5", "abc", "\\", "1\\2", "\x00\x00", "\xff\xfe",
)


# PNG IHDR fields: (offset from file start, width in bytes).
PNG_IHDR_FIELDS = {"width": (16, 4), "height": (20, 4), "bit_depth": (24, 1), "color_type": (25, 1),
                   "compression": (26, 1), "filter": (27, 1), "interlace": (28, 1)}


def _element_at(data: bytes, tag: tuple[int, int]) -> Optional[tuple[int, int, int, int]]:
    """(value offset, value length, length field offset, its width) of the first ``tag``, LE only."""
    at = data.find(struct.pack("<HH", *tag))
    if at < 0 or at + 8 > len(data):
        return None
    vr = data[at + 4:at + 6]
    if vr.isalpha() and vr.isupper():
        if vr in (b"OB", b"OW", b"OF", b"SQ", b"UT", b"UN", b"OD", b"OL", b"OV", b"UC", b"UR"):
            if at + 12 > len(data):
                return None
            return at + 12, struct.unpack_from("<I", data, at + 8)[0], at + 8, 4
        return at + 8, struct.unpack_from("<H", data, at + 6)[0], at + 6, 2
    return at + 8, struct.unpack_from("<I", data, at + 4)[0], at + 4, 4


def _fix_png_crcs(data: bytes) -> bytes:
    """Recomputes every chunk CRC that the chunk layout still lets us find."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return data
    out, at = bytearray(data), 8
    while at + 12 <= len(out):
        length = struct.unpack_from(">I", out, at)[0]
        end = at + 8 + length
        if end + 4 > len(out):
            break
        struct.pack_into(">I", out, end, zlib.crc32(bytes(out[at + 4:end])) & 0xFFFFFFFF)
        at = end + 4
    return bytes(out)


def _put_int(buf: bytearray, pos: int, value: int, width: int, big: bool) -> None:
    raw = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big" if big else "little")
    buf[pos:pos + width] = raw[:max(0, len(buf) - pos)]


def apply_mutation(data: bytes, op: tuple, donors: list[bytes]) -> bytes:
    """One mutation; positions are taken modulo the input length."""
    if not data:
        return data
    kind, args = op[0], op[1:]
    n = len(data)
    buf = bytearray(data)
    if kind == "flip":
        pos, bit = args
        buf[pos % n] ^= 1 << bit
    elif kind == "byte":
        pos, value = args
        buf[pos % n] = value
    elif kind == "int":
        pos, value, width, big = args
        _put_int(buf, pos % n, value, width, big)
    elif kind == "truncate":
        del buf[args[0] % n:]
    elif kind == "insert":
        pos, blob = args
        buf[pos % (n + 1):pos % (n + 1)] = blob
    elif kind == "delete":
        pos, length = args
        del buf[pos % n:pos % n + length]
    elif kind == "repeat":
        pos, length, times = args
        chunk = bytes(buf[pos % n:pos % n + length])
        buf[pos % n:pos % n] = chunk * (times - 1)
    elif kind == "splice":
        donor, cut = donors[args[0] % len(donors)], args[1]
        cut = cut % (min(n, len(donor)) + 1)
        buf = bytearray(donor[:cut]) + buf[cut:]
    elif kind == "dicom_int":
        name, delta, value, width = args
        found = _element_at(data, DICOM_TAGS[name])
        if found is not None:
            value_at = found[0]
            if value_at + delta < n:
                _put_int(buf, value_at + delta, value, width, False)
    elif kind == "dicom_length":
        name, value = args
        found = _element_at(data, DICOM_TAGS[name])
        if found is not None:
            _, _, length_at, width = found
            _put_int(buf, length_at, value, width, False)
    elif kind == "dicom_string":
        name, text, resize = args
        found = _element_at(data, DICOM_TAGS[name])
        if found is not None:
            value_at, length, length_at, width = found
            length = min(length, n - value_at)   # 0xFFFFFFFF: undefined length
            raw = text.encode("latin-1")
            if len(raw) % 2:
                raw += b"\x00" if name == "TransferSyntaxUID" else b" "
            if resize:
                buf[value_at:value_at + length] = raw
                _put_int(buf, length_at, len(raw), width, False)
            else:
                buf[value_at:value_at + length] = (raw + b" " * length)[:length]
    elif kind == "png_field":
        name, value = args
        pos, width = PNG_IHDR_FIELDS[name]
        if pos + width <= n:
            _put_int(buf, pos, value, width, True)
            buf = bytearray(_fix_png_crcs(bytes(buf)))
    elif kind == "png_crc":
        buf = bytearray(_fix_png_crcs(bytes(buf)))
    else:
        raise ValueError(f"unknown mutation {kind!r}")
    return bytes(buf)


@dataclasses.dataclass(frozen=True)
class Case:
    """A reproducible fuzz input: a seed, a file name, and the mutations applied in order."""
    seed: str
    name: str
    mutations: tuple

    def build(self) -> bytes:
        pool = seeds("all")
        donors = [pool[k] for k in sorted(pool)]
        data = _seed_bytes(self.seed)
        for op in self.mutations:
            data = apply_mutation(data, op, donors)
        return data


def _seed_bytes(name: str) -> bytes:
    family = name.split("/", 1)[0]
    found = seeds(family).get(name)
    return found if found is not None else seeds(family, None)[name]


_POS = st.one_of(st.integers(0, 1023), st.integers(0, 1 << 31))   # headers, or anywhere


_ANYWHERE = st.integers(0, 1 << 31)                                  # a cut in a header empties a file


_BYTE_OPS = st.one_of(
    st.tuples(st.just("flip"), _POS, st.integers(0, 7)),
    st.tuples(st.just("byte"), _POS, st.integers(0, 255)),
    st.tuples(st.just("int"), _POS, st.sampled_from(INTERESTING), st.sampled_from((1, 2, 4, 8)),
              st.booleans()),
    st.tuples(st.just("truncate"), _ANYWHERE),
    st.tuples(st.just("insert"), _POS, st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), _POS, st.integers(1, 512)),
    st.tuples(st.just("repeat"), _POS, st.integers(1, 256), st.integers(2, 6)),
    st.tuples(st.just("splice"), st.integers(0, 1 << 16), _POS),
)


_DICOM_OPS = st.one_of(
    st.tuples(st.just("dicom_int"), st.sampled_from(sorted(DICOM_TAGS)), st.integers(0, 8),
              st.sampled_from(INTERESTING), st.sampled_from((1, 2, 4))),
    st.tuples(st.just("dicom_length"), st.sampled_from(sorted(DICOM_TAGS)), st.sampled_from(INTERESTING)),
    st.tuples(st.just("dicom_string"), st.sampled_from(sorted(DICOM_TAGS)), st.sampled_from(DICOM_STRINGS),
              st.booleans()),
)


_PNG_OPS = st.one_of(
    st.tuples(st.just("png_field"), st.sampled_from(sorted(PNG_IHDR_FIELDS)), st.sampled_from(INTERESTING)),
    st.tuples(st.just("png_crc")),
)


FAMILY_OPS = {"dicom": st.one_of(_BYTE_OPS, _DICOM_OPS, _DICOM_OPS),
              "png": st.one_of(_BYTE_OPS, _PNG_OPS), "jpeg": _BYTE_OPS}


FAMILY_NAMES = {"dicom": ("x.dcm", "x.dcm", "x", "x.IMA", "x.png"),
                "png": ("x.png", "x.png", "x.jpg", "x.dcm", "x"),
                "jpeg": ("x.jpg", "x.jpeg", "x.png", "x.dcm")}


def cases(family: str) -> st.SearchStrategy[Case]:
    return st.builds(Case, seed=st.sampled_from(sorted(seeds(family))),
                     name=st.sampled_from(FAMILY_NAMES[family]),
                     mutations=st.lists(FAMILY_OPS[family], min_size=1, max_size=4).map(tuple))


def random_case(rng, family: str, max_bytes: Optional[int] = SEED_MAX_BYTES) -> Case:
    """The same kinds of mutation as ``cases``, drawn with a plain ``random.Random`` (long runs)."""
    def pos():
        return rng.randrange(1024) if rng.random() < 0.5 else rng.randrange(1 << 31)

    def byte_op():
        kind = rng.choice(("flip", "byte", "int", "truncate", "insert", "delete", "repeat", "splice"))
        return {
            "flip": lambda: (kind, pos(), rng.randrange(8)),
            "byte": lambda: (kind, pos(), rng.randrange(256)),
            "int": lambda: (kind, pos(), rng.choice(INTERESTING), rng.choice((1, 2, 4, 8)),
                            rng.random() < 0.5),
            "truncate": lambda: (kind, rng.randrange(1 << 31)),
            "insert": lambda: (kind, pos(), rng.randbytes(rng.randint(1, 64))),
            "delete": lambda: (kind, pos(), rng.randint(1, 512)),
            "repeat": lambda: (kind, pos(), rng.randint(1, 256), rng.randint(2, 6)),
            "splice": lambda: (kind, rng.randrange(1 << 16), pos()),
        }[kind]()

    def family_op():
        if family == "dicom":
            kind, tag = rng.choice(("dicom_int", "dicom_length", "dicom_string")), rng.choice(sorted(DICOM_TAGS))
            return {"dicom_int": lambda: (kind, tag, rng.randint(0, 8), rng.choice(INTERESTING),
                                          rng.choice((1, 2, 4))),
                    "dicom_length": lambda: (kind, tag, rng.choice(INTERESTING)),
                    "dicom_string": lambda: (kind, tag, rng.choice(DICOM_STRINGS), rng.random() < 0.5)}[kind]()
        if family == "png" and rng.random() < 0.8:
            return ("png_field", rng.choice(sorted(PNG_IHDR_FIELDS)), rng.choice(INTERESTING))
        return ("png_crc",) if family == "png" else byte_op()

    ops = tuple(family_op() if rng.random() < 0.5 else byte_op() for _ in range(rng.randint(1, 4)))
    return Case(seed=rng.choice(sorted(seeds(family, max_bytes))), name=rng.choice(FAMILY_NAMES[family]),
                mutations=ops)


# Inputs the long fuzz run found escaping classification (minimized; each line is what it
# raised at the time, and where). They must now end clean or classified like any other.
FOUND_BY_FUZZING = [
    # NotImplementedError (pydicom: unknown VR, raised when an element is first read) from
    # ds.get("SOPClassUID") in probe._probe_dicom ...
    Case(seed="png/rgba8", name="x", mutations=(("splice", 15961, 399),)),
    # ... from ds.get("PhotometricInterpretation") in spec.value_dtype_and_channels ...
    Case(seed="dicom/MR_small_jp2klossless.dcm", name="x.IMA",
         mutations=(("dicom_int", "SamplesPerPixel", 7, 32768, 1),)),
    # ... from ds["PixelData"] in integrity.check_native_length ...
    Case(seed="dicom/SC_rgb_jls_lossy_sample.dcm", name="x.dcm", mutations=(("flip", 555, 6),)),
    # ... and from ds.get("Modality") in spec.modality_dtype
    Case(seed="dicom/CT_small.dcm", name="x.dcm", mutations=(("byte", 663, 108),)),
    # TypeError: len(None) in integrity.check_native_length (Pixel Data of length 0)
    Case(seed="dicom/dicomdirtests/98892003/MR2/6935", name="x.dcm",
         mutations=(("dicom_length", "PixelData", 0),)),
    # pyo3 PanicException (a BaseException) from pylibjpeg-rle on a corrupt RLE segment
    Case(seed="dicom/rtdose_rle.dcm", name="x", mutations=(("byte", 1270620142, 159),)),
    # ValueError: cannot reshape (2 frames decoded, header says 1) in dicom_pixels.to_record_array
    Case(seed="dicom/SC_rgb_rle_16bit_2frame.dcm", name="x.dcm",
         mutations=(("dicom_string", "NumberOfFrames", "1", True),)),
    # ValueError: cannot reshape array of size 1024 into (1,16,16,1) in dicom_pixels.to_record_array
    Case(seed="dicom/SC_jpeg_no_color_transform.dcm", name="x.dcm",
         mutations=(("splice", 10624, 827385759), ("dicom_length", "PixelData", 4294967295))),
    # found by the shape oracle: a stored -32768 minus the intercept 1024 leaves int16, so the
    # slice decodes to int32 where the probe planned int16 (now decoded_size_mismatch)
    Case(seed="dicom/CT_small.dcm", name="x.dcm", mutations=(("dicom_int", "PixelData", 0, 32768, 2),)),
    # Columns replaced by text (read as US 11825) over a 256-wide JPEG codestream: the writer
    # refuses it as decoded_size_mismatch (the oracle wrongly called it a shape bug before
    # checking sizes)
    Case(seed="dicom/SC_jpeg_no_color_transform.dcm", name="x.dcm",
         mutations=(("dicom_string", "Columns", "1.2.840.10008.1.2", False),)),
]


# Inputs whose decoding never returned: pydicom's get_j2k_parameters loops forever on a JP2
# box of length 0. dicom_pixels.check_jp2_boxes now rejects them up front as decode_error.
# Run in a child process, so that a regression (a stuck decoder thread spinning after the
# timeout) cannot slow every later test.
HANGS_FOUND_BY_FUZZING = [
    Case(seed="dicom/GDCMJ2K_TextGBR.dcm", name="x", mutations=(("delete", 899, 161), ("splice", 615, 53))),
]


# The derandomized corpus of mutated DICOM headers the probe tests run through
# (test_probe_equivalence, test_needed): the inputs fuzzing found, then FUZZ_CASES drawn.
FUZZ_CASES = 600


def _fuzz_corpus() -> list[tuple[str, bytes]]:
    rng = random.Random(20240611)
    cases = list(FOUND_BY_FUZZING)
    cases += [random_case(rng, "dicom") for _ in range(FUZZ_CASES)]
    out = []
    for i, case in enumerate(cases):
        try:
            data = case.build()
        except Exception:
            continue
        if data:
            out.append((f"{i}/{case.name}", data))
    return out
