"""What the training loop does besides training: metrics, checkpoints and resuming, for every strategy.

Introduced in lesson 10 (failure is normal at scale).  ``loop.train_steps`` drives every
strategy through the same ``Logbook``, so whatever a strategy's step is (an all-reduce, a
pipeline schedule, DeepSpeed's engine), its run writes the same metrics file and keeps
checkpoints that resume it exactly.

A checkpoint holds ``run.model``'s parameters and ``run.optimizer``'s state (what every strategy
has), plus what the strategy's ``state_dict(run)`` adds: what it keeps beyond them, such as
DeepSpeed's fp32 master copy of this rank's shard, and what the precision keeps (lesson 14: an fp16
loss scaler's scale and its count of clean steps).  The mini-batches are a function of
(seed, step), so the seed and the step are the sampler's state.
"""
from __future__ import annotations

from ..long_runs.checkpoint import Checkpointer
from ..long_runs.metrics import MetricsLog


class Logbook:
    """Lesson 10: one rank's metrics and checkpoints, kept by the loop around a strategy's steps.

    Created once the strategy is prepared, it resumes from the newest checkpoint if the job keeps
    them (``first`` is the step to start from); after each step (``step_done``) it writes the
    rank's metrics line (``metrics.MetricsLog``) and saves a checkpoint when one is due.
    """

    def __init__(self, run, strategy, steps: int):
        worker, record = run.worker, run.record
        self.run, self.strategy, self.steps = run, strategy, steps
        self.saver = Checkpointer.of(worker, record.config)
        self.sampler = {"seed": record.config.get("seed")}
        self.first = 0
        if self.saver:
            self.first = self.saver.resume(run.model, run.optimizer, self.sampler,
                                           load_extra=lambda state: self._load_extra(state))
        record.resumed_from = self.first or None
        self.log = MetricsLog(worker, steps, resumed_from=record.resumed_from, tensorboard=worker.tensorboard)

    def step_done(self, done: int, **metrics) -> None:
        self.log.step(done, **metrics)
        if self.saver and (saved := self.saver.after_step(done, self.steps, self.run.model, self.run.optimizer,
                                                          self.sampler,
                                                          extra=lambda: {**self.strategy.state_dict(self.run),
                                                                         **self.run.precision.state_dict()})):
            self.log.write("checkpoint", **saved)

    def _load_extra(self, state: dict) -> None:
        """Lesson 10: give the strategy what it saved; lesson 14: the loss scaler's state too."""
        self.strategy.load_state_dict(self.run, state)
        self.run.precision.load_state_dict(state)

    def close(self, test_accuracy: float) -> None:
        self.log.close(self.steps, test_accuracy)
