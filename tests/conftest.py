"""Registers the shared fixtures (defined in tests/support) and the markers: nothing else."""
from tests.support import sample_archive, sample_dataset  # noqa: F401  (fixtures)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: minutes (installs into a fresh virtual environment, or waits out the default "
                   "storage retry budget); "
                   "./run_tests.sh skips these, ./run_tests.sh -m slow runs them")
