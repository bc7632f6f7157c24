"""A plain, hand-written torch DDP training script: the baseline for bench/dp_overhead.py.

Run with: python -m torch.distributed.run --nproc-per-node=2 bench/scripts/plain_ddp.py WIDTH BATCH STEPS
Same data, model, sampler and optimiser as distlab's DDP path, nothing else: prints one line
``THROUGHPUT <samples per second>`` from rank 0 (first step to last, start-up excluded).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler


def main():
    width, batch, steps = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # As distlab.launch does (processes.cores.bind_to_cores): a core of its own for each rank.
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    cores = sorted(os.sched_getaffinity(0))
    if local_world <= len(cores):
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), {cores[local_rank]})
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width),
                          nn.ReLU(), nn.Linear(width, 10))
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = DistributedSampler(range(len(y)), num_replicas=world, rank=rank, seed=0)
    per_epoch = len(sampler) // batch
    step, epoch, t0 = 0, 0, time.time()
    while step < steps:
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler))
        for k in range(per_epoch):
            if step == steps:
                break
            b = idx[k * batch:(k + 1) * batch]
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            step += 1
        epoch += 1
    elapsed = time.time() - t0
    if rank == 0:
        print(f"THROUGHPUT {world * batch * steps / elapsed:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
