"""Checkpoints: the whole state of a run, saved now and then, so that a failure costs minutes, not the run.

Introduced in lesson 10 (failure is normal at scale).  On a thousand GPUs something fails
every few hours; a job that cannot resume starts over.  What must be saved to resume *exactly*,
as if nothing had happened:

* the model's parameters and the optimizer's state (momentum, Adam's moments, its step count);
* where the data sampler is: here the mini-batches are a function of (seed, step), so the
  step says it all (a shuffling loader would save its permutation and position too);
* the random number generators (torch, Python, NumPy, CUDA), for dropout or sampling;
* whatever else the strategy keeps (``extra``: ``Strategy.state_dict``), e.g. DeepSpeed's fp32
  master copy of this rank's shard of the parameters.

Each rank saves *its own* file (``rank_<r>.pt``): under data parallelism they are copies,
but a pipeline stage holds only its layers, and under ZeRO a rank holds only its slice of the
optimizer's state.  Nobody gathers the whole model; a 100-GB model is saved by all ranks at
once, each writing what it holds.  The folder of one checkpoint::

    step_000040/rank_0.pt rank_0.sha256 rank_1.pt rank_1.sha256 complete.json
    latest.json  -> {"step": 40, "folder": "step_000040"}

Three rules make it safe:

1. **write, then rename**: a file is written under a temporary name, flushed to disk, and
   renamed (atomic on POSIX): a crash mid-write leaves a stray temporary file, never a
   half-written checkpoint under the real name;
2. a checkpoint counts only once **every** rank has saved: after a barrier, each node's
   local rank 0 writes ``complete.json`` and then moves ``latest.json`` to it; the previous
   checkpoint is deleted only after that (``keep`` of them stay);
3. **loading never runs code**: ``torch.load(..., weights_only=True)`` accepts tensors,
   numbers, strings and containers only, and each file's SHA-256 is checked first, so a
   corrupt, truncated or foreign file gives a clear ``CheckpointError`` and nothing else.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time

import numpy as np
import torch

FORMAT = "distlab-checkpoint-1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, corrupt, truncated, foreign or from another run."""


def write_atomically(path: str, data: bytes) -> None:
    """Lesson 10: rule 1: a temporary file, flushed to disk, then renamed over ``path``."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _local(t):
    """A tensor this rank holds: FSDP's sharded parameters (DTensors) give their local shard."""
    return t.to_local() if hasattr(t, "to_local") else t


def _cpu(obj):
    """A copy of a state dict with every tensor on the CPU and local (what ``torch.save`` gets)."""
    if isinstance(obj, torch.Tensor):
        return _local(obj).detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def random_state() -> dict:
    """Every generator a training step may draw from (NumPy's as tensors: ``weights_only`` loads them)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_random_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def model_state(model) -> dict:
    """A module's state dict, or a plain ``{name: parameter}`` (a pipeline stage's own parameters)."""
    return model.state_dict() if isinstance(model, torch.nn.Module) else dict(model)


@torch.no_grad()
def load_model_state(model, saved: dict, where: str) -> None:
    """Copy ``saved`` into the model's own tensors, in place (views and shards stay what they are)."""
    current = model_state(model)
    if current.keys() != saved.keys():
        raise CheckpointError(f"{where} holds parameters {sorted(saved)}, this run's model has {sorted(current)}: "
                              "it was saved by a different model (or stage)")
    for name, tensor in saved.items():
        target = _local(current[name])
        if target.shape != tensor.shape:
            raise CheckpointError(f"{where}: {name} has shape {tuple(tensor.shape)}, this run's "
                                  f"{tuple(target.shape)}: saved by a different model")
        target.copy_(tensor)


def load_optimizer_state(optimizer, saved: dict) -> None:
    """The optimizer's state; with FSDP the loaded moments become shards like their parameters."""
    optimizer.load_state_dict(saved)
    for p, state in optimizer.state.items():
        if hasattr(p, "device_mesh"):                 # a DTensor parameter (FSDP2)
            from torch.distributed.tensor import DTensor

            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.dim() and not isinstance(value, DTensor):
                    state[key] = DTensor.from_local(value.to(p.device), p.device_mesh, p.placements,
                                                    run_check=False)


def read(path: str) -> dict:
    """Lesson 10: one rank's checkpoint file, checked (SHA-256, format) and loaded safely."""
    if not os.path.exists(path):
        raise CheckpointError(f"no checkpoint file at {path}")
    with open(path, "rb") as f:
        data = f.read()
    digest_path = path[:-3] + ".sha256"
    if os.path.exists(digest_path):
        with open(digest_path) as f:
            expected = f.read().strip()
        if hashlib.sha256(data).hexdigest() != expected:
            raise CheckpointError(f"{path} is corrupt or truncated: its SHA-256 differs from the one saved with it")
    import io
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:         # torch raises several kinds for a broken or unsafe file
        reason = str(err).splitlines()[0]
        if "weights_only" in str(err) or "Unsupported global" in str(err):
            raise CheckpointError(f"{path} holds Python objects other than tensors, numbers and strings; it is "
                                  f"refused rather than unpickled (loading it could run code): {reason}") from None
        raise CheckpointError(f"{path} cannot be read as a checkpoint (corrupt or truncated?): {reason}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a distlab checkpoint (no format {FORMAT!r} in it)")
    return state


def check_settings(settings) -> dict:
    """Lesson 10: ``{"dir", "every", "keep", "resume"}`` (only ``dir`` required), checked; defaults filled in."""
    allowed = {"dir": None, "every": 10, "keep": 2, "resume": True}
    if not isinstance(settings, dict) or not settings.get("dir") or set(settings) - set(allowed):
        raise ValueError(f"checkpoint must be a dict with dir (and optionally every, keep, resume), e.g. "
                         f"{{'dir': 'runs/ckpt', 'every': 10}}, got {settings!r}")
    out = {**allowed, **settings, "dir": os.path.abspath(os.fspath(settings["dir"]))}
    for key in ("every", "keep"):
        if isinstance(out[key], bool) or not isinstance(out[key], int) or out[key] < 0:
            raise ValueError(f"checkpoint {key} must be a whole number, 0 or more, got {out[key]!r}")
    if not isinstance(out["resume"], bool):
        raise ValueError(f"checkpoint resume must be True or False, got {out['resume']!r}")
    return out


class Checkpointer:
    """Lesson 10: one rank's checkpoints: ``resume`` once before the first step, ``after_step`` after each.

    ``settings``: ``dir`` (where), ``every`` (steps between checkpoints), ``keep`` (how many
    stay), ``resume`` (start from the latest complete one, if there is one).
    """

    def __init__(self, worker, settings: dict, run_config: dict):
        self.worker, self.dir = worker, settings["dir"]
        self.every, self.keep = int(settings.get("every", 10)), int(settings.get("keep", 2))
        self.resume_wanted = bool(settings.get("resume", True))
        self.run_config = json.dumps(run_config, sort_keys=True, default=str)
        os.makedirs(self.dir, exist_ok=True)

    @classmethod
    def of(cls, worker, run_config: dict) -> Checkpointer | None:
        settings = getattr(worker, "checkpoint", None)
        return cls(worker, settings, run_config) if settings and settings.get("dir") else None

    # -- saving --------------------------------------------------------------------------------
    def after_step(self, done: int, total: int, model, optimizer, sampler: dict, extra=None) -> dict | None:
        """Save if ``done`` steps is a multiple of ``every`` (or the end); returns what was saved.

        ``extra()``, when given, returns what the strategy keeps beyond the model and optimizer
        (``Strategy.state_dict``): called only when a checkpoint is due."""
        if not self.every or (done % self.every and done != total):
            return None
        return self.save(done, model, optimizer, sampler, extra() if extra else None)

    def save(self, done: int, model, optimizer, sampler: dict, extra: dict | None = None) -> dict:
        t0 = time.time()
        w = self.worker
        folder = os.path.join(self.dir, f"step_{done:06d}")
        os.makedirs(folder, exist_ok=True)
        state = {"format": FORMAT, "rank": w.rank, "world_size": w.world_size, "step": done,
                 "config": self.run_config, "sampler": sampler, "model": _cpu(model_state(model)),
                 "optimizer": _cpu(optimizer.state_dict()), "random": random_state(),
                 **({"extra": _cpu(extra)} if extra else {})}    # (only strategies that keep more)
        import io
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        write_atomically(os.path.join(folder, f"rank_{w.rank}.pt"), data)
        write_atomically(os.path.join(folder, f"rank_{w.rank}.sha256"), hashlib.sha256(data).hexdigest().encode())
        w.barrier()                                   # rule 2: every rank has saved...
        if w.local_rank == 0:                         # ...so this node marks it complete
            info = {"format": FORMAT, "step": done, "world_size": w.world_size, "time": time.time()}
            write_atomically(os.path.join(folder, "complete.json"), json.dumps(info).encode())
            write_atomically(os.path.join(self.dir, "latest.json"),
                             json.dumps({"step": done, "folder": os.path.basename(folder)}).encode())
            self._drop_old()
        return {"step": done, "path": folder, "seconds": time.time() - t0}

    def _drop_old(self) -> None:
        done = sorted(s for s, _ in complete_checkpoints(self.dir))
        for step in done[:-self.keep] if self.keep else []:
            shutil.rmtree(os.path.join(self.dir, f"step_{step:06d}"), ignore_errors=True)

    # -- resuming ------------------------------------------------------------------------------
    def resume(self, model, optimizer, sampler: dict, load_extra=None) -> int:
        """Load the newest checkpoint every rank has; return the step to start from (0: none).

        ``load_extra(state)`` receives what ``save`` got as ``extra`` (``Strategy.load_state_dict``)."""
        if not self.resume_wanted:
            return 0
        mine = [s for s, _ in complete_checkpoints(self.dir)]
        steps = self.worker.all_gather(torch.tensor([max(mine, default=0)], dtype=torch.int64))
        step = min(int(s.item()) for s in steps)      # the newest that every rank has
        if step == 0:
            return 0
        path = os.path.join(self.dir, f"step_{step:06d}", f"rank_{self.worker.rank}.pt")
        state = read(path)
        self.check_fits(state, path, sampler)
        load_model_state(model, state["model"], path)
        load_optimizer_state(optimizer, state["optimizer"])
        if load_extra is not None:
            load_extra(state.get("extra", {}))
        set_random_state(state["random"])
        return step

    def check_fits(self, state: dict, path: str, sampler: dict) -> None:
        """The checkpoint must come from this run: same ranks, same settings (the steps may differ)."""
        w = self.worker
        if state["world_size"] != w.world_size or state["rank"] != w.rank:
            raise CheckpointError(f"{path} was saved by rank {state['rank']} of {state['world_size']}; this is rank "
                                  f"{w.rank} of {w.world_size} (resuming on another number of ranks needs the "
                                  "state re-sharded: PyTorch's distributed checkpoint does that)")
        saved, now = json.loads(state["config"]), json.loads(self.run_config)
        differ = sorted(k for k in saved.keys() | now.keys() if k != "steps" and saved.get(k) != now.get(k))
        if differ or state["sampler"].get("seed") != sampler.get("seed"):
            detail = ", ".join(f"{k}: saved {saved.get(k)!r}, now {now.get(k)!r}" for k in differ) or "the seed"
            raise CheckpointError(f"{path} comes from a run with other settings ({detail}); use another "
                                  "checkpoint.dir, or resume=False to start over")


def complete_checkpoints(folder: str) -> list[tuple[int, str]]:
    """Lesson 10: ``(step, folder)`` of every checkpoint in ``folder`` that all ranks finished saving."""
    found = []
    if not os.path.isdir(folder):
        return found
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith("step_") and os.path.exists(os.path.join(path, "complete.json")):
            found.append((int(name[5:]), path))
    return sorted(found)


def latest(folder: str) -> tuple[int, str] | None:
    """The newest complete checkpoint in ``folder`` (what a restart resumes from), or None."""
    done = complete_checkpoints(folder)
    return done[-1] if done else None
