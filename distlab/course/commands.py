"""Commands a learner types, checked by what they do, not by their words (lessons 02, 09 and 11).

A command line has many correct spellings: options in any order, ``-np 4`` or ``--num-proc 4``,
with or without ``-o job.yml``.  Comparing words in order marks right answers wrong, which teaches
the wrong lesson (that there is one incantation).  So these checkers read a command as its own
program would: ``distlab job ...`` is parsed by distlab's own argument parser and *run*, in a
scratch folder, on a config like the lesson's; ``horovodrun ...`` is read option by option the
way ``horovodrun --help`` documents them (Horovod is optional for a learner, so its own parser
may be missing; the options read here are the ones lesson 02 teaches).
"""
from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
import tempfile

from .checking import check


def words(answer: str) -> list[str]:
    """Lesson 02: a command split as a shell would (quotes kept together); a bad quote is no command."""
    try:
        return shlex.split(answer)
    except ValueError:
        return []


def read_horovodrun(answer: str) -> dict:
    """Lesson 02: what a ``horovodrun`` line asks for: processes, hosts' slots, Gloo, the program.

    ``-np``/``--num-proc`` (also ``-np=4``), ``-H``/``--hosts`` (``host:slots,host:slots``; without
    it horovodrun runs every process on this machine), ``--gloo``; the first word that is not an
    option (or an option's value) starts the program."""
    w = words(answer)
    found = {"command": w[0] if w else "", "np": None, "hosts": None, "gloo": False, "program": []}
    valued = {"-np": "np", "--num-proc": "np", "-H": "hosts", "--hosts": "hosts"}
    i = 1
    while i < len(w):
        word = w[i]
        key, _, value = word.partition("=")
        if key in valued:
            if not value:
                i += 1
                value = w[i] if i < len(w) else ""
            found[valued[key]] = value
        elif word == "--gloo":
            found["gloo"] = True
        elif not word.startswith("-"):
            found["program"] = w[i:]
            break
        i += 1
    return found


def slots(hosts: str | None, np: int) -> dict[str, int]:
    """Lesson 02: ``localhost:2,node2:4`` as ``{host: slots}``; no ``-H`` means this machine, np slots."""
    if hosts is None:
        return {"localhost": np}
    out = {}
    for part in hosts.split(","):
        host, _, n = part.partition(":")
        out[host] = int(n) if n.isdigit() else 1
    return out


def horovodrun(answer, world_size: int = 4) -> bool | None:
    """Lesson 02: a ``horovodrun`` line for ``world_size`` ranks on this machine over Gloo, in any spelling."""
    if answer is ...:
        return check("horovodrun", answer, None)
    found = read_horovodrun(answer) if isinstance(answer, str) else {}
    problems = []
    if found.get("command") != "horovodrun":
        problems.append("it starts with horovodrun")
    np = int(found["np"]) if str(found.get("np")).isdigit() else None
    if np != world_size:
        problems.append(f"-np (or --num-proc) says how many processes: {world_size}")
    here = {"localhost", "127.0.0.1", os.uname().nodename}
    hosts = slots(found.get("hosts"), np or 0) if found.get("command") else {}
    if found.get("hosts") is not None and (set(hosts) - here or sum(hosts.values()) < world_size):
        problems.append(f"-H lists host:slots; all {world_size} on this machine is localhost:{world_size}")
    if not found.get("gloo"):
        problems.append("--gloo picks Gloo (this build has no MPI)")
    return check("horovodrun", not problems, True, hints={False: "; ".join(problems) + "."})


def distlab_job(answer, config_text: str, *, target: str = "azureml", config_file: str = "run.yaml",
                image: str | None = None) -> bool | None:
    """Lessons 09 and 11: does ``answer`` (``distlab job ...``) write a ``target`` job for ``config_file``?

    It is run for real, in a scratch folder holding ``config_file`` (``config_text``), by distlab's own
    command-line entry point: every spelling distlab accepts is right, and a refusal is shown as distlab
    prints it (a config without ``launch.image`` cannot become an Azure ML job).  ``./run.yaml`` is
    ``run.yaml``; with ``image``, the job written (printed, or the file ``-o`` names) must run that image."""
    if answer is ...:
        return check(f"distlab job {target}", answer, None)
    from .. import cli

    w = words(answer) if isinstance(answer, str) else []
    if w[:2] != ["distlab", "job"]:
        return check(f"distlab job {target}", False, True, hints={
            False: "`distlab job TARGET CONFIG` writes a job file; the targets are azureml, slurm, k8s and vertex."})
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        with open(config_file, "w") as f:
            f.write(config_text)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                args = cli.build_parser().parse_args(w[1:])
                code = cli.main(w[1:])
            except SystemExit as stop:            # argparse refused the words: it said why on stderr
                args, code = None, stop.code or 2
            except OSError as problem:            # e.g. -o into a folder that does not exist
                print(f"distlab job: {problem}", file=sys.stderr)
                code = 1
        wrote = (args is not None and code == 0 and args.target == target
                 and os.path.normpath(args.config) == os.path.normpath(config_file))
        output = getattr(args, "output", None) if args is not None else None
        job = out.getvalue() + (open(output).read() if wrote and output and os.path.isfile(output) else "")
    wrong_image = wrote and image is not None and image not in job
    said = (err.getvalue().strip() or "distlab could not read that command").splitlines()[-1]
    hint = (f"distlab said: {said}" if code != 0 else
            f"the job distlab wrote does not run the image {image}." if wrong_image else
            f"that writes a {getattr(args, 'target', '?')} job for {getattr(args, 'config', '?')}; "
            f"the question asks for {target} and {config_file}.")
    wrote = wrote and not wrong_image
    return check(f"distlab job {target}", wrote, True, hints={False: hint})
