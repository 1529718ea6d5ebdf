"""reader.load's options are one ReadOptions value: keywords build it, ``options=`` takes it
whole, and both read the same batches."""
from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.reader import ReadOptions

from tests.support.reader_datasets import _write_png_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("read_options") / "ds"
    rng = np.random.default_rng(0)
    _write_png_dataset(root, [rng.integers(0, 255, (4, 4, 1), dtype=np.uint8) for _ in range(7)])
    return str(root)


def _batches(ds):
    return [(images.tolist(), labels.tolist()) for images, labels in reader.as_numpy(ds)]


def test_read_options_is_frozen_exported_and_imports_no_tensorflow():
    opts = ReadOptions(split="train", batch_size=4, seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 4
    assert hash(opts) == hash(ReadOptions(split="train", batch_size=4, seed=3))
    code = ("import sys; from dcm2tfrecord.reader import ReadOptions; ReadOptions(seed=1); "
            "assert 'tensorflow' not in sys.modules and 'apache_beam' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_defaults_are_loads_documented_ones():
    defaults = ReadOptions()
    assert (defaults.split, defaults.batch_size, defaults.shuffle, defaults.output) == ("train", 32, True, "tuple")
    documented = inspect.getdoc(reader.load)
    missing = [f.name for f in dataclasses.fields(ReadOptions)
               if f.name not in ("split", "batch_size", "dtype", "scale", "drop_remainder", "output") and
               f"``{f.name}``" not in documented]
    assert missing == []


@pytest.mark.parametrize("bad,error", [({"output": "list"}, ValueError), ({"batch_size": 0}, ValueError),
                                       ({"start_step": -1}, ValueError), ({"start_step": 1.5}, TypeError)])
def test_bad_options_are_refused_when_made(bad, error):
    with pytest.raises(error):
        ReadOptions(**bad)
    with pytest.raises(error):
        reader.load("/no/such/dataset", **bad)        # before any file is read


def test_keywords_options_and_both_read_the_same_batches(dataset):
    by_keywords = _batches(reader.load(dataset, split="train", batch_size=3, shuffle=False))
    positional = _batches(reader.load(dataset, "train", 3, shuffle=False))
    opts = ReadOptions(split="train", batch_size=3, shuffle=False)
    by_options = _batches(reader.load(dataset, options=opts))
    assert by_keywords == positional == by_options and len(by_options) == 3
    overridden = _batches(reader.load(dataset, options=opts, batch_size=7))   # keywords change fields
    assert len(overridden) == 1 and overridden[0][1] == list(range(7))


def test_seeded_resumable_reads_agree_through_options(dataset):
    keywords = dict(batch_size=2, seed=5, resumable=True, start_step=1)
    assert _batches(reader.load(dataset, **keywords)) == _batches(
        reader.load(dataset, options=ReadOptions(**keywords)))


def test_an_unknown_keyword_is_a_type_error(dataset):
    with pytest.raises(TypeError, match="shufle"):
        reader.load(dataset, shufle=False)


@pytest.mark.parametrize("repeat", [True, 3, False])
def test_a_start_step_past_a_64_bit_count_is_refused_in_one_line_naming_it(dataset, repeat):
    """Issue 35: start_step=10**30 with repeat=True was Python's OverflowError from deep in
    tf.data. Refused when the options are made, naming start_step and its largest value; that
    largest value itself reads (7 records, batches of 2)."""
    keywords = dict(batch_size=2, seed=5, resumable=True, repeat=repeat)
    for huge in (10**30, 1 << 63):
        with pytest.raises(ValueError, match=r"^start_step must be at most \d+ .*, not \d+$") as caught:
            ReadOptions(start_step=huge, **keywords)
        assert "\n" not in str(caught.value)
        with pytest.raises(ValueError, match="start_step"):
            reader.load("/no/such/dataset", start_step=huge, **keywords)     # before any file is read
    most = int(re.match(r"start_step must be at most (\d+)", str(caught.value)).group(1))
    assert most == ((1 << 63) - 2) // 2 if repeat is True else ((1 << 63) - 1) // int(repeat or 1) - 1
    with pytest.raises(ValueError, match="start_step"):
        ReadOptions(start_step=most + 1, **keywords)
    images, labels = next(iter(reader.as_numpy(reader.load(dataset, start_step=most, **keywords))))
    assert len(labels) in (1, 2) and images.shape[1:] == (4, 4, 1)
