"""One named mesh: the job's ranks as a grid whose axes have names, and every group a strategy needs.

Introduced in lesson 07 ("Tensor and 3D parallelism").  Each way of splitting the work is an
*axis* of one grid of ranks: ``data`` replicas, ``pipeline`` stages, ``expert`` groups (experts
split across ranks), ``context`` slices (a long sequence split across ranks) and ``tensor``
slices of every layer.  The grid is the list of ranks reshaped to the axis sizes, the first axis
outermost and ``tensor`` innermost, so that the ranks which talk inside every layer are
neighbours (on a cluster: the same machine).  An axis of size 1 is allowed: that way of
splitting is simply not used, and its group is the rank alone.

A strategy never builds groups itself: it asks the mesh, built once per run,

    mesh = Mesh(worker, data=2, tensor=2)
    mesh.group("tensor")       # a processes.worker.Group, for the Worker's collectives
    mesh.coordinates           # {"data": 1, "pipeline": 0, ..., "tensor": 0}
    mesh.peers("data")         # the ranks that differ from this one only along "data"

On torchrun the groups come from PyTorch's own ``DeviceMesh`` (``init_device_mesh``, kept as
``mesh.device_mesh`` for PyTorch's tensor-parallel and FSDP APIs); on Horovod each group is a
*process set*.  ``check_mesh`` is the static check that ``validate_args`` runs before any
process starts.
"""
from __future__ import annotations

import math

import torch

from ..processes.checks import check_int

AXES = ("data", "pipeline", "expert", "context", "tensor")   # outermost first


def check_mesh(world_size: int, sizes) -> dict[str, int]:
    """Lesson 07: the size of every axis (1 where none is given), checked against the job.

    ``sizes`` is a dict or a list of ``(axis, size)`` pairs (as a config file may give them).
    Raises ``ValueError`` for an unknown axis, an axis named twice, a size that is not a positive
    integer, or sizes whose product is not the number of ranks.
    """
    pairs = list(sizes.items()) if isinstance(sizes, dict) else [tuple(p) for p in sizes]
    names = [name for name, _ in pairs]
    for name in names:
        if name not in AXES:
            raise ValueError(f"unknown mesh axis {name!r}; the axes are {', '.join(AXES)}")
        if names.count(name) > 1:
            raise ValueError(f"mesh axis {name!r} is named twice; give each axis once")
    for name, size in pairs:
        check_int(name, size)
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

    def group(self, axis: str):
        """This rank's group along ``axis`` (a ``processes.worker.Group``)."""
        if axis not in AXES:
            raise ValueError(f"unknown mesh axis {axis!r}; the axes are {', '.join(AXES)}")
        return self.groups[axis]

    def peers(self, axis: str) -> list[int]:
        """The ranks that differ from this one only along ``axis`` (itself included), in order."""
        return list(self.group(axis).ranks)

    def size(self, axis: str) -> int:
        return self.sizes[axis]

    def __repr__(self) -> str:
        shape = " x ".join(f"{a} {s}" for a, s in self.sizes.items() if s > 1) or "one rank"
        return f"Mesh({shape}; rank {self.rank} at {self.coordinates})"
