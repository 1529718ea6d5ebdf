"""Registers the shared fixtures and the markers; the helpers are in tests/support."""
from tests.support import pytest_configure, sample_archive, sample_dataset  # noqa: F401
