"""The check to run on the day a GPU machine is lent (issue 27): every strategy once on NCCL.

    .venv/bin/python bench/gpu_check.py                  # on the GPU machine: under 5 minutes
    .venv/bin/python bench/gpu_check.py --device cpu     # the same checks on CPU processes (gloo)
    .venv/bin/python bench/gpu_check.py --only data,tensor

For each strategy of the registry (``distlab.parallelize.registry``: what a run config can name)
it launches the strategy's training function through ``distlab.launch(..., device="cuda")``
(one GPU a rank, NCCL), trains a small MLP for a few steps, and compares the parameters every
rank ends with against ONE process training the same model on the same device at the global
batch (``data_parallel.train_single``), as the strategy's tests do on CPU.  One line per
strategy, in the benchmarks' format:

    GOAL <strategy>_max_diff <largest parameter difference> <= 1e-05 PASS|MISS (what ran)

Why 1e-5: float32 rounding after these few steps leaves differences of about 1e-8 to 1e-6
(the CPU tests' bounds are 1e-6 and 1e-5); a rank that averages wrongly, misses an update or
uses stale parameters is off by more than 1e-3.  The sharded optimizers (ZeRO, FSDP2,
DeepSpeed) train with SGD and momentum, whose update is linear in the gradient: Adam divides
by the root of the squared gradient, which turns a rounding difference in a gradient near
zero into a step of up to lr (tests/test_zero.py; 2e-4 here with Adam, for a correct run).
A MISS reading ``nan ... (not run: WHY)`` was not measured, and says why (a strategy the
registry has and ``CHECKS`` lacks is one).  A strategy whose ``fn.supports`` rules the device
out (async SGD: its server receives from any rank, which NCCL cannot) gets a ``SKIP`` line.

How many ranks.  Each strategy runs on 2 ranks (``3d`` on 4: data 2 x tensor 2) when the
machine has that many GPUs; with fewer, on as many as there are, and the line says so.  On
ONE GPU that is one rank: it checks the strategy's CUDA code path (every tensor on the GPU,
NCCL started, the parameters of one process) but no communication between ranks.  Several
ranks sharing one GPU is not possible here, for two reasons: ``launch(device="cuda")`` asks
for a GPU per rank (``processes.devices.choose_device`` refuses fewer, and ``torch_device``
gives local rank ``r`` the GPU ``cuda:r``), and NCCL itself refuses two ranks of one
communicator on one GPU since its version 2.5 ("Duplicate GPU detected", ``ncclInvalidUsage``;
NVIDIA/nccl#418).

Each strategy runs in a child process of its own (this script with ``--one``), in a session
of its own, killed with its ranks when it overruns: a hung or crashed strategy costs its own
line, not the others', and the whole check stays inside ``--budget`` seconds (default 420:
GPU ranks are spawned, not forked, and each strategy took 25-35 s on one H200).
Exits 0 whatever the lines say.  Without a CUDA GPU (and without ``--device cpu``) it prints
one line saying so and exits 0.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

BOUND = 1e-5
STEPS, LR, BATCH, WIDTH = 10, 0.05, 48, 64
MLP = dict(width=WIDTH, steps=STEPS, lr=LR)


def reference(world: int, device: str, **settings):
    """Lesson 01's reference: one process training at the batch all ``world`` ranks share."""
    from distlab.data_parallel import data_parallel as dp

    return dp.train_single(world_size=world, device=device, record_grads_at=(), **settings).params


def same_everywhere(records) -> list[dict]:
    return [r.params for r in records]          # every rank holds the whole model


def stages(records) -> list[dict]:
    from distlab.pipeline import pipeline
    return [pipeline.merge_params(records)]     # each rank holds its stage's layers


def slices(records) -> list[dict]:
    from distlab.tensor import tensor_parallel as T
    return [T.merge_params([r.params for r in records])]   # each rank holds its rows/columns


def replicas(records) -> list[dict]:
    """The mesh: each data replica's ranks together hold the whole model."""
    from distlab.pipeline import pipeline
    from distlab.tensor import tensor_parallel as T
    out = []
    for d in sorted({r.config["mesh"]["data"] for r in records}):
        mine = [r for r in records if r.config["mesh"]["data"] == d]
        tensor = mine[0].config["shape"]["tensor"]
        out.append(T.merge_params([r.params for r in mine]) if tensor > 1 else pipeline.merge_params(mine))
    return out


def mesh_shape(world: int) -> dict:
    return dict(data=2, pipeline=1, tensor=2) if world >= 4 else dict(data=world, pipeline=1, tensor=1)


class Check(NamedTuple):
    ranks: int            # for the full check: one GPU each
    settings: object      # world size -> the training function's keyword arguments
    reference: object     # world size -> train_single's (``world_size`` there: the ranks it stands for)
    gather: object        # the ranks' records -> the parameter sets to compare with the reference
    single: object = None   # (world, device, **reference) -> one process's parameters (default: lesson 01's)


def transformer_layout(world: int) -> dict:
    """Issue 36: the five-axis trainer's layout for ``world`` GPUs: pipeline x expert on 4, context on 2."""
    return ({4: dict(pipeline=2, expert=2, micro_batches=2, schedule="1f1b"), 2: dict(context=2)}.get(world, {}))


def transformer_single(world: int, device: str, **settings):
    from distlab.parallelize import trainer
    return trainer.train_single(world_size=world, **settings).params       # (on the CPU: compared there)


def assembled(records) -> list[dict]:
    from distlab.parallelize import trainer
    return [trainer.assemble(records)]          # the ranks' slices, stages and experts put together


# How each strategy is checked; the strategies themselves (name -> training function) are the
# registry's (distlab.parallelize.registry), so a strategy registered without a row here gets a MISS
# line saying so.  Settings as in the strategy's tests (tests/test_<strategy>.py), smaller.
SGD = dict(MLP, global_batch_size=BATCH)
MOMENTUM = dict(SGD, optimizer="momentum")
DEEP = dict(SGD, depth=3)
# the line transformer with top-2 experts that drop tokens (tests/test_five_axes.py), SGD
LINES = dict(width=32, depth=2, heads=4, digits=3, experts=4, top_k=2, capacity_factor=1.0, global_batch_size=16,
             steps=STEPS, lr=LR, optimizer="sgd", data=1, test_lines=32)
CHECKS = {
    "data": Check(2, lambda w: dict(SGD, method="ddp"), lambda w: SGD, same_everywhere),
    "local_sgd": Check(2, lambda w: dict(MLP, k=2, average="gradients", batch_size=BATCH // 2),  # accumulation:
                       lambda w: dict(MLP, batch_size=BATCH, steps=STEPS // 2), same_everywhere),  # k=2 per update
    "async_sgd": Check(2, lambda w: dict(MLP, batch_size=BATCH // 2),       # one server and one worker is plain
                       lambda w: dict(MLP, batch_size=BATCH // 2, world_size=1),   # SGD: the server's copy
                       lambda records: [records[0].params]),
    "pipeline": Check(2, lambda w: dict(DEEP, schedule="1f1b", micro_batches=4), lambda w: DEEP, stages),
    "torch_pipeline": Check(2, lambda w: dict(DEEP, schedule="1f1b", micro_batches=4), lambda w: DEEP, stages),
    "tensor": Check(2, lambda w: SGD, lambda w: DEEP, slices),
    "3d": Check(4, lambda w: dict(DEEP, **mesh_shape(w)), lambda w: DEEP, replicas),
    "zero": Check(2, lambda w: dict(MOMENTUM, stage=2), lambda w: MOMENTUM, same_everywhere),
    "fsdp": Check(2, lambda w: MOMENTUM, lambda w: MOMENTUM, same_everywhere),
    "deepspeed": Check(2, lambda w: dict(MOMENTUM, stage=2), lambda w: MOMENTUM, same_everywhere),
    "transformer": Check(4, lambda w: dict(LINES, **transformer_layout(w)),
                         lambda w: dict(LINES, **transformer_layout(w)), assembled, transformer_single),
}


def function(name: str):
    """The training function the registry (and so a run config) names ``name``."""
    from distlab.parallelize import registry
    return registry.get(name).fn


def strategy_names() -> list[str]:
    """Every registered strategy, in the registry's order (then any check the registry lacks)."""
    from distlab.parallelize import registry
    return list(registry.STRATEGIES) + [n for n in CHECKS if n not in registry.STRATEGIES]


# -- one strategy, in a child process ---------------------------------------------------------
def run_one(name: str, device: str, world: int) -> dict:
    """Train ``name`` on ``world`` ranks and one process; the largest difference, and what ran."""
    import warnings
    warnings.simplefilter("ignore")
    import distlab

    check = CHECKS[name]
    kwargs, ref_kwargs = check.settings(world), dict(check.reference(world))
    records = distlab.launch(function(name), world_size=world, device=device, progress="none", warm=False,
                             timeout=60, **kwargs)
    ref_world = ref_kwargs.pop("world_size", world)
    ref = {k: v.cpu() for k, v in (check.single or reference)(ref_world, device, **ref_kwargs).items()}
    diffs = [distlab.max_param_difference({k: v.cpu() for k, v in p.items()}, ref) for p in check.gather(records)]
    shape = " (" + " x ".join(f"{a} {n}" for a, n in mesh_shape(world).items()) + ")" if name == "3d" else ""
    shape = f" ({transformer_layout(world) or 'one rank'})" if name == "transformer" else shape
    return dict(diff=max(diffs), compared=len(diffs), where=f"{world} rank(s){shape}, {STEPS} steps, "
                f"{sum(p.numel() for p in ref.values())} parameters")


# -- the whole check ---------------------------------------------------------------------------
def line(name: str, diff: float, note: str) -> str:
    return f"GOAL {name}_max_diff {diff:.2g} <= {BOUND:g} {'PASS' if diff <= BOUND else 'MISS'} ({note})"


def plan(name: str, device: str, most: int) -> tuple[int, str]:
    """How many ranks ``name`` runs on here (at most ``most``: the GPUs, or ``--ranks``), and a
    note on what that checks; raises ValueError if it cannot run."""
    from distlab.processes.arguments import bind_arguments
    if name not in CHECKS:
        raise ValueError("the registry has it, but bench/gpu_check.py has no check for it: add one to CHECKS")
    full = CHECKS[name].ranks
    world = min(full, most)
    try:
        bind_arguments(function(name), world, CHECKS[name].settings(world), backend="torchrun", device=device)
    except ValueError as err:
        if world == full:
            raise
        raise ValueError(f"needs {full} ranks, {most} here, and {world} rank(s) are refused: {err}") from None
    what = {"cuda": ("GPU", "NCCL", "CUDA code path"), "cpu": ("CPU process", "gloo", "code path")}[device]
    if world == 1:
        return world, f"on 1 {what[0]}: its {what[2]}, no communication between ranks (that needs {full} ranks)"
    return world, f"over {what[1]}" + (f", {world} of the {full} ranks of the full check" if world < full else "")


def child(name: str, device: str, world: int, seconds: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--device", device, "--world", str(world)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)         # the child's session: it and its ranks
        proc.communicate()
        return dict(error=f"overran {seconds:.0f} s, killed with its ranks")
    for text in reversed(out.splitlines()):
        if text.startswith("RESULT "):
            return json.loads(text[len("RESULT "):])
    last = [t for t in (err or out).strip().splitlines() if t.strip()]
    return dict(error=f"exit {proc.returncode}: {last[-1][:300] if last else 'no output'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--only", help="comma-separated strategies (default: all of them)")
    ap.add_argument("--ranks", type=int, help="at most this many ranks a strategy (default: one a GPU; "
                    "on CPU, the full check's); --device cpu --ranks 1 rehearses a 1-GPU machine's run")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole check")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:                                     # the child: one strategy, one RESULT line
        print("RESULT " + json.dumps(run_one(args.one, args.device, args.world)), flush=True)
        return 0
    t0 = time.time()
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.device == "cuda" and gpus == 0:
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False): nothing checked; "
              "--device cpu runs the same checks on CPU processes over gloo")
        return 0
    if args.ranks is not None and args.ranks < 1:
        ap.error(f"--ranks must be at least 1, got {args.ranks}")
    full = max(c.ranks for c in CHECKS.values())
    most = min(gpus if args.device == "cuda" else full, args.ranks or full)
    names = strategy_names()
    if args.only:
        unknown = [n for n in args.only.split(",") if n not in names]
        if unknown:
            ap.error(f"unknown strategies {unknown}; choose from {', '.join(names)}")
        names = [n for n in names if n in args.only.split(",")]
    if args.device == "cuda":
        try:
            import torch.cuda.nccl
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as err:                     # the check itself will say more
            nccl = f"unknown ({type(err).__name__})"
        print(f"gpu_check: {gpus} GPU(s), {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
              f"NCCL {nccl}; at most {most} rank(s) a strategy; budget {args.budget:.0f} s", flush=True)
        if gpus < 2:
            print("gpu_check: 1 GPU: each strategy runs on 1 rank (NCCL refuses 2 ranks on one GPU, and "
                  "launch gives each rank a GPU of its own): no communication between ranks is checked",
                  flush=True)
    else:
        print(f"gpu_check: --device cpu, CPU processes over gloo; torch {torch.__version__}; "
              f"at most {most} rank(s) a strategy; budget {args.budget:.0f} s", flush=True)
    counts = {"PASS": 0, "MISS": 0, "SKIP": 0}
    for name in names:
        try:
            fn = function(name)
        except Exception as err:                     # say so in its line, and check the others
            fn, failed = None, f"{type(err).__name__}: {err}"
        supports = getattr(fn, "supports", None)
        if supports is not None and args.device not in supports:
            print(f"SKIP {name}: {fn.__module__}.{fn.__name__}.supports is {sorted(supports)}, "
                  f"without {args.device!r}", flush=True)
            counts["SKIP"] += 1
            continue
        left = args.budget - (time.time() - t0)
        try:
            if fn is None:
                raise ImportError(f"cannot import its training function: {failed}")
            world, how = plan(name, args.device, most)
        except Exception as err:
            result, how = dict(error=f"refused before start: {err}"), ""
        else:
            result = (child(name, args.device, world, min(left, 150.0)) if left > 20
                      else dict(error=f"the check's budget of {args.budget:.0f} s was spent"))
        if "error" in result:
            text = f"GOAL {name}_max_diff nan <= {BOUND:g} MISS (not run: {result['error']})"
        else:
            text = line(name, result["diff"], f"{result['where']}, {how}")
        counts[text.split()[5] if text.startswith("GOAL") else "MISS"] += 1
        print(text, flush=True)
    print(f"gpu_check: {counts['PASS']} PASS, {counts['MISS']} MISS, {counts['SKIP']} SKIP in "
          f"{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
