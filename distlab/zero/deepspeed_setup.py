"""Getting DeepSpeed to run here: its accelerator, the op it compiles, and a lock a killed compile leaves.

Introduced in lesson 08 (``notebooks/08_zero_sharding_what_every_worker_copied.ipynb``), where
``deepspeed_zero`` hands these on: ``available`` says in one line why DeepSpeed cannot run (or
None), ``status`` what it runs on, ``prebuild`` compiles its one CPU op at install time
(``tools/install_deepspeed.sh``) so that no lesson waits for a compiler.
"""
from __future__ import annotations

import glob
import os
import sys
import time

import torch


def available() -> str | None:
    """None if DeepSpeed imports here; otherwise the reason, in one line.

    Also chooses DeepSpeed's CPU accelerator on a machine without a GPU, and makes the op
    DeepSpeed compiles (about a minute) stay compiled: it lives in this environment's own folder
    (``TORCH_EXTENSIONS_DIR``; with the shared default, two environments on one machine rebuild
    each other's copy), and it is always built with this environment's ``ninja`` (its folder
    first on ``PATH``, as an activated environment has it): a system ``ninja`` of another
    version reads the other's build log as foreign and compiles everything again.
    """
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not torch.cuda.is_available() else "cuda")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    here = os.path.dirname(sys.executable)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != here:
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    clear_stale_locks(os.environ["TORCH_EXTENSIONS_DIR"])
    try:
        import deepspeed  # noqa: F401
    except Exception as err:                      # ImportError, or its own set-up failing
        return f"DeepSpeed does not import: {type(err).__name__}: {err}".splitlines()[0]
    return None


STALE_LOCK_S = 900


def clear_stale_locks(folder: str, older_than_s: float = STALE_LOCK_S) -> list[str]:
    """Lesson 08: remove compile locks that a killed compiler left behind; returns them.

    torch guards a compile with a bare ``lock`` file and waits, forever, while it exists.  A compiler
    killed halfway (an interrupted first job, the out-of-memory killer) never removes it, and every
    later DeepSpeed job on the machine would hang.  The compile takes about a minute, so a lock older
    than fifteen minutes is a leftover.
    """
    removed = []
    for lock in glob.glob(os.path.join(folder, "*", "*", "lock")):
        age = time.time() - os.path.getmtime(lock)
        if age > older_than_s:
            os.remove(lock)
            removed.append(lock)
            print(f"distlab: removed {lock}, left {age / 60:.0f} min ago by a compile that was killed",
                  file=sys.stderr)
    return removed


def prebuild() -> str:
    """Compile, once per environment, the op DeepSpeed's CPU communication loads when a job
    starts (``tools/install_deepspeed.sh`` calls it, so that no lesson waits for a compiler)."""
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None:
        return f"no op to build for the {get_accelerator().device_name()} accelerator"
    builder.load()
    return f"{builder.absolute_name()} built in {os.environ['TORCH_EXTENSIONS_DIR']}"


def status() -> str:
    """Lesson 08: whether DeepSpeed runs on this machine, in one line."""
    reason = available()
    if reason:
        return reason + " (tools/install_deepspeed.sh installs it; the config above is still what it would read)"
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    return (f"DeepSpeed {deepspeed.__version__} imports here; accelerator {get_accelerator().device_name()}, "
            f"communication over {'nccl' if torch.cuda.is_available() else 'gloo'}")
