"""The client tests (`make test-clients`): figures each test records are
printed at the end of the run and, with CGDR_CLIENT_FIGURES=FILE, written
there as JSON."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # _helpers (FP64 reference, SPEC 6)

import _figures  # noqa: E402


@pytest.fixture
def figures():
    """figures[name] = value: reported at the end of the session."""
    return _figures.FIGURES


def pytest_terminal_summary(terminalreporter):
    _figures.report(terminalreporter, "cgdr client figures", "CGDR_CLIENT_FIGURES")
