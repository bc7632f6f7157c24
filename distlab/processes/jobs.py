"""A running job, as the launcher sees it: start it, poll it, read who failed, stop it.

Introduced in lesson 01.  A *job* is one launcher process (torchrun, or Horovod's driver)
and the ranks it starts.  The notebook never talks to the ranks directly: it starts the
launcher, watches files in the run folder, and in the end stops the launcher and makes
sure that no rank outlives it.  Both backends share all of that (``Job``); each says only
how to start its launcher and how to read, from the launcher's log, which rank died how
(``torch_backend.TorchrunJob``, ``horovod_backend.HorovodJob``).
"""
from __future__ import annotations

import glob
import os
import signal
import subprocess


def die_with_parent() -> None:
    """Linux: if the notebook kernel is killed outright, the launcher gets SIGTERM and stops its ranks."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
    except OSError:   # not Linux: the interrupt and failure paths still stop everything
        pass


def rank_pids(run_dir: str) -> list[int]:
    """The process ids the ranks wrote into the run folder when they started."""
    pids = []
    for path in glob.glob(os.path.join(run_dir, "pid_*")):
        try:
            with open(path) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):     # a rank still writing it
            pass
    return pids


class Job:
    """A launcher process whose output goes to ``run_dir/launcher.log``."""

    def __init__(self, cmd: list[str], env: dict, run_dir: str):
        self.run_dir = run_dir
        self.log_path = os.path.join(run_dir, "launcher.log")
        self._log = open(self.log_path, "w")
        # A session of its own: stopping it never touches the notebook kernel.
        self.popen = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=die_with_parent)

    def poll(self) -> int | None:
        """The launcher's exit code, or None while it runs."""
        return self.popen.poll()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def exit_codes(self) -> dict[int, int]:
        """``{rank: exit code}`` of the ranks that failed, as the launcher's log tells it;
        a rank killed by signal n has code -n."""
        raise NotImplementedError

    def stop(self, grace: float = 5.0) -> None:
        """Stop the launcher, then make sure no rank survives it (safe to call twice)."""
        import psutil

        self.terminate_launcher(grace)
        alive = []
        for pid in rank_pids(self.run_dir):
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        for p in alive:
            p.terminate()
        _, still = psutil.wait_procs(alive, timeout=grace)
        for p in still:
            p.kill()
        psutil.wait_procs(still, timeout=grace)

    def terminate_launcher(self, grace: float) -> None:
        """SIGTERM the launcher (it forwards it to its ranks); SIGKILL its group if it lingers."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        self._log.close()
