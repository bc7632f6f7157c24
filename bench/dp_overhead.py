"""Benchmark for issue #2: does distlab's DDP path cost anything over a plain torch DDP script?

Runs the same training (MLP on the 8x8 digits, 2 ranks, one thread each) alternately through
``distlab.launch(data_parallel.train, method="ddp")`` and through ``bench/scripts/plain_ddp.py``
under torchrun, in alternating rounds, and compares training throughput (samples/s from the first step to
the last, so process start-up is excluded from both).  Goal: distlab / plain >= 0.98, as the
median of the rounds' ratios (``scripts/goals.py``).

distlab runs on warm ranks (``warm=True``, the default in a notebook): the ranks start once,
and each round spends its time training instead of starting processes (start-up is not what
is compared; ``bench/startup.py`` measures it).
"""
import os
import subprocess
import sys
import time

import distlab
from distlab.data_parallel import data_parallel as dp
from distlab.processes.arguments import free_port
from scripts.goals import goal

PLAIN_DDP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "plain_ddp.py")

WORLD, WIDTH, BATCH, STEPS, ROUNDS = 2, 256, 32, 1000, 6


def run_distlab() -> float:
    recs = distlab.launch(dp.train, world_size=WORLD, method="ddp", width=WIDTH, batch_size=BATCH,
                          steps=STEPS, lr=0.1, record_grads_at=(), progress="none", warm=True)
    return distlab.throughput(recs)


def run_plain() -> float:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={WORLD}",
                          "--master-addr=127.0.0.1", f"--master-port={free_port()}",
                          PLAIN_DDP, str(WIDTH), str(BATCH), str(STEPS)],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"))
    return float(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("THROUGHPUT")))


def main():
    print(f"2 ranks x 1 thread, MLP width {WIDTH}, batch {BATCH} per rank, {STEPS} steps, {ROUNDS} rounds")
    ratios = []
    for i in range(ROUNDS):
        order = (run_distlab, run_plain) if i % 2 == 0 else (run_plain, run_distlab)
        got = {f.__name__: f() for f in order}
        ratios.append(got["run_distlab"] / got["run_plain"])
        print(f"round {i}: distlab {got['run_distlab']:.0f} samples/s, plain DDP {got['run_plain']:.0f} "
              f"samples/s, ratio {ratios[-1]:.3f}", flush=True)
    goal("dp_overhead_distlab_vs_plain", ratios, ">=", 0.98)


if __name__ == "__main__":
    t = time.time()
    main()
    distlab.shutdown()
    print(f"(took {time.time() - t:.0f} s)")
