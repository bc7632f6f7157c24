"""Samples/s of 1 GPU rank and of N GPU ranks on lesson 05's code (issue #5; split from gpu_check.py in #27).

Run it whenever a machine with CUDA GPUs is available and record its output in the notes:

    .venv/bin/python bench/gpu_scaling.py           # a few minutes
    .venv/bin/python bench/gpu_scaling.py --cpu     # a dry run of the code path on CPU processes

It measures samples/s of 1 GPU rank and of N GPU ranks (N = every visible GPU) for a few
configurations, strong and weak scaling, through ``distlab.measure.scaling.run_scaling`` with
``device="cuda"`` (the code path of the CPU lesson; throughput from the first measured step to
the last, warm-up skipped), next to 1 CPU process x 1 thread for scale.  With one GPU only, it
measures 1 GPU against the CPU (there is nothing to scale).  Whether every strategy trains
like one process on GPUs is ``bench/gpu_check.py``'s job.

The compute/communication split is not printed on GPUs: kernels run asynchronously, so the
host-side time stamps of a step only bound it; samples/s over many steps is sound.  REPORT
lines only (no goal: nothing has been measured on GPUs to set one).  Without a CUDA GPU (and
without ``--cpu``) it says so in one line and exits 0.
"""
import sys
import time
import warnings

import torch

CONFIGS = [dict(model="mlp", width=1024, global_batch_size=896),
           dict(model="mlp", width=4096, global_batch_size=1436),
           dict(model="cnn", width=64, global_batch_size=1436),
           dict(model="mlp", width=1024, batch_size=448)]


def label(r) -> str:
    kind, batch = r["scaling"], (r["global_batch_size"] if r["scaling"] == "strong" else r["batch_size"])
    return f"{r['model']}{r['width']} {kind} batch {batch}"


def main(device: str) -> int:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and gpus == 0:
        print("gpu_scaling: no CUDA GPU here: nothing to measure (--cpu runs a dry run on CPU processes)")
        return 0
    from distlab.measure import scaling, speedup

    n = max(gpus, 1) if device == "cuda" else 2
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(f"device {device}: {gpus} GPU(s) ({name}); torch {torch.__version__}", flush=True)
    t0 = time.time()
    steps = 30 if device == "cuda" else 6
    configs = CONFIGS if device == "cuda" else [CONFIGS[0], CONFIGS[-1]]   # CPU: a quick dry run
    rows = scaling.run_scaling(configs, sorted({1, n}), single_threads=(1,), steps=steps, skip=5 if
                               device == "cuda" else 2, repeats=2, device=device)
    cpu = scaling.run_scaling(CONFIGS[:1], (1,), single_threads=(1,), steps=6, skip=2, device="cpu")
    print(f"CPU 1 process x 1 thread, {label(cpu[0])}: {cpu[0]['samples_per_s']:.0f} samples/s")
    for r in speedup.speedups(rows):
        print(f"{label(r):>30}: {r['world_size']} {device} rank(s) {r['samples_per_s']:9.0f} samples/s, "
              f"speedup over 1 rank {r['speedup']:.2f}, efficiency {r['efficiency']:.0%}")
    same = [r for r in speedup.speedups(rows) if speedup.config_key(r) == speedup.config_key(cpu[0])]
    print(f"REPORT gpu_vs_cpu_1x1 {same[0]['samples_per_s'] / cpu[0]['samples_per_s']:.1f} "
          f"({label(cpu[0])}, 1 {device} rank vs 1 CPU process x 1 thread)")
    if n > 1:
        top = max((r for r in speedup.speedups(rows) if r["world_size"] == n), key=lambda r: r["speedup"])
        print(f"REPORT best_speedup_{n}_{device}_ranks {top['speedup']:.2f} ({label(top)})")
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    sys.exit(main("cpu" if "--cpu" in sys.argv else "cuda"))
