import os
import sys

import pytest

# Test modules and the worker processes they start import tests/helpers.py and tests/workers.py
# by name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def pid_dir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    return str(d)


def pytest_terminal_summary(terminalreporter):
    """The simulated Binder launch says what it enforced and what it had to substitute (test_binder.py)."""
    module = sys.modules.get("test_binder")
    if module is not None and module.REPORT:
        terminalreporter.section("binder simulation")
        for line in module.REPORT:
            terminalreporter.write_line(line)
