"""Issue 25: the second lane (tests/second_lane.py): a pytest process started when what it waits for is
done, whose failures fail the session, and which leaves nothing behind when the session stops it."""
import time
from concurrent.futures import Future

import psutil

import second_lane


def module(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_it_starts_after_what_it_waits_for_and_reports_its_tests(tmp_path):
    ok = module(tmp_path, "test_ok.py", "def test_one():\n    assert 1 + 1 == 2\n")
    waited = Future()
    lane = second_lane.SecondLane([ok], after=[waited], junit=str(tmp_path / "session.xml")).start()
    time.sleep(1.5)
    assert lane.proc is None                           # still waiting for the background
    waited.set_result(None)
    code, text = lane.result(timeout=120)
    assert code == 0 and "1 passed" in text, text
    assert (tmp_path / "session.xml.second-lane.xml").exists()
    bad = module(tmp_path, "test_bad.py", "def test_two():\n    assert 1 + 1 == 3\n")
    code, text = second_lane.SecondLane([bad]).start().result(timeout=120)
    assert code == 1 and "FAILED" in text and "test_two" in text


def test_stopping_it_leaves_no_process_behind(tmp_path):
    slow = module(tmp_path, "test_slow.py", "import time\n\ndef test_sleeps():\n    time.sleep(600)\n")
    lane = second_lane.SecondLane([slow]).start()
    deadline = time.time() + 60
    while lane.proc is None and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(3)                                        # pytest is inside the sleeping test now
    pid = lane.proc.pid
    t0 = time.time()
    lane.stop()
    assert time.time() - t0 < 45
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_it_runs_with_the_settings_the_session_began_with(monkeypatch):
    """A module's warm_ranks fixture sets DISTLAB_WARM=1 while its tests run; a lane started then runs
    cold, as the session began (CI, 2026-12-03: test_horovod's ranks stayed warm and outlived its jobs)."""
    monkeypatch.setattr(second_lane, "_WARM_AT_START", None)
    monkeypatch.setenv("DISTLAB_WARM", "1")                 # as inside a warm module
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    env = second_lane.lane_env()
    assert "DISTLAB_WARM" not in env and "PYTEST_ADDOPTS" not in env
    monkeypatch.setattr(second_lane, "_WARM_AT_START", "0")
    assert second_lane.lane_env()["DISTLAB_WARM"] == "0"
