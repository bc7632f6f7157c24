"""What one rank of a pipeline runs: its stage's passes, the messages between stages, and their record.

Introduced in lesson 06 ("Splitting the model"); ``pipeline.py`` trains with it.  A rank does two things,
over and over, in the order its schedule says: the **forward** of a micro-batch (receive the previous
stage's activations, run its layers, send the output on; the last stage asks the model for its loss
instead: the first half of the one micro-step, ``train.step.forward_loss``) and the **backward** of one
(receive the gradient of its output, run backward, send the gradient of its input back:
``train.step.stage_backward``).  Activations travel forward with tag 2v, their gradients back with tag
2v + 1 (v: the virtual stage that sent them), over ``Worker.send``/``recv``; every pass and message is
written down with its start and end (``events``), the record lesson 06's timeline is drawn from.

Lesson 15 ("Where the time goes"): when the schedule has W passes (ZB-H1), the backward is split: B
computes only the gradient of the input, sends it back at once, and keeps what W needs
(``train.step.input_backward``); W adds the parameters' gradients later (``weight_backward``).
"""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from ..train.step import (FP32, backward, extra_losses, forward_loss, input_backward, piece_outputs,
                          stage_backward, weight_backward)


class Stage:
    """What one rank runs: its chunks of the model, the passes of a schedule, and their record.

    ``parts[v]`` is virtual stage ``v`` of the model where this rank holds it (``v % p == rank``),
    None elsewhere; ``shapes[v]`` the shape of one sample's activation leaving it.
    """

    def __init__(self, worker, parts, shapes, rank: int, peers: list[int], micro_size: int, group=None, loss=None):
        self.worker, self.parts, self.shapes, self.rank, self.p = worker, parts, shapes, rank, len(peers)
        self.loss = loss or type(parts[rank]).loss     # the model's own loss (a function: no model kept)
        self.peers, self.group = peers, group     # the global rank of each stage; their Group
        self.micro_size, self.device = micro_size, worker.device
        self.sent_bytes = 0                       # activations and gradients sent, all steps
        self.dtype = next(parts[rank].parameters()).dtype
        self.precision = FP32                 # lesson 14: set by the trainer; 16-bit precisions send 16 bits
        self.last = len(parts) - 1            # the virtual stage that computes the loss
        self.saved: dict[tuple[int, int], tuple] = {}    # (micro, chunk) -> input, output, extra losses
        self.split = False                    # lesson 15: B and W separate (a schedule with W passes)
        self.pending: dict[tuple[int, int], list] = {}   # (micro, chunk) -> what its W needs, left by B
        self.sending: list = []               # isend requests, completed at the end of the step
        self.events: list[dict] = []

    # -- messages: activations forward (tag 2v), gradients backward (tag 2v + 1) ------------
    @property
    def message_dtype(self) -> torch.dtype:
        """Lesson 14: what activations and their gradients travel in: the parameters' type in fp32, the
        compute type under mixed precision (half the bytes between stages, as Megatron sends them)."""
        return getattr(self.precision, "dtype", self.dtype)

    def _recv(self, step: int, op, virtual: int, src_virtual: int, tag: int) -> torch.Tensor:
        shape = (self.micro_size, *self.shapes[min(virtual, src_virtual)])
        buf = torch.empty(shape, dtype=self.message_dtype, device=self.device)
        t0 = time.time()
        self.worker.recv(buf, self.peers[src_virtual % self.p], tag=tag)
        self._note(step, "recv", op, t0)
        return buf

    def _send(self, step: int, op, tensor: torch.Tensor, dst_virtual: int, tag: int) -> None:
        t0 = time.time()
        tensor = tensor.to(self.message_dtype).contiguous()
        self.sent_bytes += tensor.numel() * tensor.element_size()
        self.sending.append(self.worker.send(tensor, self.peers[dst_virtual % self.p], tag=tag, async_op=True))
        self._note(step, "send", op, t0)

    def _note(self, step: int, kind: str, op, t0: float) -> None:
        self.worker.synchronize()             # (on a GPU: the pass's kernels done before its end is read)
        self.events.append({"step": step, "kind": kind, "micro": op.micro, "chunk": op.chunk, "pass": op.kind,
                            "start": t0, "end": time.time(), "held": len(self.saved)})

    # -- the two passes (lesson 15: the backward's second half, W, apart) -----------------------
    def forward(self, step: int, op, xs, ys, m: int):
        v = op.chunk * self.p + self.rank
        inp = xs[op.micro] if v == 0 else self._recv(step, op, v, v - 1, tag=2 * (v - 1)).requires_grad_()
        t0 = time.time()
        result, extra = None, None
        with piece_outputs(self.parts[v]) if self.split else nullcontext([]) as kept:   # what W will need
            if v == self.last:          # the loss of the whole batch is the mean of the m micro-batches'
                y = ys[op.micro]        # (the one micro-step's forward half, train/step.py)
                out, loss, accuracy = forward_loss(self.parts[v], inp, y, loss=self.loss, share=m,
                                                   precision=self.precision)
                result = (loss / m, accuracy * len(y))
            else:
                with self.precision.autocast():
                    out = self.parts[v](inp)
                    extra = extra_losses(self.parts[v])      # what its layers add to the loss (experts), now
        self.saved[(op.micro, op.chunk)] = (inp, out, extra, kept)
        self._note(step, "F", op, t0)
        if v != self.last:
            self._send(step, op, out.detach(), v + 1, tag=2 * v)
        return result

    def backward(self, step: int, op) -> None:
        v = op.chunk * self.p + self.rank
        key = (op.micro, op.chunk)
        inp, out, extra, kept = self.saved[key] if self.split else self.saved.pop(key)   # split: W frees it
        grad = None if v == self.last else self._recv(step, op, v, v + 1, tag=2 * v + 1)
        t0 = time.time()
        if self.split:                      # lesson 15: B alone, the input's gradient; W comes later
            grad = None if grad is None else grad.to(out.dtype)
            inp_grad, self.pending[(op.micro, op.chunk)] = input_backward(
                out, grad, inp if v > 0 else None, kept, extra, share=self.m, precision=self.precision)
        elif v == self.last:
            backward(out, self.precision)   # from the loss (scaled, fp16): adds this micro-batch's gradients
        else:
            stage_backward(out, grad.to(out.dtype), extra, share=self.m, precision=self.precision)
        self._note(step, "B", op, t0)
        if v > 0:
            self._send(step, op, inp_grad if self.split else inp.grad, v - 1, tag=2 * (v - 1) + 1)

    def weight(self, step: int, op) -> None:
        """Lesson 15: W, the parameters' half of micro-batch ``op.micro``'s backward; frees what it held."""
        t0 = time.time()
        weight_backward(self.pending.pop((op.micro, op.chunk)), share=self.m, precision=self.precision)
        del self.saved[(op.micro, op.chunk)]
        self._note(step, "W", op, t0)

    def run(self, step: int, ops, xs, ys, m: int) -> tuple[float, int]:
        """One training step: the schedule's passes in order; returns (loss, correct) where known."""
        loss, correct, self.m = 0.0, 0, m
        computes_loss = any(op.chunk * self.p + self.rank == self.last for op in ops)
        self.split = any(op.kind == "W" for op in ops)
        for op in ops:
            if op.kind == "F":
                got = self.forward(step, op, xs, ys, m)
                if got is not None:
                    loss, correct = loss + got[0], correct + got[1]
            elif op.kind == "B":
                self.backward(step, op)
            else:
                self.weight(step, op)
        for request in self.sending:
            request.wait()
        self.sending.clear()
        return (loss, correct) if computes_loss else (float("nan"), 0)

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Test accuracy: the test set forward through every stage once, shared with all ranks."""
        mine = [part for part in self.parts if part is not None]
        for part in mine:
            part.eval()
        for v in range(self.rank, len(self.parts), self.p):
            shape = (len(x), *self.shapes[v - 1]) if v else None
            inp = x if v == 0 else torch.empty(shape, dtype=self.message_dtype, device=self.device)
            if v:
                self.worker.recv(inp, self.peers[(v - 1) % self.p], tag=10_000 + v - 1)
            with self.precision.autocast():
                out = self.parts[v](inp)
            if v != self.last:
                self.worker.send(out.to(self.message_dtype).contiguous(), self.peers[(v + 1) % self.p],
                                 tag=10_000 + v)
        accuracy = torch.zeros(1, dtype=torch.float64, device=self.device)
        if self.last % self.p == self.rank:
            accuracy[0] = self.loss(out, y)[1]
        self.worker.broadcast(accuracy, self.peers[self.last % self.p], group=self.group)
        for part in mine:
            part.train()
        return accuracy.item()
