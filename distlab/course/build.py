"""Build-it exercises: the learner's function, written in a notebook cell, run on real ranks.

Introduced in lesson 01.  A function defined in a notebook cell lives in ``__main__``, which the
spawned ranks cannot import (``distlab.launch`` refuses it, and pickling it would fail on the
ranks).  What the ranks *can* receive is text.  So a build-it checker:

1. takes the learner's function and reads its source (``inspect.getsource``: IPython keeps every
   cell's text, so this works for a function typed in a cell);
2. refuses, before any process starts, what the ranks could not rebuild: a lambda, a function
   nested in another (its closure stays behind), a name from the notebook the function uses
   without importing it (``source_of``);
3. launches ``run_learner`` (an importable function) on warm ranks with that text, the task to run
   and its arguments; each rank ``exec``s the text into a fresh namespace (``rebuild``) and hands
   the rebuilt function to the task, which runs it as the lesson's code would;
4. compares what the ranks return with one process or the library (``distlab.compare``) and names
   what differs.

The ranks' namespace holds ``torch``, ``math`` and ``dist`` (``torch.distributed``), and ``hvd``
(``horovod.torch``) on Horovod ranks; any other module the function needs, it imports itself.
A checker given the lesson's placeholder (a body of ``...``) says "not answered yet" and starts no
process (``placeholder``).  ``tests/test_build.py`` checks the round trip on real ranks.
"""
from __future__ import annotations

import ast
import builtins
import dis
import importlib
import inspect
import linecache
import math
import textwrap

import torch

PROVIDED = ("torch", "math", "dist", "hvd")    # the names the ranks' namespace gives every function


class NotBuildable(ValueError):
    """Lesson 01: the learner's function cannot be rebuilt on the ranks; the message says why and what to do."""


def placeholder(fn) -> bool:
    """Lesson 01: is ``fn`` the lesson's unanswered cell (``...`` itself, or a function whose body is ``...``)?"""
    if fn is ...:
        return True
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    rest = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                    and isinstance(s.value.value, str))]
    return len(rest) == 1 and isinstance(rest[0], ast.Expr) and isinstance(rest[0].value, ast.Constant) \
        and rest[0].value.value is ...


def _globals_used(code) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _globals_used(const)
    return names


def source_of(fn) -> str:
    """Lesson 01: the text of the learner's function, checked to be rebuildable on the ranks.

    Raises ``NotBuildable`` naming the problem: not a function, a lambda, a nested function, a
    decorator, or a name from the notebook used without being imported inside the function."""
    name = getattr(fn, "__name__", repr(fn))
    if not inspect.isfunction(fn):
        raise NotBuildable(f"{name} is not a function written with def; write `def {name}(...):` in the cell")
    if fn.__name__ == "<lambda>":
        raise NotBuildable("a lambda has no source of its own to send; write it with def")
    if fn.__closure__ or "<locals>" in fn.__qualname__:
        raise NotBuildable(f"{name} is defined inside another function; the ranks receive only its text, not "
                           "the variables around it: define it at the top of the cell")
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as err:
        raise NotBuildable(f"the source of {name} cannot be read ({err}); define it in a cell or a file") from err
    if text.lstrip().startswith("@"):
        raise NotBuildable(f"{name} has a decorator; the ranks rebuild the bare function: remove it")
    outside = sorted(n for n in _globals_used(fn.__code__) - set(PROVIDED) - {name}
                     if not hasattr(builtins, n))
    if outside:
        raise NotBuildable(
            f"{name} uses {', '.join(outside)} from outside the function; the ranks receive only the "
            f"function's text (with {', '.join(PROVIDED[:3])} and, under Horovod, hvd). Import what it "
            "needs inside the function, or pass values in as arguments")
    return text


def rebuild(source: str, name: str, backend: str = "torchrun"):
    """Lesson 01: on a rank, the learner's function from its text (tracebacks show its lines)."""
    import torch.distributed as dist

    namespace = {"__name__": "learner", "torch": torch, "math": math, "dist": dist}
    if backend == "horovod":
        namespace["hvd"] = importlib.import_module("horovod.torch")
    filename = f"<your {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    if not callable(namespace.get(name)):
        raise NotBuildable(f"the text sent to the ranks does not define {name}")
    return namespace[name]


def run_learner(worker, source: str, name: str, task: str, args: dict | None = None):
    """Lesson 01: what each rank runs: rebuild the learner's function, then ``task(worker, fn, **args)``.

    ``task`` is ``"module:function"`` (importable on the ranks); its return value is the rank's record."""
    module, _, attr = task.partition(":")
    run = getattr(importlib.import_module(module), attr)
    return run(worker, rebuild(source, name, worker.backend), **(args or {}))


def run(fn, task: str, *, world_size: int = 2, backend: str = "torchrun", warm: bool | str = True,
        progress: str = "none", **args) -> list:
    """Lesson 01: run ``task(worker, fn, **args)`` on real ranks with the learner's ``fn``; their records.

    Refuses (``NotBuildable``) before any process starts when ``fn`` cannot be rebuilt there."""
    from ..processes.launcher import launch

    source = source_of(fn)
    return launch(run_learner, world_size, backend=backend, warm=warm, progress=progress,
                  title=f"your {fn.__name__} on {world_size} ranks via {backend}",
                  source=source, name=fn.__name__, task=task, args=args)


def unanswered(exercise: str, fn) -> bool:
    """Lesson 01: is ``fn`` still the lesson's placeholder?  If so, say so (nothing is started)."""
    if placeholder(fn):
        print(f"{exercise}: not answered yet. Write the function's body and run the cell again.")
        return True
    return False


def attempt(exercise: str, fn, task: str, **settings) -> list | bool | None:
    """Lesson 01: ``run`` for a checker: the records, or the checker's answer after saying why there are none.

    None: ``fn`` is still the placeholder (nothing started).  False: the function the ranks cannot
    rebuild is refused before any process starts, or it failed on a rank, shown with the failing line
    of *its* text (the last lines of that rank's traceback).  A checker goes on only with a list::

        records = build.attempt(EXERCISE, fn, TASK, world_size=2)
        if not isinstance(records, list):
            return records
    """
    from ..processes.launcher import WorkerError

    if unanswered(exercise, fn):
        return None
    try:
        return run(fn, task, **settings)
    except NotBuildable as err:
        print(f"{exercise}: {err}.")
    except WorkerError as err:
        tail = "\n".join(err.remote_traceback.strip().splitlines()[-4:]) or str(err)
        print(f"{exercise}: your {fn.__name__} failed on rank {err.rank}:\n{tail}")
    return False


def call(worker, fn, **args):
    """Lesson 01: the simplest task: the learner's function is itself the rank's job, ``fn(worker, **args)``."""
    return fn(worker, **args)
