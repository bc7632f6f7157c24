"""The browser's run of a lesson compared with the outputs stored in the repository, as nbval compares.

Why (issue 25): the suite used to execute every lesson twice, once in the browser (widgets render,
controls move) and once under nbval (the printed outputs equal the stored ones). Both checks read
the same kernel outputs, so one execution serves both: after Run All, JupyterLab saves the
notebook, and this module compares each code cell's outputs with the stored ones by nbval's own
rules, which it imports rather than copies:

* cells tagged ``nbval-ignore-output`` (or ``nbval-skip``, or with nbval's comment markers) are not
  compared; a cell tagged ``raises-exception`` is compared like any other;
* streams of one name are merged (nbval's ``coalesce_streams``: JupyterLab merges only neighbours);
* metadata, execution counts, tracebacks, widget model ids and PNG/JPEG pictures are not compared;
  every other field is, after the sanitising regexes of ``tests/nbval_sanitize.cfg``.

A difference is reported as nbval reports it: the cell, the field, the stored and the new text.
"""
from __future__ import annotations

import copy
import re
from collections import defaultdict
from pathlib import Path

import nbformat
from nbval.plugin import (coalesce_streams, find_comment_markers, find_metadata_tags, get_sanitize_patterns,
                          transform_streams_for_comparison)

SANITIZE = Path(__file__).resolve().parents[1] / "nbval_sanitize.cfg"
# nbval's skip_compare without --nbdime: what it never compares
SKIP = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
        "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}


def patterns(path: Path = SANITIZE) -> list[tuple[str, str]]:
    return get_sanitize_patterns(path.read_text())


def compared(cell) -> bool:
    """Whether nbval compares this code cell's outputs (its tags and comment markers decide)."""
    options = dict(find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    return not options.get("skip") and options.get("check", True)


def _fields(outputs, sanitize) -> dict:
    """nbval's flattening: every compared key (MIME types of ``data`` flattened) -> its values in order."""
    out = defaultdict(list)
    for o in transform_streams_for_comparison(coalesce_streams(copy.deepcopy(outputs))):
        for key, value in o.items():
            if key in SKIP:
                continue
            if key == "data":
                for mime, v in value.items():
                    if mime not in SKIP:
                        out[mime].append(sanitize(v))
            else:
                out[key].append(sanitize(value))
    return out


def differences(stored: nbformat.NotebookNode, run: nbformat.NotebookNode,
                sanitize_with: Path = SANITIZE) -> list[str]:
    """Lesson outputs the run did not reproduce, one readable line (or block) each; [] when all match."""
    rules = patterns(sanitize_with)

    def sanitize(v):
        if not isinstance(v, str):
            return v
        for regex, replace in rules:
            v = re.sub(regex, replace, v)
        return v

    a = [c for c in stored.cells if c.cell_type == "code"]
    b = [c for c in run.cells if c.cell_type == "code"]
    if len(a) != len(b):
        return [f"the run has {len(b)} code cells, the stored notebook {len(a)}"]
    found = []
    for k, (ref, new) in enumerate(zip(a, b)):
        if not compared(ref):
            continue
        first = ref.source.strip().splitlines()[0][:60] if ref.source.strip() else "empty"
        where = f"code cell {k} ({first!r})"
        want, got = _fields(ref.outputs, sanitize), _fields(new.outputs, sanitize)
        if set(want) != set(got):
            found.append(f"{where}: output fields differ: stored {sorted(want)}, this run {sorted(got)}")
            continue
        for key in want:
            if len(want[key]) != len(got[key]):
                found.append(f"{where}: {len(want[key])} stored {key!r} outputs, {len(got[key])} in this run")
                break
            bad = next(((w, g) for w, g in zip(want[key], got[key]) if w != g), None)
            if bad is not None:
                found.append(f"{where}: {key!r} differs\n    stored:   {str(bad[0])[:1500]!r}\n"
                             f"    this run: {str(bad[1])[:1500]!r}")
                break
    return found
