"""A job's arguments, checked before any process starts, and read from a terminal.

Introduced in lesson 01.  Starting ranks costs seconds; a typo found by rank 1 five seconds
later, in a traceback from another process, teaches nothing.  So ``distlab.launch`` first:

* checks the world size, the port and that workers can import the training function;
* binds the keyword arguments to the training function's signature (``bind_arguments``): an
  unknown name or a missing one is refused with the parameter's name (a function that takes one
  ``TrainSpec`` makes it from them, issue 36);
* refuses a backend or device the function does not declare in ``fn.supports`` (issue 27's
  capabilities: ``{"torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault"}``), and
  checkpoints or faults asked of a function that would silently ignore them
  (``check_capabilities``);
* runs the function's own value checks, ``fn.validate_args(world_size, backend=, device=,
  ...)``, when it has them (a batch that does not divide among the ranks, an unknown model,
  a backend it cannot use);
* checks every value against its parameter's annotation (``lr='fast'`` where the signature
  says ``lr: float``), so that functions without checks of their own are covered too.

Lesson 02 (a Horovod job started from a terminal) reads a function's arguments typed as ``key=value``,
and lesson 09's ``--set section.key=value`` with the same parser (``parse_assignment``), so that a
value means the same wherever it is typed.
"""
from __future__ import annotations

import ast
import collections.abc
import difflib
import importlib
import inspect
import socket
import types
import typing

import yaml



class PortInUseError(OSError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = "127.0.0.1") -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as err:
            raise PortInUseError(f"port {port} on {host} is already in use ({err.strerror}); "
                                 "pass another port, or none to let distlab pick a free one") from err


def check_importable(fn) -> None:
    """Workers import ``fn`` by module and name; say clearly why that would fail."""
    name = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", None)
    if not callable(fn):
        raise TypeError(f"the training function must be callable, got {fn!r}")
    if module in (None, "__main__"):
        raise ValueError(
            f"the training function {name!r} is defined in __main__ (a notebook cell or the script "
            "you ran), which worker processes cannot import. Put it in a .py module next to the "
            "notebook and import it from there.")
    if "<locals>" in name or "<lambda>" in name:
        raise ValueError(f"the training function {name!r} is a lambda or nested function; worker "
                         "processes can only import functions defined at the top of a module.")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"workers could not import {module}.{name}: {err}") from err
    if obj is not fn:
        raise ValueError(f"{module}.{name} is not the function passed in (was the module reloaded "
                         "or the function redefined?)")


# ---------------------------------------------------------------------------------------------
# the arguments, against the training function's signature
# ---------------------------------------------------------------------------------------------
def bind_arguments(fn, world_size: int, kwargs: dict, *, backend: str = "torchrun", device: str = "cpu") -> dict:
    """Lesson 01: ``kwargs`` bound to ``fn(worker, **kwargs)``, checked; returns every argument.

    The returned dict holds each parameter after ``worker`` with its value (the default where
    none was given).  Raises ``ValueError`` naming an unknown, missing or mistyped argument,
    then runs ``fn.validate_args(world_size, backend=backend, device=device, **arguments)``
    (see the module's docstring): ``device`` is the one ``launch`` chose, "cpu" or "cuda".

    Issue 36: a training function that takes a run's settings as one ``TrainSpec`` (``fn(worker, spec)``)
    says how to make it from keywords (``fn.spec_of(**kwargs)``, which refuses a keyword that is no
    setting); then ``fn.validate_args(world_size, spec, backend=, device=)`` checks it, and the ranks get
    ``{"spec": spec}``.  ``spec=`` may also be given whole.
    """
    check_capabilities(fn, backend, device)
    if hasattr(fn, "spec_of"):
        return _bind_spec(fn, world_size, kwargs, backend, device)
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    name = getattr(fn, "__name__", repr(fn))
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        raise ValueError(f"{name}() must take the worker as its first argument: def {name}(worker, ...)")
    takes = [p.name for p in params[1:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params)
    for key in kwargs:
        if key not in takes and not accepts_any:
            close = difflib.get_close_matches(key, takes, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{name}() has no argument {key!r}{hint}; it takes: {', '.join(takes)}")
    missing = [p.name for p in params[1:] if p.default is p.empty and p.name not in kwargs
               and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if missing:
        raise ValueError(f"{name}() needs the argument(s) {', '.join(missing)}")
    bound = sig.bind(None, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop(params[0].name)
    for p in params:
        if p.kind is p.VAR_KEYWORD:                       # fn(worker, **config): flatten it
            arguments.update(arguments.pop(p.name, {}))
    validate = getattr(fn, "validate_args", None)
    try:             # the function's own checks first: their messages know what a value means
        if validate is not None:
            validate(world_size, **_accepted_by(validate, {**arguments, "backend": backend, "device": device}))
    except TypeError:
        _check_types(fn, name, kwargs)   # a value of the wrong type tripped them: say which
        raise
    _check_types(fn, name, kwargs)
    return arguments


def _bind_spec(fn, world_size: int, kwargs: dict, backend: str, device: str) -> dict:
    """Issue 36: the settings of a spec-taking training function, made into its spec and checked."""
    name = getattr(fn, "__name__", repr(fn))
    if "spec" in kwargs:
        if len(kwargs) > 1:
            raise ValueError(f"{name}(): give spec= or its settings as keywords, not both ({', '.join(kwargs)})")
        spec = kwargs["spec"]
    else:
        try:
            spec = fn.spec_of(**kwargs)
        except TypeError as err:
            close = difflib.get_close_matches(str(err).split("=")[0], list(fn.spec_of().flat()), n=1)
            raise ValueError(f"{name}(): {err}" + (f" (did you mean {close[0]!r}?)" if close else "")) from None
    for key, value in kwargs.items():
        hint = typing.get_type_hints(type(getattr(spec, spec.where(key)[0]))).get(spec.where(key)[1]) \
            if key != "spec" else None
        if hint is not None and not _matches(value, hint):
            raise ValueError(f"{key}={value!r}: {name}() expects {_describe(hint)}, got {type(value).__name__}")
    fn.validate_args(world_size, spec, backend=backend, device=device)
    return {"spec": spec}


CAPABILITIES = ("torchrun", "horovod", "cpu", "cuda", "checkpoint", "fault")


def check_capabilities(fn, backend: str, device: str, options: dict | None = None, who_can=None) -> None:
    """Issue 27 (lessons 02 and 10): refuse what ``fn.supports`` says the function cannot do.

    Why before any process starts: a strategy that cannot run on Horovod (no send/recv there)
    would otherwise start its ranks and fail in one of them seconds later, and a function that
    never calls the checkpointer would accept ``checkpoint=`` and silently save nothing, which a
    user finds out only after the crash it was meant to survive.  A function that declares no
    ``supports`` may run on any backend and device (its own ``validate_args`` decides), but is
    given no checkpoints or faults: nothing says it honours them.  A refused backend or device is
    answered in well under a second (only ``fn`` is read); a refused checkpoint or fault also
    names the strategies that take them, which reads every strategy's ``supports`` (importing
    their modules: seconds the first time).
    """
    supports = getattr(fn, "supports", None)
    name = f"{getattr(fn, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(fn, '__name__', fn)}"   # pipeline.train
    if supports is not None:
        unknown = set(supports) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"{name}.supports names {sorted(unknown)}: capabilities are {', '.join(CAPABILITIES)}")
        for what, value, kind in (("backend", backend, ("torchrun", "horovod")), ("device", device, ("cpu", "cuda"))):
            if value in kind and value not in supports:
                works = [k for k in kind if k in supports]
                raise ValueError(f"{name} cannot run with {what}={value!r}: it runs on {what}="
                                 f"{' or '.join(repr(w) for w in works) or 'nothing'} only")
    for what in ("checkpoint", "fault"):
        if (options or {}).get(what) is not None and what not in (supports or ()):
            verb = "takes no checkpoints" if what == "checkpoint" else "does not obey a fault"
            names = who_can(what) if who_can is not None else None
            hint = (f" (strategies that can: {', '.join(names)})" if names else
                    " (no strategy can)" if names is not None else "")
            raise ValueError(f"{name} {verb}: {what}= would be silently ignored{hint}")


def _accepted_by(fn, arguments: dict) -> dict:
    """The entries of ``arguments`` that ``fn`` takes by name (all of them if it takes ``**``)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return arguments
    return {k: v for k, v in arguments.items() if k in params}


def _check_types(fn, name: str, kwargs: dict) -> None:
    """Each given value against its parameter's annotation (simple types, unions, containers)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:            # an annotation that does not resolve: nothing to check against
        return
    for key, value in kwargs.items():
        hint = hints.get(key)
        if hint is not None and not _matches(value, hint):
            raise ValueError(f"{key}={value!r}: {name}() expects {_describe(hint)}, "
                             f"got {type(value).__name__}")


def _matches(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in (tuple, list) or hint in (tuple, list):   # tuple[int, float] also as a list [1, 0.5]
        return isinstance(value, (tuple, list))
    if collections.abc.Sequence in (origin, hint):
        return isinstance(value, collections.abc.Sequence) and not isinstance(value, str)
    if origin is not None:
        hint = origin
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _describe(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if hint is float:
        return "a number"
    origin = typing.get_origin(hint) or hint
    return f"{'an' if origin.__name__[0] in 'aeiou' else 'a'} {origin.__name__}" \
        if isinstance(origin, type) else str(hint)


def parse_value(text: str):
    """A value typed in a terminal: a Python literal (``1e-3``, ``()``, ``None``), else YAML (``true``,
    ``null``, ``[a, b]``), else the word itself (``ddp``).  Python first: YAML reads ``1e-3`` as text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_assignment(item: str, form: str = "section.key=value",
                     example: str = "training.lr=0.05") -> tuple[list[str], object]:
    """Lessons 02 and 09: ``a.b=value`` as (``["a", "b"]``, the value).  The one ``key=value`` parser:
    ``--set`` overrides of a run config and the arguments of a job started from a terminal."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{item!r}: write it as {form}, e.g. {example}")
    return key.strip().split("."), parse_value(value)


def parse_kwargs(pairs: list[str]) -> dict:
    """Lesson 02: ``["steps=50", "method=ddp"]`` as ``{"steps": 50, "method": "ddp"}`` (a terminal's job)."""
    kwargs = {}
    for pair in pairs:
        parts, value = parse_assignment(pair, form="key=value", example="steps=50")
        if len(parts) != 1:
            raise ValueError(f"{pair!r}: a function's argument has no sections (no dots before the =)")
        kwargs[parts[0]] = value
    return kwargs
