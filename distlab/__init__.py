"""distlab: learn distributed deep-learning training by running it for real and watching it happen.

Each module is one idea and names the lesson that introduces it:

- ``data``           handwritten digits and how they are split across workers (lesson 01)
- ``models``         a small MLP and CNN for 8x8 digits (lesson 01)
- ``runtime``        what a worker knows: rank, world size, device, collectives (lesson 01)
- ``launch``         start N real processes from a notebook cell and collect records (lesson 01)
- ``data_parallel``  averaging gradients by hand, then with DDP (lesson 01)
- ``records``        the plain results that widgets read (lesson 01)
- ``widgets``        the pictures, drawn only from records (lesson 01)
"""
from .launch import PortInUseError, WorkerError, launch
from .records import RankRecord, StepRecord, max_param_difference, throughput
from .runtime import Worker, choose_device

__all__ = ["launch", "WorkerError", "PortInUseError", "RankRecord", "StepRecord",
           "max_param_difference", "throughput", "Worker", "choose_device"]
__version__ = "0.1.0"
