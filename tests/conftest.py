import os
import sys

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Workers import test helper modules (tests/workers.py) by name.
sys.path.insert(0, os.path.join(ROOT, "tests"))


def alive(pids):
    """The pids in ``pids`` that are still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def read_pids(pid_dir):
    return [int(open(os.path.join(pid_dir, f)).read()) for f in os.listdir(pid_dir) if f.endswith(".pid")]


@pytest.fixture
def pid_dir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    return str(d)
