"""The one failure diagnosis (issue 27): launch, ``distlab run`` and the monitor read the same evidence
the same way.  The runs that produce this evidence for real are in test_faults.py, test_cli.py and
test_monitor.py; here each rule is checked on files and logs written by hand."""
import json
import signal

from distlab.long_runs import diagnosis as D


def error(rank, t, kind="RuntimeError", message="boom", job=0):
    return {"rank": rank, "time": t, "type": kind, "message": message, "traceback": f"trace {rank}", "job": job}


def test_only_whole_error_files_are_read_earliest_first(tmp_path):
    (tmp_path / "error_1.json").write_text(json.dumps(error(1, 5.0)))
    (tmp_path / "error_0.json").write_text(json.dumps(error(0, 7.0, job=3)))
    (tmp_path / "error_2.json.tmp").write_text('{"rank": 2, "ti')      # killed while writing it
    (tmp_path / "error_3.json").write_text('{"rank": 3, "ti')           # torn: skipped, not a crash
    assert [e["rank"] for e in D.read_errors(tmp_path)] == [1, 0]
    assert [e["rank"] for e in D.read_errors(tmp_path, job=3)] == [0]
    assert D.read_errors(tmp_path / "absent") == []


def test_the_launchers_logs_say_who_was_killed():
    torchrun = "WARNING ... failed (exitcode: -9) local_rank: 1 (pid: 42) of binary: python"
    horovodrun = "Process 3 exit with status code 137."
    assert D.killed_in_log(torchrun, first_rank=2) == {3: "SIGKILL"}
    assert D.killed_in_log(horovodrun) == {3: "SIGKILL"}
    assert D.killed_in_log("Process 1 exit with status code 1.") == {}


def test_blame_a_killed_rank_then_the_earliest_error_then_the_silent_one():
    errors = [error(1, 5.0, message="connection reset by peer"), error(0, 6.0)]
    killed = D.killed_by({0: -signal.SIGTERM, 1: 1, 2: -signal.SIGKILL}, errors)
    assert killed == {2: "SIGKILL"}                     # SIGTERM is the launcher stopping survivors
    # torchrun collected rank 2 before the watcher could: its log is the only witness left
    log = "failed (exitcode: -9) local_rank: 2 (pid: 42)\nfailed (exitcode: -15) local_rank: 3 (pid: 43)"
    assert D.killed_by({0: -signal.SIGTERM}, [], log) == {2: "SIGKILL"}
    assert D.killed_by({0: -signal.SIGTERM, 2: 1}, [], log) == {}      # the codes, when there, win
    assert D.blame(errors, killed)[:2] == (2, "it was killed by SIGKILL (out of memory, or killed by hand?)")
    assert D.blame(errors, {}) == (1, "RuntimeError: connection reset by peer", "trace 1")
    timeouts = [error(0, 5.0, message="Timed out waiting 5000ms for recv")]
    rank, why, _ = D.blame(timeouts, {}, silent=lambda: [1])
    assert rank == 1 and "it hung" in why
    assert D.blame([], {}) == (None, "", "")
    assert D.failure_lines(errors[:1], {2: "SIGKILL"}) == [
        "rank 2 was killed by SIGKILL (it left no error of its own)",
        "rank 1 failed: RuntimeError: connection reset by peer"]
