"""Training functions for the Horovod tests (a module, so that worker processes can import them)."""


def every_collective(worker, pid_dir=None):
    """Each Worker collective once; also what Horovod's cycle settings look like in here."""
    import os

    import torch

    if pid_dir:
        with open(os.path.join(pid_dir, f"{worker.rank}.pid"), "w") as f:
            f.write(str(os.getpid()))
    s = worker.all_reduce(torch.tensor([float(worker.rank + 1)]))
    avg = worker.all_reduce(torch.tensor([float(worker.rank)]), op="avg")
    b = worker.broadcast(torch.tensor([float(worker.rank)]), src=worker.world_size - 1)
    g = worker.all_gather(torch.tensor([worker.rank, 10 * worker.rank]))
    worker.barrier()
    worker.progress(1, 1)
    return {"rank": worker.rank, "world_size": worker.world_size, "backend": worker.backend,
            "device": str(worker.device), "sum": s.item(), "avg": avg.item(), "bcast": b.item(),
            "gathered": [t.tolist() for t in g], "threads": torch.get_num_threads(),
            "pid": os.getpid(), "horovod_env": {k: os.environ.get(k) for k in (
                "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY", "HOROVOD_GLOO_TIMEOUT_SECONDS",
                "HOROVOD_GLOO_IFACE", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")}}
