"""Horovod's elastic mode: the survivors of a failure carry on, without a restart from disk.

Introduced in lesson 10 (failure is normal at scale).  torchrun's answer to a dead worker is to
stop every rank and start them all again from the last checkpoint on disk.  Horovod's elastic
mode keeps the survivors running instead:

* the training state lives in an ``hvd.elastic.TorchState`` (model, optimizer, step), and
  ``state.commit()`` every few steps copies it *in memory*;
* when a worker dies, the others' next collective fails (``HorovodInternalError``); the
  ``@hvd.elastic.run`` wrapper catches it, puts the state back to the last commit, forms a new
  (smaller) ring with the workers that are left, broadcasts rank 0's state, and calls the
  training function again: it carries on from the committed step.

So the world size can change in the middle of training.  The mini-batch must not depend on it,
or the survivors would train on other data: every step here takes the same *global* batch and
each rank a slice of it (``global_batch(...)[rank::size]``); averaging the slices' gradients
gives the global batch's gradient whatever the size.  In float64 the survivors then end where an
uninterrupted run ends, up to rounding (the sums are split differently).

Horovod decides who is alive by *host*: a worker that fails gets its whole host blacklisted, and
when every host is blacklisted the driver stops the job.  On one machine named once
(``localhost:2``) a single failure therefore ends the job.  ``command`` names this machine twice,
``localhost`` and ``127.0.0.1``, one slot each (both are this machine's loopback): losing one
leaves the other.  A cluster lists its real hosts in the discovery script.

Run with ``horovodrun ... python -m distlab.data_parallel.horovod_elastic RUN_DIR STEPS`` (``command``).

This is the one training loop in distlab that is not ``loop.train_steps``, on purpose: Horovod's
elastic mode needs the loop inside ``@hvd.elastic.run``, which re-enters it after every
re-formed ring, and its state is the in-memory ``TorchState`` it commits, not a checkpoint on
disk.  So ``train.supports`` names neither "checkpoint" nor "fault": it keeps its own committed
state, restarts itself, and takes its failure as ``fault_step``.  ``distlab.launch`` does not
run it (``horovodrun`` does, through ``command``).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

from ..data import global_batch, load_digits
from ..models import build_model

DISCOVERY = "#!/bin/sh\necho localhost:1\necho 127.0.0.1:1\n"     # this machine, under two names


def command(run_dir: str, steps: int, *, commit_every: int = 10, fault_step: int | None = None) -> list[str]:
    """Lesson 10: the horovodrun line for an elastic job of 2 workers (at least 1) in ``run_dir``."""
    os.makedirs(run_dir, exist_ok=True)
    discover = os.path.join(run_dir, "discover_hosts.sh")
    with open(discover, "w") as f:
        f.write(DISCOVERY)
    os.chmod(discover, 0o755)
    horovodrun = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "processes",
                              "horovodrun_local.py")                    # its servers on 127.0.0.1 only
    fault = [] if fault_step is None else [str(fault_step)]
    return [sys.executable, horovodrun, "-np", "2", "--min-np", "1", "--max-np", "2", "--gloo",
            "--network-interfaces", "lo", "--host-discovery-script", discover, "--elastic-timeout", "60",
            sys.executable, "-m", "distlab.data_parallel.horovod_elastic", run_dir, str(steps), str(commit_every),
            *fault]


def train(run_dir: str, steps: int, commit_every: int = 10, fault_step: int | None = None, *, width: int = 64,
          global_batch_size: int = 64, lr: float = 0.1, seed: int = 0) -> None:
    """Lesson 10: one elastic worker; rank 0 writes ``elastic_record.json`` and ``params.pt`` at the end.

    ``fault_step``: the worker that is rank 1 at that step kills itself (once), as a lost machine would.
    """
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    data = load_digits(dtype=torch.float64)
    model = build_model("mlp", width, seed=seed, dtype=torch.float64)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
    log = {"sizes": [], "resets": []}             # the world size at each step; when the ring re-formed
    state.register_reset_callbacks([lambda: log["resets"].append({"time": time.time(), "size": hvd.size()})])
    marker = os.path.join(run_dir, "fault_done")

    @hvd.elastic.run
    def loop(state):
        while state.step < steps:
            if state.step == fault_step and hvd.rank() == 1 and not os.path.exists(marker):
                open(marker, "w").close()                         # (its time: when the worker died)
                os.kill(os.getpid(), signal.SIGKILL)
            batch = global_batch(data.n_train, 1, global_batch_size, state.step, seed=seed)
            mine = batch[hvd.rank()::hvd.size()]                 # this worker's slice of the global batch
            optimizer.zero_grad()
            F.cross_entropy(model(data.x_train[mine]), data.y_train[mine]).backward()
            optimizer.step()                                     # waits for the averaged gradients
            log["sizes"].append(hvd.size())
            state.step += 1
            if state.step % commit_every == 0:
                state.commit()                                   # an in-memory copy to go back to

    loop(state)
    if hvd.rank() == 0:
        torch.save({n: p.detach().clone() for n, p in model.named_parameters()}, os.path.join(run_dir, "params.pt"))
        with open(os.path.join(run_dir, "elastic_record.json"), "w") as f:
            json.dump({**log, "steps": state.step, "end": time.time()}, f)
    hvd.shutdown()


# Not a function ``distlab.launch`` runs (see the module's docstring): no checkpoints, no launch fault
train.supports = frozenset({"horovod", "cpu"})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir, steps, commit_every, *fault = args
    train(run_dir, int(steps), int(commit_every), int(fault[0]) if fault else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
