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
