"""distlab: learn distributed deep-learning training by running it for real and watching it happen.

Each module is one idea and names the lesson that introduces it:

- ``data``           handwritten digits and how they are split across workers (lesson 01)
- ``models``         a small MLP and CNN for 8x8 digits (lesson 01)
- ``runtime``        what a worker knows: rank, world size, device, collectives (lesson 01)
- ``launch``         start N real processes from a notebook cell and collect records (lesson 01)
- ``data_parallel``  averaging gradients by hand, then with DDP (lesson 01)
- ``records``        the plain results that widgets read (lesson 01)
- ``doctor``         what this machine has and which backends are built (lesson 00)
- ``horovod_backend`` the same jobs launched with Horovod (lesson 02)
- ``collectives``    parameter server, ring and tree all-reduce on send/recv (lesson 03)
- ``collective_runs`` those all-reduces checked against dist.all_reduce, and traced (lesson 03)
- ``cost_model``     the alpha-beta model of what an all-reduce costs (lesson 03)
- ``measure_costs``  timing messages and all-reduces on the ranks, for the model (lesson 03)
- ``async_sgd``      asynchronous SGD with a parameter server, and staleness (lesson 04)
- ``local_sgd``      gradient accumulation and local SGD: syncing every k steps (lesson 04)
- ``scaling``        measured speedup, strong and weak scaling, Amdahl's law (lesson 05)
- ``large_batch``    what the larger global batch does to accuracy, and the lr rules (lesson 05)
- ``widgets``        the pictures, drawn only from records (one module per lesson)
"""
from .launch import PortInUseError, WorkerError, launch
from .records import RankRecord, StepRecord, max_param_difference, throughput
from .runtime import Worker, choose_device

__all__ = ["launch", "WorkerError", "PortInUseError", "RankRecord", "StepRecord",
           "max_param_difference", "throughput", "Worker", "choose_device"]
__version__ = "0.1.0"
