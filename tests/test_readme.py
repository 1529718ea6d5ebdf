"""The README documents every convert option and every reason code."""
import argparse
import os

from pipeline.options import add_convert_arguments
from transforms import reasons

README = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()


def test_readme_starts_with_the_two_commands():
    head = "\n".join(README.splitlines()[:8])
    assert "./run_local.sh" in head and "./run_tests.sh" in head


def test_every_option_is_documented():
    parser = argparse.ArgumentParser()
    add_convert_arguments(parser)
    flags = [a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"]
    missing = [f for f in flags if f"`{f}" not in README]
    assert missing == []


def test_every_reason_is_documented():
    missing = [r for r in reasons.DOCUMENTED if f"`{r}`" not in README]
    assert missing == []
