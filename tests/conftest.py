"""Registers the shared fixtures (defined in tests/support) and the markers: nothing else."""
from tests.support import (SLOW_TEST_TIMEOUT_S, launcher_storage, sample_archive,  # noqa: F401  (fixtures)
                           sample_dataset)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: minutes (installs into a fresh virtual environment, or waits out the default "
                   "storage retry budget); "
                   "./run_tests.sh skips these, ./run_tests.sh -m slow runs them")


def pytest_collection_modifyitems(config, items):
    """A test marked slow, and not given a timeout of its own, gets SLOW_TEST_TIMEOUT_S
    (pytest-timeout; pytest.ini's default is for the rest)."""
    import pytest
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_S))
