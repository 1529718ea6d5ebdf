"""Split names and shard names: every name convert accepts, verify and the reader read back.

A shard of a plain dataset is ``{split}-{i}-of-{n}``, of a version
``{split}-v{NNNN}-{i}-of-{n}``; a split name ending like ``-v0001`` would make the
two read alike, so dataset/names.py refuses it wherever a split name is checked
(--splits, a --split_column value, the shard writer). The properties below run
over generated names built from the fragments that could confuse the parser.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.pipeline import cli
from tests.support import run_convert, write_png_archive
from dcm2tfrecord.transforms.splits.assign import SplitSpecError, parse_splits

FRAGMENTS = ["a", "Z", "0", "7", "_", "-", ".", "=", "+", "-v", "v", "0001", "12345", "-00001",
             "-of-", "00002", ".tfrecord", ".gz", ".idx", "-v0001", "-v12345"]
NAMES = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join)


def _accepted(name: str) -> bool:
    try:
        names.check_component(name, "--splits")
    except names.BadName:
        return False
    return True


@settings(max_examples=600, deadline=None, database=None, derandomize=True)
@given(name=NAMES, index=st.integers(0, 99998), extra=st.integers(1, 5), gzip=st.booleans(),
       version=st.sampled_from(["", "0001", "0002", "0100", "12345"]))
def test_every_accepted_split_name_parses_back_from_its_shard_names(name, index, extra, gzip, version):
    count = min(index + extra, 99999)
    if not _accepted(name):
        with pytest.raises(names.BadName):
            names.shard_file_name(name, index, count)
        return
    compression = "gzip" if gzip else "none"
    file = names.shard_file_name(name, index, count, names.version_tag(version), compression)
    parsed = names.parse_shard_name(file)
    assert (parsed.split, parsed.index, parsed.num_shards, parsed.version, parsed.compression, parsed.parent) == (
        name, index, count, version, compression, "")
    assert parsed.file == file
    if version:   # listed by a later version as ../NNNN/<file>
        reused = names.parse_shard_name(names.reused_file(version, file))
        assert (reused.split, reused.version, reused.parent) == (name, version, version)


@pytest.mark.parametrize("name", ["fold-v0001", "a-v12345", "x.y-v0000", "train-00001-of-00002-v0003"])
def test_split_names_ending_like_a_version_tag_are_refused_everywhere(name):
    with pytest.raises(names.BadName, match="ends like a version tag"):
        names.check_component(name, "--splits")
    with pytest.raises(SplitSpecError, match="ends like a version tag"):
        parse_splits(f"{name}=1.0")
    with pytest.raises(names.BadName):
        names.shard_file_name(name, 0, 1)


@pytest.mark.parametrize("name", ["fold-v1", "fold-v001", "fold-v0001x", "fold_v0001", "v0001",
                                  "fold-V0001", "a-v0001-b"])
def test_names_that_only_look_close_are_accepted(name):
    assert names.check_component(name, "--splits") == name


def test_a_split_name_holding_an_equals_sign_can_be_given_in_splits():
    assert parse_splits("a=b=0.5,c=0.5") == (("a=b", 0.5), ("c", 0.5))
    with pytest.raises(SplitSpecError, match="not a number"):
        parse_splits("train=0.5=,test=0.5")


def test_the_cli_refuses_a_version_like_split_name_before_any_work(tmp_path, capsys):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    code = cli.main(["convert", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                     "--id_salt", "s", "--splits", "fold-v0001=1.0"])
    assert code == 2
    assert "'fold-v0001' ends like a version tag" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    root = tmp_path_factory.mktemp("names") / "in"
    write_png_archive(root, 8, 8, 8)
    return root


SPLIT_SETS = st.lists(NAMES.filter(_accepted), min_size=3, max_size=5, unique=True)


@settings(max_examples=2, deadline=None, database=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],   # a failing conversion is not worth shrinking
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(split_names=SPLIT_SETS)
def test_convert_and_verify_agree_for_generated_split_names(pngs, tmp_path_factory, split_names):
    """A real conversion into generated split names, plain and as an --incremental version
    (whose shard names carry -v0001): verify passes both, and the reader reads them."""
    spec = ",".join(f"{n}={1 / len(split_names)!r}" for n in split_names[:-1])
    spec += f",{split_names[-1]}={1 - sum(1 / len(split_names) for _ in split_names[:-1])!r}"
    out = tmp_path_factory.mktemp("out")
    shards = dict(target_shard_mb=0.001, min_shard_mb=0.0005, max_shard_mb=1.0, splits=spec)
    run_convert(pngs, out / "plain", **shards)
    report = verify_dataset(str(out / "plain"))
    assert report.ok, (split_names, report.problems)
    info = reader.info(str(out / "plain"))
    assert set(info["splits"]) <= set(split_names) and info["counts"]["records"] == 8
    first = sorted(info["splits"])[0]      # the reader reads a generated name
    assert info.num_records(first) == sum(1 for _ in reader.load(
        str(out / "plain"), split=first, batch_size=1, shuffle=False).unbatch())
    run_convert(pngs, out / "root", incremental=True, **shards)
    report = verify_dataset(str(out / "root"))
    assert report.ok, (split_names, report.problems)
    versioned = reader.info(str(out / "root"))
    assert versioned["counts"]["records"] == 8
    assert {s: e["num_records"] for s, e in versioned["splits"].items()} == {
        s: e["num_records"] for s, e in info["splits"].items()}
