"""What is on this machine, and which ways of running distributed jobs work here.

Introduced in lesson 00 (``notebooks/00_welcome.ipynb``); also ``distlab doctor`` in a terminal.
It reports what this Python can import and what each library was built with; lesson 00
then runs a tiny real two-process job to show that the default backend works.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys


def machine() -> dict:
    """CPU cores, memory and GPUs of this machine."""
    import psutil
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cpu_cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "gpus": gpus}


def communication_libraries() -> dict:
    """Which torch.distributed libraries this torch build has (gloo for CPUs, NCCL for GPUs)."""
    import torch.distributed as dist

    return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
            "mpi": dist.is_mpi_available()}


def horovod_build() -> dict:
    """Whether Horovod is importable, and with which frameworks, controllers and tensor ops."""
    try:
        import horovod
        import horovod.torch as hvd
    except ImportError as err:
        return {"installed": False, "error": str(err)}
    return {"installed": True, "version": horovod.__version__,
            "controllers": [n for n, ok in (("gloo", hvd.gloo_built()), ("mpi", hvd.mpi_built())) if ok],
            "tensor_operations": [n for n, ok in (("gloo", hvd.gloo_built()), ("nccl", hvd.nccl_built()),
                                                  ("mpi", hvd.mpi_built()), ("ddl", hvd.ddl_built()),
                                                  ("ccl", hvd.ccl_built())) if ok],
            "horovodrun": shutil.which("horovodrun") or os.path.join(os.path.dirname(sys.executable),
                                                                       "horovodrun")}


def this_run() -> str:
    """Every lesson's first cell: the machine its stored numbers came from, in one line.

    Timings in a lesson mean little without it: how many cores the ranks had, whether each got
    cores of its own (``cores.bind_to_cores``: only when there are enough), and how busy the
    machine already was (the load average: runnable processes, over 1, 5 and 15 minutes).
    """
    import datetime

    import torch

    from .processes.cores import cpu_quota

    cores, quota = os.cpu_count() or 1, cpu_quota()
    limit = f" (a quota of {quota:g} of them)" if quota is not None else ""
    binding = ("CPU ranks are not bound to cores (a CPU quota)" if quota is not None else
               f"CPU ranks get cores of their own up to {cores} ranks, then share")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"run on {when}: {cores} CPU cores{limit}, {gpus} GPUs, PyTorch {torch.__version__}; "
            f"{binding}; load average {load} (1, 5, 15 min)")


def report() -> dict:
    return {"machine": machine(), "torch.distributed": communication_libraries(),
            "horovod": horovod_build()}


def format_report(rep: dict) -> str:
    m, c, h = rep["machine"], rep["torch.distributed"], rep["horovod"]
    lines = [f"Python {m['python']}, PyTorch {m['torch']}",
             f"CPU cores: {m['cpu_cores']}, memory: {m['memory_gib']} GiB",
             f"GPUs: {len(m['gpus'])}" + (f" ({', '.join(m['gpus'])})" if m["gpus"] else
                                         " -> workers run as CPU processes over gloo"),
             "torch.distributed: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in c.items())]
    if h["installed"]:
        lines.append(f"Horovod {h['version']}: controllers {', '.join(h['controllers']) or 'none'}; "
                     f"tensor operations {', '.join(h['tensor_operations']) or 'none'}")
    else:
        lines.append(f"Horovod: not installed ({h['error']}); every lesson works but 02 and section 7 "
                     "of 10, which need it")
    return "\n".join(lines)
