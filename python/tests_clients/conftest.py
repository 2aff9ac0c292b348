"""The client tests (`make test-clients`): figures each test records are
printed at the end of the run and, with CGDR_CLIENT_FIGURES=FILE, written
there as JSON."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # _helpers (FP64 reference, SPEC 6)

_FIGURES = {}


@pytest.fixture
def figures():
    """figures[name] = value: reported at the end of the session."""
    return _FIGURES


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("cgdr client figures")
    for name, value in sorted(_FIGURES.items()):
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        terminalreporter.write_line(f"{name}: {shown}")
    path = os.environ.get("CGDR_CLIENT_FIGURES")
    if path:
        with open(path, "w") as f:
            json.dump(_FIGURES, f, indent=1, sort_keys=True)
            f.write("\n")
