"""Salt files (pipeline/options/salt.py, transforms/settings.py read_salt_file and with_salt; issue 35, minor).

A file of only invisible characters is a constant anyone can guess, not a secret; a byte order
mark before the salt changed every id; a file changed early in a run keyed the record ids with
its new salt and dataset.json's locations with the old one.
"""
from __future__ import annotations

import json
import os

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline import convert
from dcm2tfrecord.pipeline.options.arguments import parse_convert
from dcm2tfrecord.pipeline.options.rules import check_options
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.transforms.settings import DecodeSettings, SaltFileError, read_salt_file, with_salt
from tests.support import IN_MEMORY, run_convert, write_png_archive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("content", ["\ufeff", "\ufeff\n", "\u200b", "\u00a0\u200b\u00a0", "\u2060\u200d",
                                     "\ufeff \u200c\t\n"],
                         ids=["bom", "bom_newline", "zero_width_space", "nbsp_zwsp", "joiners", "mixed"])
def test_a_salt_file_of_only_invisible_characters_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "salt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as refused:
        parse_convert(["--input", str(tmp_path), "--output", str(tmp_path / "out"), "--id_salt_file", str(path)])
    line = str(refused.value)
    assert "\n" not in line and f"--id_salt_file {path}" in line, line
    assert "is empty" in line or "no visible character" in line, line


def test_a_byte_order_mark_before_the_salt_is_not_part_of_it(tmp_path):
    """docs/CONVERTING.md says so: the file an editor saved "with BOM" keys the ids as the salt typed."""
    path = tmp_path / "salt"
    path.write_bytes("\ufeffmy-secret salt\n".encode("utf-8"))
    assert read_salt_file(str(path)) == "my-secret salt"
    path.write_bytes("my-secret\ufeffsalt".encode("utf-8"))      # inside, it is the salt's own
    assert read_salt_file(str(path)) == "my-secret\ufeffsalt"
    path.write_bytes(" \u200bx ".encode("utf-8"))                # one visible character will do
    assert read_salt_file(str(path)) == "\u200bx"
    guide = open(os.path.join(ROOT, "docs", "CONVERTING.md")).read()
    assert "byte order mark" in guide and "no visible character" in guide


def test_a_salt_file_changed_after_the_run_read_it_keys_everything_with_the_salt_read_first(tmp_path):
    """The launcher reads the file once, at the start; the workers use that value (here an
    in-process run, whose steps read the file again at setup): the shards are those of
    --id_salt FIRST, and dataset.json's locations are keyed with it too."""
    write_png_archive(tmp_path / "in", 3, 12, 12)
    salt_file = tmp_path / "salt"
    salt_file.write_text("the-first-salt\n")
    opts = ConvertOptions(inputs=(str(tmp_path / "in"),), output=str(tmp_path / "a"),
                          id_salt_file=str(salt_file), max_failure_ratio=1.0)
    check_options(opts, IN_MEMORY)            # the start of the run: the salt is read here
    salt_file.write_text("a-second-salt\n")   # changed while the run goes
    convert.run_checked(opts, IN_MEMORY, quiet=True)
    run_convert(tmp_path / "in", tmp_path / "b", id_salt="the-first-salt")
    run_convert(tmp_path / "in", tmp_path / "c", id_salt="a-second-salt")

    def ids(output):
        from dcm2tfrecord import reader
        return sorted(r["id"] for r in reader.RandomAccess(str(output)))

    def inputs(output):
        with open(output / names.MANIFEST_NAME) as handle:
            return json.load(handle)["options"]["inputs"]

    assert ids(tmp_path / "a") == ids(tmp_path / "b") != ids(tmp_path / "c")
    assert inputs(tmp_path / "a") == inputs(tmp_path / "b") != inputs(tmp_path / "c")


def test_a_worker_whose_salt_file_says_otherwise_than_at_the_start_fails_in_one_line(tmp_path):
    """A worker that reads the file itself (spawned, or on another host) checks it against the
    salt the launcher read (the settings hold a slow keyed digest of it, never the salt)."""
    from dcm2tfrecord.transforms.settings import salt_check
    path = tmp_path / "salt"
    path.write_text("the-first-salt")
    check = salt_check("the-first-salt")
    assert "the-first-salt" not in check and len(check) == 32
    settings = DecodeSettings(id_salt_file=str(path), id_salt_check=check)
    assert with_salt(settings).id_salt == "the-first-salt"
    path.write_text("a-second-salt")
    with pytest.raises(SaltFileError) as refused:
        with_salt(settings)
    line = str(refused.value)
    assert "\n" not in line and f"--id_salt_file {path}" in line and "changed" in line, line
    assert "salt" in line and "the-first-salt" not in line and "a-second-salt" not in line
