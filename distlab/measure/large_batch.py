"""Large batches: what more ranks do to the optimisation, not to the clock.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``, section 5).

``scaling`` asks whether N ranks finish a step sooner.  This module asks the other half of
"does distributing pay?": does the job still learn as well?  N ranks of batch B take exactly
the steps of one process at batch N*B (lesson 01), so a fixed number of epochs becomes N
times fewer, larger steps, and accuracy falls unless the learning rate follows.

It lives apart from ``scaling`` because it starts no processes and times nothing: it trains
with ``data_parallel.train_single`` in this process and compares accuracies.

``large_batch_study`` tries three rules for the learning rate (keep it; the linear scaling
rule; linear scaling with the warm-up of ``data_parallel.warmup_lr``) and returns plain
rows, which ``widgets.speedup.large_batch_figure`` draws.
"""
from __future__ import annotations

from ..data import load_digits, steps_per_epoch
from ..data_parallel.data_parallel import train_single
from ..processes.cores import torch_threads


def large_batch_study(world_sizes=(1, 2, 4, 8), *, batch_size: int = 8, epochs: int = 2,
                      lr: float = 0.1, warmup_epochs: float = 0.5, model: str = "mlp",
                      width: int = 64, seeds=(0, 1)) -> list[dict]:
    """Lesson 05: test accuracy after a fixed number of epochs, for N ranks of ``batch_size``.

    N ranks take the steps of one process at batch N*B (lesson 01), so this runs
    ``train_single`` in this process.  A fixed number of epochs means N times fewer
    steps; three rules for the learning rate: keep it (``"same lr"``), multiply it by N
    (``"linear scaling"``), or multiply it by N and warm up to it from lr over
    ``warmup_epochs`` (``"linear + warm-up"``).  ``accuracy`` is the mean over ``seeds``;
    ``accuracies`` keeps one number per seed (independent runs, for ``distlab.verdict``).
    """
    n = load_digits().n_train
    rows = []
    with torch_threads(1):         # tiny steps: a second thread costs more than it gives
        for world in world_sizes:
            per_epoch = steps_per_epoch(n, world, batch_size)
            rules = [("same lr", lr, 0), ("linear scaling", lr * world, 0),
                     ("linear + warm-up", lr * world, max(1, round(warmup_epochs * per_epoch)))]
            for rule, rate, warm in rules:
                if world == 1 and rule != "same lr":      # at N = 1 the rules are the same run
                    rows.append(dict(rows[-1], rule=rule))
                    continue
                accs = [train_single(world_size=world, batch_size=batch_size, lr=rate,
                                     steps=epochs * per_epoch, warmup_steps=warm, model=model,
                                     width=width, seed=s, record_grads_at=()).test_accuracy
                        for s in seeds]
                rows.append(dict(world_size=world, rule=rule, lr=rate, warmup_steps=warm, epochs=epochs,
                                 steps=epochs * per_epoch, global_batch_size=world * batch_size,
                                 accuracy=sum(accs) / len(accs), accuracies=tuple(accs)))
    return rows
