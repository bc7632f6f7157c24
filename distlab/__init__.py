"""distlab: learn distributed deep-learning training by running it for real and watching it happen.

The package is laid out by layer, each importing only the layers above it in this list (a test checks
it); every module names the lesson that introduces it.  How a run is put together: docs/architecture.md.

- ``data``, ``models``, ``records``, ``checks``   the core: the digits and their partitions, the MLP and
                  CNN (each owning its loss), the plain records every run returns, and the checks every
                  setting gets (lesson 01); ``verdict``: the course's one rule for naming a winner over
                  independent runs (lesson 01); ``stepwise``: ``compare``, two runs step by step, where they part
                  (lesson 01); ``datasets`` and ``distorted``: more handwriting (lesson 05)
- ``processes/``  starting ranks and the backends they talk through: warm ranks (lesson 00), the
                  ``Worker`` interface with its (asynchronous) collectives, torchrun (lesson 01) and Horovod
                  (lesson 02)
- ``long_runs/``  long jobs (lesson 10): metrics every rank writes, watching them, checkpoints, faults on
                  purpose, who broke a job, Horovod's timeline
- ``predict/``    every formula of the course, once: collectives' costs, speedup, FLOPs, the pipeline cut and
                  its bubbles, bytes and memory per rank on every axis (lessons 03-13)
- ``comm/``       hand-written all-reduces, and the alpha-beta model fitted to this machine (lesson 03)
- ``sequence/``   lines of handwriting and the transformer that reads them, a stack of pieces (lesson 12)
- ``train/``      the engine: one settings object (``TrainSpec``), the named mesh and its purpose groups,
                  the one loop, the one micro-step, the one gradient reducer (lessons 01, 07, 12)
- ``data_parallel/``, ``pipeline/``, ``tensor/``, ``context/``, ``experts/``, ``zero/``, ``precision/``
                  one package an axis or lever: data (lessons 01-04), pipeline (06), tensor and sequence
                  (07, 12), context (12), experts (13), ZeRO's sharding (08), mixed precision (lesson 14,
                  being built: issue 38)
- ``parallelize/`` the axes composed: ordered transforms over the mesh, the line transformer on all five
                  axes, lesson 07's 3D MLP, and the registry a run config reads its strategies from
- ``measure/``    speedup measured on real ranks, and the fits that explain it (lesson 05)
- ``cluster/``    one run config and what carries it to a cluster (lesson 09)
- ``course/``     the exercises' checkers and the learner's stored results (lessons 00-15)
- ``widgets/``    the lessons' pictures, drawn only from records
- ``doctor``, ``cli``   what this machine can do (lesson 00), and ``distlab`` in a terminal
"""
from .processes.arguments import PortInUseError, bind_arguments
from .processes.launcher import WorkerError
from .processes.pool import retire as shutdown
from .processes.devices import choose_device
from .processes.worker import Worker
from .records import RankRecord, StepRecord, max_param_difference, throughput
from .stepwise import compare, snapshot

__all__ = ["launch", "shutdown", "WorkerError", "PortInUseError", "bind_arguments", "RankRecord", "StepRecord",
           "max_param_difference", "throughput", "compare", "snapshot", "Worker", "choose_device"]
__version__ = "0.1.0"


def launch(fn, world_size: int | None = None, **settings) -> list:
    """Lessons 01 and 09: run ``fn(worker, **settings)`` on ``world_size`` real processes and return their
    records (``processes.launcher.launch`` says every setting); ``fn`` may be a run config instead, or the
    path of its file (one node; ``distlab run`` takes it to several), whose training settings keyword
    arguments still override.  A refused setting names the strategies that could (``registry.who_can``)."""
    from .cluster.config import is_run_config, launch_arguments
    from .parallelize.registry import who_can
    from .processes.launcher import launch as start

    if is_run_config(fn):
        fn, world_size, settings = launch_arguments(fn, world_size, settings)
    return start(fn, world_size, who_can=who_can, **settings)
