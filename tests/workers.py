"""Training functions for the launcher tests.  They live in a module so workers can import them."""
import os
import signal
import time

import torch


def _note_pid(pid_dir, worker):
    if pid_dir:
        with open(os.path.join(pid_dir, f"{worker.rank}.pid"), "w") as f:
            f.write(str(os.getpid()))


def echo(worker, value=0, pid_dir=None):
    """Every rank reports itself and the result of one all-reduce and one broadcast."""
    _note_pid(pid_dir, worker)
    t = torch.tensor([float(worker.rank + 1)])
    worker.all_reduce(t)
    b = torch.tensor([float(worker.rank)])
    worker.broadcast(b, src=worker.world_size - 1)
    worker.progress(1, 1)
    return {"rank": worker.rank, "world_size": worker.world_size, "device": str(worker.device),
            "backend": worker.backend, "value": value, "sum": t.item(), "bcast": b.item(),
            "threads": torch.get_num_threads(), "pid": os.getpid()}


def raise_on_rank(worker, bad_rank=1, pid_dir=None):
    """All ranks meet once, then ``bad_rank`` raises while the others wait at the next all-reduce."""
    _note_pid(pid_dir, worker)
    worker.all_reduce(torch.ones(1))
    if worker.rank == bad_rank:
        raise ValueError(f"deliberate failure on rank {worker.rank}")
    worker.all_reduce(torch.ones(1))
    return worker.rank


def kill_on_rank(worker, bad_rank=1, pid_dir=None):
    """``bad_rank`` kills itself with SIGKILL (as the OOM killer would) while the others wait."""
    _note_pid(pid_dir, worker)
    worker.all_reduce(torch.ones(1))
    if worker.rank == bad_rank:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    worker.all_reduce(torch.ones(1))
    return worker.rank


def skip_collective(worker, pid_dir=None):
    """Rank 1 never joins the all-reduce: the others must fail on the timeout, not hang."""
    _note_pid(pid_dir, worker)
    if worker.rank == 1:
        time.sleep(600)
    worker.all_reduce(torch.ones(1))
    return worker.rank


def run_forever(worker, pid_dir=None):
    """Trains "forever" (all-reducing and reporting progress) until it is stopped."""
    _note_pid(pid_dir, worker)
    step = 0
    while True:
        worker.all_reduce(torch.ones(1000))
        step += 1
        worker.progress(step, 10**9)
        time.sleep(0.01)


def cores(worker):
    """Which cores this rank's threads may run on (``bind_cores``)."""
    tasks = os.listdir("/proc/self/task")
    return {"rank": worker.rank, "cores": sorted(os.sched_getaffinity(0)),
            "every_thread": sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in tasks})}


def annotated(worker, steps: int, rate: float = 0.1, layers: list | None = None):
    """No checks of its own: the launcher checks its arguments against these annotations."""
    return {"rank": worker.rank, "steps": steps, "rate": rate, "layers": layers}
def change_everything(worker):
    """A job that changes every global setting it can reach (the next job must not notice)."""
    import random

    import numpy as np

    torch.manual_seed(123)
    random.seed(1)
    np.random.seed(1)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(2)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    return {"threads": torch.get_num_threads(), "float64": torch.get_default_dtype() == torch.float64}


def global_state(worker):
    """What a job finds when it starts: random numbers, threads, default dtype, cores."""
    import random

    import numpy as np

    return {"rank": worker.rank, "torch": torch.rand(3).tolist(), "random": random.random(),
            "numpy": float(np.random.rand()), "threads": torch.get_num_threads(),
            "dtype": str(torch.get_default_dtype()), "cores": sorted(os.sched_getaffinity(0))}


# the training modules a case names, by their short name (the package of each axis holds them)
TRAINING_MODULES = {
    "data_parallel": "distlab.data_parallel.data_parallel", "local_sgd": "distlab.data_parallel.local_sgd",
    "pipeline": "distlab.pipeline.pipeline", "torch_pipeline": "distlab.pipeline.torch_pipeline",
    "tensor_parallel": "distlab.tensor.tensor_parallel", "mesh": "distlab.parallelize.mesh_3d",
    "zero": "distlab.zero.zero", "fsdp": "distlab.zero.fsdp", "deepspeed_zero": "distlab.zero.deepspeed_zero"}


def trainings(worker, cases):
    """Several training jobs in one launch: ``{name: record}`` for ``cases = {name: (module, kwargs)}``,
    each ``<module>.train(worker, **kwargs)`` (``TRAINING_MODULES``: pipeline, tensor_parallel, ...)."""
    import importlib

    return {name: importlib.import_module(TRAINING_MODULES[module]).train(worker, **kwargs)
            for name, (module, kwargs) in cases.items()}


def five_axes(worker, cases):
    """Issue 36: the line transformer on several layouts in one launch: ``{name: record}`` for
    ``cases = {name: settings}``, each ``parallelize.trainer.train`` on ``trainer.spec_of(**settings)``."""
    from distlab.parallelize import trainer

    return {name: trainer.train(worker, trainer.spec_of(**settings)) for name, settings in cases.items()}


def hold(worker, seconds=3.0):
    """Meet the other ranks, stay up ``seconds`` (long enough to look at the job from outside), meet again."""
    worker.all_reduce(torch.ones(1))
    time.sleep(seconds)
    worker.all_reduce(torch.ones(1))
    return worker.rank


def expert_layer(worker, experts=4, top_k=2, how="library", tokens=24, d_model=8, hidden=16,
                 capacity_factor=1.0, seed=0):
    """Issue 29: one MoE layer with its experts spread over every rank (expert parallelism), forward and
    backward on this rank's share of a fixed batch; what the test compares with one process."""
    from distlab.experts.expert_parallel import ExpertParallelMoE
    from distlab.experts.moe import MoE, MoEConfig

    torch.manual_seed(seed)
    moe = MoE(d_model, hidden, MoEConfig(experts=experts, top_k=top_k, capacity_factor=capacity_factor))
    x = torch.randn(worker.world_size * tokens, d_model, generator=torch.Generator().manual_seed(seed + 1))
    mine = x.chunk(worker.world_size)[worker.rank].clone().requires_grad_()
    layer = ExpertParallelMoE(moe, worker, worker.new_group(range(worker.world_size)), how)
    y = layer(mine)
    (y.square().sum() + layer.extra_loss).backward()
    first = layer.me * layer.per_rank
    return {"rank": worker.rank, "y": y.detach(), "x_grad": mine.grad, "router_grad": layer.router.weight.grad,
            "expert_grads": {first + i: [p.grad.clone() for p in e.parameters()] for i, e in enumerate(layer.experts)},
            "last": layer.last, "traffic": dict(layer.traffic.bytes)}
