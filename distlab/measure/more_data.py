"""Lesson 05b: more data, more accuracy.  Does a bigger training set give a better model, and do
more workers get there sooner?

The insurance company's question, measured on real handwriting: 5,000 real 28x28 MNIST digits
(``datasets.load_mnist_5k``: 4,000 to train on, 1,000 held out and never trained on), shared by
the lesson and ``bench/more_data.py``:

1. ``learning_curve``: the same model trained a fixed number of **epochs** on the first n training
   digits, for growing n, several seeds each (initial weights, batch order, distortions).  Epochs,
   not steps: a set twice as large is read as many times over, so the computation grows with the
   data, as it must for more data to be read at all.  One process trains each
   (``data_parallel.train_single``, the loop every rank runs): N ranks averaging gradients take
   exactly the steps of one process at their global batch (lesson 01), so the accuracy a data set
   buys does not depend on how many workers compute it.  ``dataset="distorted_mnist_5k"``: the
   4,000 real digits and distorted copies of them beyond (Simard et al. 2003, ``distorted.SIMARD_28``).
2. ``reads_distorted``: does a distorted digit keep its label?  A model trained on the real digits
   only, read on distorted copies of digits it knows and of held-out ones.
3. ``time_to_accuracy``: what the workers change is the *time*.  Real data-parallel jobs
   (``distlab.launch`` of ``data_parallel.train``) on 1 and 2 ranks at one global batch, repeats
   interleaved, each evaluated every few steps: the training seconds until the test accuracy first
   reaches ``target``; and, on the same ranks, the machine's probe ceiling (``ceiling``).

Every "more data helped", "sooner" or "no clear difference" comes from ``distlab.verdict``, the
course's one rule, over seeds or repeats (``curve_verdicts``, ``speed_verdicts``).
"""
from __future__ import annotations

import contextlib
import statistics

from ..verdict import against, verdict

SIZES = (250, 500, 1_000, 2_000, 4_000)        # real training digits (mnist_5k has 4,000)
DISTORTED_SIZES = (4_000, 16_000)              # the 4,000 real ones, then 3 distorted copies of each
MODEL = dict(model="mlp", width=128, global_batch_size=64, lr=0.05, optimizer="momentum")


def epoch_steps(samples: int, epochs: int, global_batch_size: int) -> int:
    """Lesson 05b: the steps of ``epochs`` passes over ``samples`` (``data.steps_per_epoch``'s mini-batches)."""
    from ..data import steps_per_epoch

    return epochs * max(1, steps_per_epoch(samples, 1, global_batch_size))


@contextlib.contextmanager
def one_thread():
    """As one rank does: one core, no fighting over them (two threads on a busy machine can be many times slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def learning_curve(sizes=SIZES, seeds=(0, 1, 2), *, dataset: str = "mnist_5k", epochs: int = 10,
                   **model) -> list[dict]:
    """Lesson 05b: test accuracy after ``epochs`` epochs on the first n training digits, per size and seed.

    Returns rows ``{"dataset", "samples", "seed", "epochs", "steps", "accuracy", "seconds"}``.
    ``model``: ``MODEL``'s keys (model, width, global_batch_size, lr, optimizer) to change.
    """
    import time

    from ..data_parallel import data_parallel

    cfg = {**MODEL, **model}
    for n in sizes:
        if n < cfg["global_batch_size"]:
            raise ValueError(f"size {n} is smaller than the batch ({cfg['global_batch_size']})")
    rows = []
    with one_thread():
        for n in sizes:
            steps = epoch_steps(n, epochs, cfg["global_batch_size"])
            for seed in seeds:
                t0 = time.perf_counter()
                record = data_parallel.train_single(**cfg, steps=steps, seed=seed, dataset=dataset, samples=n,
                                                    record_grads_at=())
                rows.append({"dataset": dataset, "samples": n, "seed": seed, "epochs": epochs, "steps": steps,
                             "accuracy": record.test_accuracy, "seconds": time.perf_counter() - t0})
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Lesson 05b: per data set and size, the mean test accuracy over seeds, its median and range.

    ``model`` names the curve (the data set) for the pictures; the verdicts use the runs themselves.
    """
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        for n in sorted({r["samples"] for r in rows if r["dataset"] == dataset}):
            acc = [r["accuracy"] for r in rows if r["dataset"] == dataset and r["samples"] == n]
            out.append({"dataset": dataset, "model": dataset, "samples": n, "mean": statistics.fmean(acc),
                        "median": statistics.median(acc), "low": min(acc), "high": max(acc), "seeds": len(acc)})
    return out


def said(v, more: str) -> str:
    """Lesson 05b: a verdict of more data against less in the company's words."""
    return "no clear difference" if v.winner is None else "more data helped" if v.winner == more else "more data hurt"


def curve_verdicts(rows: list[dict], dataset: str | None = None) -> list[dict]:
    """Lesson 05b: each size against the next smaller, and the largest against the smallest, by the one rule.

    Returns ``{"small", "large", "verdict", "said"}`` rows; the seeds of a size are its runs.
    """
    dataset = dataset or rows[0]["dataset"]
    acc = {}
    for r in rows:
        if r["dataset"] == dataset:
            acc.setdefault(r["samples"], []).append(r["accuracy"])
    sizes = sorted(acc)
    pairs = list(zip(sizes, sizes[1:])) + ([(sizes[0], sizes[-1])] if len(sizes) > 2 else [])
    out = []
    for small, large in pairs:
        names = (f"{large:,} digits", f"{small:,} digits")
        v = verdict(acc[large], acc[small], names=names, better="higher")
        out.append({"small": small, "large": large, "verdict": v, "said": said(v, names[0])})
    return out


def reads_distorted(seeds=(0, 1, 2), *, epochs: int = 10, copies: int = 1_000, **model) -> list[dict]:
    """Lesson 05b: a model trained on the 4,000 real digits only, read on distorted copies.

    Per seed: its test accuracy on the real held-out digits and on distorted copies of them
    (``distorted.SIMARD_28``, the distortion ``distorted_mnist_5k`` adds), and its accuracy on the
    first ``copies`` real training digits and on the distorted copies of them that the larger sets
    train on.  A label that did not survive the distortion is a copy no model can read.
    """
    import torch

    from ..data_parallel import data_parallel
    from ..datasets import load_dataset
    from ..distorted import SIMARD_28, distort, uniform
    from ..models import build_model
    from ..train.loop import evaluate

    cfg = {**MODEL, **model}
    real = load_dataset("mnist_5k")
    bent = load_dataset("distorted_mnist_5k", 2 * real.n_train)
    copies = min(copies, real.n_train)
    x_copy, y_copy = bent.train_batch(torch.arange(real.n_train, real.n_train + copies))   # sources 0..copies-1
    rows = []
    for seed in seeds:
        with one_thread():
            record = data_parallel.train_single(**cfg, seed=seed, dataset="mnist_5k", record_grads_at=(),
                                                steps=epoch_steps(real.n_train, epochs, cfg["global_batch_size"]))
        net = build_model(cfg["model"], cfg["width"], seed=seed, side=real.side)
        net.load_state_dict(record.params)
        noise = uniform(10_000 + seed, torch.arange(len(real.y_test)), 2 * real.side ** 2 + 5)
        x_test_bent = distort(real.x_test, noise, SIMARD_28)
        rows.append({"seed": seed, "test": evaluate(net, real.x_test, real.y_test),
                     "test_distorted": evaluate(net, x_test_bent, real.y_test),
                     "train": evaluate(net, real.x_train[:copies], real.y_train[:copies]),
                     "train_distorted": evaluate(net, x_copy, y_copy)})
    return rows


def time_to_accuracy(target: float = 0.9, world_sizes=(1, 2), *, dataset: str = "distorted_mnist_5k",
                     samples: int = 16_000, epochs: int = 2, evaluate_every: int = 25, repeats: int = 3,
                     warm: bool | str = "auto", probe: bool = True, **model) -> dict:
    """Lesson 05b: real data-parallel training on each world size, the seconds to ``target``.

    Each repeat launches every world size once (the order turns from repeat to repeat, so that a
    busy moment of a shared machine hits both), with the repeat's seed: on every world size the
    same global batches, so the same accuracy after each step; only the time differs.  Returns
    ``{world_size: {"seconds_to_target": [...], "curves": [[(step, seconds, accuracy), ...], ...]}}``
    and ``"probe"``: per repeat, the machine's probe ceiling (``ceiling.compute_alone``: ranks
    multiplying matrices with no communication; the largest world size's work per second over the
    smallest's), measured on the same warm ranks right after that repeat's trainings.
    """
    from ..data_parallel import data_parallel
    from ..processes.launcher import launch
    from .ceiling import compute_alone

    if not 0 < target < 1:
        raise ValueError(f"target is a test accuracy between 0 and 1, got {target!r}")
    sizes = list(world_sizes)
    if probe and len(sizes) < 2:
        raise ValueError("probe compares world sizes: give at least two")
    cfg = {**MODEL, **model}
    steps = epoch_steps(samples, epochs, cfg["global_batch_size"])
    found = {n: {"seconds_to_target": [], "curves": []} for n in sizes}
    ceilings = []
    for r in range(repeats):
        probe_s = {}
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            record = launch(data_parallel.train, world_size=n, progress="none", warm=warm, **cfg, steps=steps,
                            method="ddp", seed=r, dataset=dataset, samples=samples,
                            evaluate_every=evaluate_every, record_grads_at=())[0]
            curve = list(record.evaluations)
            found[n]["curves"].append(curve)
            found[n]["seconds_to_target"].append(next((t for _, t, a in curve if a >= target), None))
            if probe:                                  # the slowest rank's seconds for the same work
                probe_s[n] = max(launch(compute_alone, world_size=n, progress="none", warm=warm))
        if probe:
            few, many = min(sizes), max(sizes)
            ceilings.append(many / few * probe_s[few] / probe_s[many])
    return {"target": target, "steps": steps, "epochs": epochs, "samples": samples, "dataset": dataset,
            **({"probe": ceilings} if probe else {}), **found}


def speedup_to_target(result: dict, fast: int = 2, slow: int = 1) -> list[float]:
    """Lesson 05b: per repeat, seconds to target on ``slow`` ranks over seconds on ``fast`` ranks."""
    return [a / b for a, b in zip(result[slow]["seconds_to_target"], result[fast]["seconds_to_target"])
            if a is not None and b is not None]


def speed_verdicts(result: dict, fast: int = 2, slow: int = 1) -> dict:
    """Lesson 05b: did ``fast`` ranks reach the target sooner, and how far below the probe ceiling?

    Both by the one rule on the per-repeat speed-ups (``log=True``: ratios): ``"sooner"`` against 1
    (no gain), ``"ceiling"`` against the probe ceilings measured in the same repeats.
    """
    ratios = speedup_to_target(result, fast, slow)
    name = f"{fast} ranks' speed-up to {result['target']:.0%}"
    out = {"ratios": ratios,
           "sooner": against(ratios, 1.0, names=(name, "no gain"), better="higher", log=True)}
    if "probe" in result:
        out["ceiling"] = verdict(ratios, result["probe"], names=(name, "probe ceiling"), better="higher", log=True)
    return out
