"""The README opens with the two commands; docs/CONVERTING.md documents every convert option,
its default, and every reason code."""
import argparse
import os
import re

from dcm2tfrecord.pipeline.options.arguments import add_convert_arguments
from dcm2tfrecord.dataset import reasons

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
README = open(os.path.join(ROOT, "README.md")).read()
CONVERTING = open(os.path.join(ROOT, "docs", "CONVERTING.md")).read()


def test_readme_starts_with_the_two_commands():
    head = "\n".join(README.splitlines()[:8])
    assert "./run_local.sh" in head and "./run_tests.sh" in head


def test_every_option_is_documented():
    parser = argparse.ArgumentParser()
    add_convert_arguments(parser)
    flags = [a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"]
    missing = [f for f in flags if f"`{f}" not in CONVERTING]
    assert missing == []


def test_every_reason_is_documented():
    missing = [r for r in reasons.DOCUMENTED if f"`{r}`" not in CONVERTING]
    assert missing == []


# Defaults the option table states in words, each standing for "no value" (None, "none" or no tags).
UNSET_IN_WORDS = {"none", "the file's", "`$DCM2TFRECORD_ID_SALT`", "patient for DICOM, record otherwise"}


def _documented_defaults() -> dict:
    """--flag -> the default column of docs/CONVERTING.md's option table."""
    rows = re.findall(r"^\| `--(\w+)[^`]*` \| ([^|]*) \|", CONVERTING, re.M)
    return {flag: default.strip() for flag, default in rows}


def test_documented_defaults_are_the_parser_defaults():
    parser = argparse.ArgumentParser()
    add_convert_arguments(parser)
    documented = _documented_defaults()
    wrong = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag, default = action.option_strings[0][2:], action.default
        text = documented[flag]
        if action.required or text.startswith("required"):
            ok = action.required and text.startswith("required")
        elif text == "off":
            ok = default is False or str(default) == "off"     # a switch, or a choice named off (--crop)
        elif text in UNSET_IN_WORDS:
            ok = default in (None, "none", ())
        elif re.fullmatch(r"[\d.]+|2\^\d+", text):
            ok = default == (2 ** int(text[2:]) if text.startswith("2^") else float(text))
        else:
            ok = str(default) == text
        if not ok:
            wrong[flag] = (text, default)
    assert wrong == {}
