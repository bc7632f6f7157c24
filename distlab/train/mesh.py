"""One named mesh: the job's ranks as a grid whose axes have names, and every group a strategy needs.

Introduced in lesson 07 ("Tensor and 3D parallelism").  Each way of splitting the work is an
*axis* of one grid of ranks: ``data`` replicas, ``pipeline`` stages, ``expert`` groups (experts
split across ranks), ``context`` slices (a long sequence split across ranks) and ``tensor``
slices of every layer.  The grid is the list of ranks reshaped to the axis sizes, the first axis
outermost and ``tensor`` innermost, so that the ranks which talk inside every layer are
neighbours (on a cluster: the same machine).  An axis of size 1 is allowed: that way of
splitting is simply not used, and its group is the rank alone.

A strategy never builds groups itself: it asks the mesh, built once per run,

    mesh = Mesh(worker, data=-1, tensor=2)    # -1: the ranks the other axes leave (here 2 of 4)
    mesh.group("tensor")       # a processes.worker.Group, for the Worker's collectives
    mesh.group("data", "context")   # a *purpose* group: the ranks that differ only along those axes
    mesh.coordinates           # {"data": 1, "pipeline": 0, ..., "tensor": 0}
    mesh.peers("data")         # the ranks that differ from this one only along "data"
    mesh.share()               # (which share of the batch this rank trains, how many shares there are)

Lesson 12 onwards needs groups of several axes, named by what they are for rather than by one axis
(torchtitan's ``parallel_dims`` derives them the same way): a parameter that sees only this rank's
piece of the line *and* only this replica's lines has its gradient summed over ``data x context``;
an expert's, which already holds its expert group's tokens, over ``data`` alone.  The mesh makes every
such combination once, when it is built (making a group is itself collective, so it cannot wait
until a stage that holds some parameter first asks for it).  ``BATCH_AXES`` are the axes whose ranks
train different samples: data replicas, and the expert group (each of its ranks routes lines of its
own, as torchtitan's expert parallelism borrows its ranks from data parallelism).

On torchrun the groups come from PyTorch's own ``DeviceMesh`` (``init_device_mesh``, kept as
``mesh.device_mesh`` for PyTorch's tensor-parallel and FSDP APIs); on Horovod each group is a
*process set*.  ``check_mesh`` is the static check that ``validate_args`` runs before any
process starts.
"""
from __future__ import annotations

import itertools
import math

import torch

from ..checks import check_int

AXES = ("data", "pipeline", "expert", "context", "tensor")   # outermost first
BATCH_AXES = ("data", "expert")      # the axes whose ranks train different samples of each batch
REST = -1                            # an axis size that means "the ranks the other axes leave"


def check_mesh(world_size: int, sizes) -> dict[str, int]:
    """Lesson 07: the size of every axis (1 where none is given), checked against the job.

    ``sizes`` is a dict or a list of ``(axis, size)`` pairs (as a config file may give them).  One axis
    may be ``-1`` (``REST``, lesson 12): it gets the ranks the others leave.  Raises ``ValueError`` for an
    unknown axis, an axis named twice, a size that is not a positive integer (or -1, once), or sizes
    whose product is not the number of ranks.
    """
    pairs = list(sizes.items()) if isinstance(sizes, dict) else [tuple(p) for p in sizes]
    names = [name for name, _ in pairs]
    for name in names:
        if name not in AXES:
            raise ValueError(f"unknown mesh axis {name!r}; the axes are {', '.join(AXES)}")
        if names.count(name) > 1:
            raise ValueError(f"mesh axis {name!r} is named twice; give each axis once")
    rest = [name for name, size in pairs if size == REST and not isinstance(size, bool)]
    if len(rest) > 1:
        raise ValueError(f"only one mesh axis may be -1 (the ranks the others leave), not {' and '.join(rest)}")
    for name, size in pairs:
        if name not in rest:
            check_int(name, size)
    if rest:
        others = math.prod(size for name, size in pairs if name not in rest)
        if world_size % others:
            shown = " x ".join(f"{name} {size}" for name, size in pairs if name not in rest)
            raise ValueError(f"{shown} = {others} ranks does not divide the world size {world_size}, so "
                             f"{rest[0]}=-1 (the ranks the others leave) has no whole size")
        pairs = [(name, world_size // others if name in rest else size) for name, size in pairs]
    full = {axis: dict(pairs).get(axis, 1) for axis in AXES}
    if math.prod(full.values()) != world_size:
        shown = " x ".join(f"{name} {size}" for name, size in pairs) or "no axes"
        raise ValueError(f"a mesh of {shown} = {math.prod(full.values())} ranks does not match the world "
                         f"size {world_size}: the axis sizes must multiply to the number of ranks")
    return full


def layout(sizes: dict[str, int]) -> torch.Tensor:
    """Lesson 07: which rank sits where: ``layout(sizes)[d, p, e, c, t]`` (axes in ``AXES`` order)."""
    return torch.arange(math.prod(sizes.values())).reshape(*(sizes[a] for a in AXES))


def lines(sizes: dict[str, int], axis: str) -> list[list[int]]:
    """Lesson 07: the groups along ``axis``: lines through the grid, each one process group."""
    moved = layout(sizes).movedim(AXES.index(axis), -1)
    return [row.tolist() for row in moved.reshape(-1, moved.shape[-1])]


def coordinates(sizes: dict[str, int], rank: int) -> dict[str, int]:
    """Lesson 07: where ``rank`` sits, ``{axis: index}``."""
    return dict(zip(AXES, (layout(sizes) == rank).nonzero()[0].tolist()))


def blocks(sizes: dict[str, int], axes) -> list[list[int]]:
    """Lesson 12: the groups spanned by several ``axes`` at once: each is the ranks that differ only
    along those axes (a line for one axis, a sheet for two, ...), ranks in order."""
    grid = layout(sizes)
    moved = grid.permute(*[i for i, a in enumerate(AXES) if a not in axes],
                         *[AXES.index(a) for a in AXES if a in axes])
    size = math.prod(sizes[a] for a in axes)
    return [sorted(row) for row in moved.reshape(-1, size).tolist()]


def wide_combinations(sizes: dict[str, int]) -> list[tuple[str, ...]]:
    """Lesson 12: every combination of two or more axes longer than one rank, in a fixed order (every
    rank makes the same groups in the same order)."""
    wide = [a for a in AXES if sizes[a] > 1]
    return [combo for n in range(2, len(wide) + 1) for combo in itertools.combinations(wide, n)]


class Mesh:
    """Lesson 07: this rank's place in the named grid, and its group along every axis.

    Every rank of the job builds it once, at the start of a run, with the same sizes (building
    groups is itself collective: every rank makes every group, in the same order).
    """

    def __init__(self, worker, **sizes: int):
        self.sizes = check_mesh(worker.world_size, sizes)
        self.rank = worker.rank
        self.coordinates = coordinates(self.sizes, worker.rank)
        self.groups, self.device_mesh = worker.mesh_groups(layout(self.sizes), AXES)
        for combo in wide_combinations(self.sizes):     # the purpose groups (lesson 12), made once by every rank
            self.groups[combo] = worker.purpose_group(blocks(self.sizes, combo), combo, self.device_mesh)

    def group(self, *axes: str):
        """This rank's group along ``axes`` (a ``processes.worker.Group``): one axis's line, or the
        ranks that differ only along several (lesson 12).  Axes of one rank add nothing."""
        for axis in axes:
            if axis not in AXES:
                raise ValueError(f"unknown mesh axis {axis!r}; the axes are {', '.join(AXES)}")
        wide = tuple(a for a in AXES if a in axes and self.sizes[a] > 1)
        if len(wide) < 2:
            return self.groups[wide[0] if wide else axes[0]]
        return self.groups[wide]

    def share(self) -> tuple[int, int]:
        """Lesson 12: ``(index, count)``: this rank trains the ``index``-th of ``count`` equal shares of
        every batch.  The batch is cut over ``BATCH_AXES`` (data replicas, and the expert group)."""
        index = 0
        for axis in BATCH_AXES:
            index = index * self.sizes[axis] + self.coordinates[axis]
        return index, math.prod(self.sizes[a] for a in BATCH_AXES)

    def peers(self, axis: str) -> list[int]:
        """The ranks that differ from this one only along ``axis`` (itself included), in order."""
        return list(self.group(axis).ranks)

    def size(self, axis: str) -> int:
        return self.sizes[axis]

    def __repr__(self) -> str:
        shape = " x ".join(f"{a} {s}" for a, s in self.sizes.items() if s > 1) or "one rank"
        return f"Mesh({shape}; rank {self.rank} at {self.coordinates})"
