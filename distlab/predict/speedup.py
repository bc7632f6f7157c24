"""The speedup predicted: Amdahl's law, and a step's time at N ranks from the alpha-beta model.

Introduced in lesson 05 (``notebooks/05_does_distributing_pay.ipynb``).  ``measure.speedup`` reads
the speedups measured on real ranks and fits these models' constants to them; this module holds
the models themselves.

* **Amdahl's law** (Amdahl 1967, "Validity of the single processor approach to achieving large
  scale computing capabilities"): if a fraction ``s`` of the work does not shrink with N workers,
  the speedup is ``1 / (s + (1 - s) / N)``, at most ``1 / s`` however many workers are added.
* **alpha-beta**: every step, each rank computes on its share of the batch (work that shrinks as
  ranks are added, in strong scaling) and all-reduces its *whole* gradient (work that grows with
  N), priced by lesson 03's model (``alpha_beta.all_reduce_seconds``).
"""
from __future__ import annotations

from .alpha_beta import all_reduce_seconds


def amdahl_speedup(n, serial_fraction: float):
    """Lesson 05: Amdahl's law (Amdahl 1967): a fraction ``s`` of the work does not shrink with N
    workers, so N workers are ``1 / (s + (1 - s) / N)`` times as fast as one."""
    return 1.0 / (serial_fraction + (1.0 - serial_fraction) / n)


def predict_step_seconds(one: dict, world_size: int, alpha: float, beta: float,
                         compute_s: float | None = None) -> float:
    """Lesson 05: a step's time at ``world_size`` ranks, from the one-rank row and alpha-beta.

    ``one`` is what one rank measured: ``compute_s`` (forward and backward), ``other_s`` (the
    rest), ``grad_bytes``, ``n_tensors`` and ``scaling``.  Compute shrinks with N in strong scaling
    (each rank gets 1/N of the batch) and stays in weak scaling; the rest of the step (the
    optimiser updates every parameter on every rank, data handling) does not shrink; the
    all-reduce grows with N.  ``compute_s``, when given, replaces that assumed compute by one
    measured at ``world_size`` ranks (``measure.speedup.compute_ratios`` says how far they differ).
    """
    if compute_s is None:
        compute_s = one["compute_s"] / world_size if one["scaling"] == "strong" else one["compute_s"]
    comm = all_reduce_seconds(one["grad_bytes"], world_size, alpha, beta, one["n_tensors"])
    return compute_s + one["other_s"] + comm


def predicted_speedup(one: dict, world_size: int, alpha: float, beta: float,
                      compute_s: float | None = None) -> float:
    """Lesson 05: samples/s at ``world_size`` ranks over one rank, as ``predict_step_seconds`` sees it."""
    samples = 1 if one["scaling"] == "strong" else world_size
    return samples * one["step_s"] / predict_step_seconds(one, world_size, alpha, beta, compute_s)
