"""One rank of a run config's training: what every scheduler starts (lesson 09).

``python -m distlab.cluster.config_rank CONFIG``.  Whoever starts it sets the rank's place in
the job in the environment: torchrun (``distlab run``, a SLURM job, a Kubernetes PyTorchJob) and
Azure ML's PyTorch distribution set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
horovodrun (and Azure ML's MPI distribution) set Horovod's.  The rank reads the config itself,
so nothing but the config file has to reach a node, joins the job (the backend's
``start_worker``, with the config's device and collective timeout), runs the training function
``RunConfig.call`` names, and saves its record in the run's folder on its own node.  A failure
is written to ``error_<rank>.json`` there (``distlab run`` names the rank from it) and ends the
rank with a non-zero code, which the launcher turns into stopping the others.
"""
from __future__ import annotations

import os
import signal
import sys

import torch

from .config import load
from ..processes.rank import end_rank, save_atomically, set_options, stop_quietly, write_error
from ..processes.worker import backend_module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m distlab.cluster.config_rank CONFIG", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.SIG_DFL)      # told to stop: stop at once
    config = load(argv[0])
    folder = os.path.abspath(os.path.join(config.logging.dir, config.logging.name))
    os.makedirs(folder, exist_ok=True)
    fn, kwargs = config.call()
    # one intra-op thread unless told otherwise, as distlab.launch does (torchrun sets
    # OMP_NUM_THREADS=1 only when a node runs several ranks): the same run gives the same sums
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if config.logging.horovod_timeline and config.launch.backend == "horovod":   # lesson 10, read before hvd.init
        os.environ["HOROVOD_TIMELINE"] = os.path.join(folder, "horovod_timeline.json")
    worker = None
    try:
        worker = backend_module(config.launch.backend).start_worker(config.launch.device, config.launch.timeout,
                                                                    run_dir=folder)
        set_options(worker, config.options())      # lesson 10: checkpoints, a fault on purpose, TensorBoard
        record = fn(worker, **kwargs)
        save_atomically(record, os.path.join(folder, f"record_{worker.rank}.pt"))
        return 0
    except BaseException as err:
        write_error(folder, worker, err)
        raise
    finally:
        stop_quietly(worker)


if __name__ == "__main__":
    end_rank(main)            # no interpreter finalization: see end_rank
