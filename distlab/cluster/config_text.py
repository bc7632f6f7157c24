"""A run config as text: its TOML form, ``--set`` overrides, and pydantic's errors said plainly.

Lesson 09 (``config.py`` holds the schema; this module, what turns it into text and back).
"""
from __future__ import annotations

import json

from pydantic import BaseModel, ValidationError

from ..processes.arguments import parse_assignment


class ConfigError(ValueError):
    """A run config that cannot be used; the message names the key, the value and what is allowed."""


def explain(err: ValidationError, source: str, schema: type[BaseModel]) -> str:
    """pydantic's errors, one line each: ``where: the value: what is allowed``."""
    lines = [f"{source}: {len(err.errors())} problem(s) in the run config"]
    for e in err.errors():
        where = ".".join(str(x) for x in e["loc"]) or "(the config as a whole)"
        if e["type"] == "extra_forbidden":
            section = _section(schema, e["loc"][:-1])
            allowed = ", ".join(section.model_fields) if section else "?"
            lines.append(f"  {where}: unknown key (allowed here: {allowed})")
        elif e["type"] == "value_error":
            lines.append(f"  {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  {where} = {e.get('input')!r}: {e['msg']}")
    return "\n".join(lines)


def _section(schema, loc):
    model = schema
    for key in loc:
        field = model.model_fields.get(key)
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return None
        model = field.annotation
    return model


def apply_override(data: dict, item: str) -> None:
    """``training.lr=0.05``: set one value in the nested ``data`` (lesson 09's ``--set``)."""
    try:
        parts, value = parse_assignment(item)
    except ValueError as err:
        raise ConfigError(f"--set {err}") from None
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {item!r}: {part} is not a section")
    node[parts[-1]] = value


def dump_toml(data: dict) -> str:
    """The config as TOML (sections of scalars and lists: all a run config holds)."""
    def value(v):
        if v is None:
            return None
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(str(v))

    out = []
    for section, fields in data.items():
        out.append(f"[{section}]")
        out += [f"{k} = {value(v)}" for k, v in fields.items() if v is not None]   # TOML has no null
        out.append("")
    return "\n".join(out)
