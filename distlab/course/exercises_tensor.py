"""Lesson 07's build-it exercise: the learner writes the column- and row-parallel layers, real ranks train them.

The learner writes one function, ``my_split(worker, fc2, fc3) -> (new_fc2, new_fc3)``: given the
whole layers ``fc2`` and ``fc3`` of the depth-3 MLP, it returns this rank's versions: ``fc2`` split
column-wise (this rank's output features, no communication forward, an all-reduce of the input's
gradient backward: Megatron's ``f``) and ``fc3`` split row-wise (this rank's input features, an
all-reduce of the partial sums forward, the bias added once: Megatron's ``g``).  Each must keep its
slices as parameters named ``weight`` and ``bias``, as ``nn.Linear`` does.

The checker sends the function to two real ranks (``course.build``), where lesson 07's training
(``tensor_parallel.train_on`` with ``split=``) uses it in place of the library's layers; then it
checks each rank's slices' shapes, puts them together (``tensor_parallel.merge_params``) and compares
them with one process training the whole model (``distlab.compare``), naming the first parameter
that differs and by how much.
"""
from __future__ import annotations

EXERCISE = "column- and row-parallel layers"
SETUP = dict(width=64, global_batch_size=64, lr=0.1, seed=0)
STEPS = 1              # one update: only the parameters a mistake touches move differently
TASK = "distlab.course.exercises_tensor:train_split"


def train_split(worker, fn, **settings):
    """Lesson 07: on a rank, lesson 07's training with the learner's layers (``fn``) splitting the block."""
    from ..tensor import tensor_parallel
    from ..train.mesh import Mesh

    return tensor_parallel.train_on(Mesh(worker, tensor=worker.world_size), worker, split=fn,
                                    method="tensor parallel (yours)", **settings)


def _shapes_wrong(records, width: int) -> str | None:
    from ..tensor.tensor_parallel import SPLIT

    t = len(records)
    for r in records:
        for name, dim in (*SPLIT.items(), ("fc3.bias", None)):
            whole = (width, width) if name.endswith("weight") else (width,)
            want = tuple(n // t if d == dim else n for d, n in enumerate(whole))
            got = tuple(r.params[name].shape) if name in r.params else None
            if got != want:
                side = "rows (output features)" if dim == 0 else "columns (input features)"
                cut = "whole on every rank" if dim is None else f"cut along dimension {dim}: {side}"
                return (f"rank {r.rank}'s {name} has shape {got}, expected {want} ({cut}); "
                        f"its parameters are {sorted(r.params)}")
    return None


def split_layers(fn, world_size: int = 2) -> bool | None:
    """Lesson 07: check the learner's ``fn(worker, fc2, fc3) -> (fc2, fc3)`` on real ranks against one process."""
    from .. import compare
    from ..data_parallel.data_parallel import train_single
    from ..tensor import tensor_parallel
    from .build import attempt

    records = attempt(EXERCISE, fn, TASK, world_size=world_size, steps=STEPS, **SETUP)
    if not isinstance(records, list):
        return records          # None: not answered yet; False: it failed, and why was said
    wrong = _shapes_wrong(records, SETUP["width"])
    if wrong:
        print(f"{EXERCISE}: not quite. {wrong}")
        return False
    one = train_single(model="mlp", depth=3, steps=STEPS, record_grads_at=(), **SETUP)
    report = compare(tensor_parallel.merge_params([r.params for r in records]), one.params,
                     names=(f"your split on {world_size} ranks", "one process"))
    if not report.same:
        apart = {report.name, *report.others}
        why = ("The output layer moved differently too: the block's output is wrong: look at the forward "
               "(each rank's partial sum, all-reduced, and the bias added once, after the sum)"
               if apart & {"out.weight", "out.bias"} else
               "The output layer agrees, so the forward is right; the gradients flowing back through the block "
               "are not: f's backward sums the input's gradient over the ranks, g's passes its gradient on as it is")
        print(f"{EXERCISE}: not quite, after {STEPS} step {report}. {why}.")
        return False
    print(f"{EXERCISE}: correct. On {world_size} real ranks your layers trained, in {STEPS} step, to one "
          f"process's parameters.")
    return True
