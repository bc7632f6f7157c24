"""The driver of a Horovod job started from a notebook: ``python .../horovod_driver.py N RUN_DIR``.

Lesson 02.  ``distlab.launch(..., backend="horovod")`` runs this file as a program of its own
(``horovod_backend.HorovodJob``), which calls ``horovod.run`` to start N ranks (the docstring of
``horovod_backend`` says why not in the notebook's process).  Two choices here are only about start-up time:

* the file is run *by its path*, not as ``python -m distlab.processes.horovod_driver``: anything imported
  from the ``distlab`` package first runs ``distlab/__init__.py``, which imports PyTorch, two to
  three seconds that a driver never needs (only the ranks train);
* for the same reason the function handed to ``horovod.run`` is defined here, in the driver's
  main module.  Horovod ships such a function by value, and it imports distlab inside each rank.

Only the standard library is imported at the top: Horovod starts a helper process per rank
with multiprocessing's "spawn", which runs this file's top level again in each helper.

Horovod's own servers (its rendezvous, and the store that carries the pickled function and
results) listen on 127.0.0.1 only: nothing outside this machine takes part in a notebook's
job (``horovodrun_local.listen_on_loopback`` says why and how).
"""
import os
import sys
import threading
import time

LOOPBACK = "lo"   # loopback only, as horovod_backend.LOOPBACK (this file imports no distlab)


def run_rank(run_dir: str) -> dict:
    """What each rank runs: its part of the job in ``run_dir`` (``horovod_backend.run_rank``)."""
    from distlab.processes.horovod_backend import run_rank as run_this_rank
    return run_this_rank(run_dir)


def stop_when_orphaned(parent_pid: int) -> None:
    """If the launcher dies (a notebook kernel killed or restarted), stop every rank, then ourselves.

    Once, SIGTERM'ing ourselves and leaving the rest to Horovod's handler was not enough: two warm
    ranks outlived their kernel by minutes, each spinning at about 40% of a core and slowing every
    lesson after (lesson 02's sitting of 2026-12-04; not reproduced since, the cause not found).  So
    every descendant of this driver (Horovod's middlemen, the shells, the ranks) is killed here, as
    ``HorovodJob.terminate_launcher`` does from the launcher's side (this file imports no distlab, to
    start light); nothing is left to save, the launcher that would have read the results is gone."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    import psutil                                   # only on this path: the driver starts light

    family = psutil.Process().children(recursive=True)
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=5)
    os._exit(1)


def main() -> int:
    world_size, run_dir = int(sys.argv[1]), sys.argv[2]
    threading.Thread(target=stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    import horovod
    # A sibling file, importable by name because this one is run by its path (no distlab import).
    from horovodrun_local import listen_on_loopback

    listen_on_loopback()
    # Every rank's return value comes back, in rank order.  horovod.run installs handlers
    # for SIGINT and SIGTERM (the launcher's way to stop us) that stop every rank.
    results = horovod.run(run_rank, args=(run_dir,), num_proc=world_size,
                          hosts=f"localhost:{world_size}", use_gloo=True,
                          network_interfaces=[LOOPBACK])
    print(f"horovod.run returned {len(results)} values: {results}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
