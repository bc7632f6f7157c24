"""distlab: learn distributed deep-learning training by running it for real and watching it happen.

The package is laid out by role; every module names the lesson that introduces it:

- ``data``, ``models``, ``records``   the digits and their partitions, the MLP and CNN, and the
                                      plain records every run returns (lesson 01); ``datasets``
                                      and ``distorted``: more handwriting from the same digits (lesson 05)
- ``processes/``  starting ranks and the backends they talk through: ``launch``, warm ranks
                  (``shutdown`` retires them, lesson 00), the ``Worker`` interface, torchrun
                  (lesson 01) and Horovod (lesson 02)
- ``parallel/``   what the ranks do: one training loop and the strategies that plug into it
                  (data parallelism, lesson 01; local and asynchronous SGD, lesson 04; pipelines,
                  lesson 06; tensor parallelism and the named mesh, lesson 07; ZeRO, lesson 08),
                  and the registry a run config reads its strategies from
- ``train/``      the engine every training runs on: one settings object (``TrainSpec``), the one
                  micro-step, the one gradient reducer (lessons 01, 12, 13)
- ``parallelize/`` one model split over the named mesh by ordered transforms (tensor, context, expert,
                  pipeline), and the line transformer trained on all five axes (lessons 12-13)
- ``comm/``       hand-written all-reduces, and the alpha-beta model fitted to this machine (lesson 03)
- ``measure/``    speedup and memory measured on real ranks, and the fits that explain them (lessons 05, 08)
- ``predict/``    every formula of the course, in one place: the cost of the collectives, speedup, FLOPs,
                  the pipeline cut and its bubbles, bytes per step and memory per rank on every axis
                  (lessons 03-13); it depends on the core alone
- ``cluster/``    one run config and what carries it to a cluster: ``distlab run``, job files for
                  Azure ML, SLURM, Kubernetes and Vertex AI, two "nodes" on one machine (lesson 09)
- ``long_runs/``  long jobs (lesson 10): what every rank writes down each step (and, when asked, to
                  TensorBoard), watching those files from outside, saving and resuming every
                  rank's state, failing on purpose, and Horovod's own timeline of its collectives
- ``course/``     the exercises' checkers and the learner's stored results (lessons 00-13)
- ``sequence/``   lines of handwriting, the small transformer that reads them, split across ranks by
                  heads (tensor and sequence parallelism) and by the line (context parallelism, ring
                  attention), and the activation memory each split keeps (lesson 12)
- ``experts/``    mixtures of experts: the layer with its router, capacity and balancing losses, its
                  experts spread over ranks with all-to-all, and
                  what the ranks' records tell: bytes, balance, who waited (lesson 13)
- ``widgets/``    the lessons' pictures, drawn only from records
- ``doctor``, ``cli``   what this machine can do (lesson 00), and ``distlab`` in a terminal
"""
from .processes.checks import PortInUseError, bind_arguments
from .processes.launcher import WorkerError, launch
from .processes.pool import retire as shutdown
from .processes.devices import choose_device
from .processes.worker import Worker
from .records import RankRecord, StepRecord, max_param_difference, throughput

__all__ = ["launch", "shutdown", "WorkerError", "PortInUseError", "bind_arguments", "RankRecord", "StepRecord",
           "max_param_difference", "throughput", "Worker", "choose_device"]
__version__ = "0.1.0"
