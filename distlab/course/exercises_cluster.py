"""The exercises of lesson 09 (from laptop to cluster), checked as ``exercises.py`` checks the others.

Kept apart from ``exercises.py`` only to keep each file short; the mechanism is the same
(``exercises.check``): a placeholder is "not answered yet", a wrong answer is told why.
"""
from __future__ import annotations

import functools

from .checking import check


def global_rank(answer, node: int, local_rank: int, processes_per_node: int) -> bool | None:
    """Lesson 09: torchrun's global rank for local rank ``local_rank`` of node ``node`` (node by node)."""
    return check("global rank", answer, node * processes_per_node + local_rank, hints={
        local_rank: "that is its local rank; which ranks do the nodes before it hold?",
        local_rank * processes_per_node + node: "node by node: all of node 0's ranks come first.",
        node + local_rank: "node 0 holds processes_per_node ranks, not one."},
        otherwise="node n's ranks start after the n x processes_per_node ranks of the nodes before it.")


BROKEN_CONFIG = {"model": {"kind": "mlp", "width": 64}, "training": {"steps": 100, "global_batch_size": 100},
                 "launch": {"nodes": 2, "processes_per_node": 4}}

def fix_the_config(answer) -> bool | None:
    """Lesson 09: ``--set`` overrides that make ``BROKEN_CONFIG`` valid, on its 8 ranks, batch within 10% of 100."""
    from ..cluster.config import ConfigError, RunConfig

    if answer is ...:
        return check("fix the config", ..., None)
    try:
        fixed = RunConfig.parse(BROKEN_CONFIG, list(answer))
    except ConfigError as err:
        return print(f"fix the config: still refused:\n{err}") or False
    batch, ranks = fixed.training.global_batch_size, fixed.launch.world_size
    why = ("keep the 2 nodes x 4 processes; change the batch instead" if ranks != 8 else
           f"a batch of {batch} changes the training; stay within 10% of 100" if abs(batch - 100) > 10 else "")
    print(f"fix the config: not quite: {why}." if why else f"fix the config: correct ({batch // 8} samples per rank).")
    return not why


# --- build it: what torchrun tells each rank ---------------------------------------------------
# Lesson 09's build-it exercise: the learner writes the environment torchrun gives each process of
# a job laid out as ``nodes`` x ``processes_per_node``; the checker starts that job for real (one
# torchrun per "node" on this machine, with a static rendezvous, so node ``n`` is node rank ``n``),
# has every process write down what it received, and compares the two, naming the first variable,
# process and value that differ.
ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
# what each process of the job runs: write down what torchrun told it (no torch, no distlab: it starts fast)
WRITE_DOWN = ("import json, os, sys\n"
              "with open(os.path.join(sys.argv[1], 'rank_' + os.environ['RANK'] + '.json'), 'w') as f:\n"
              f"    json.dump({{k: os.environ[k] for k in {ENV!r}}}, f)\n")


@functools.lru_cache(maxsize=4)
def torchrun_assignment(nodes: int = 2, processes_per_node: int = 3, timeout: float = 120) -> dict:
    """Lesson 09: ``{(node, local_rank): {variable: value}}`` as real torchrun agents hand them out
    (one job per layout and session: later checks reuse it)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from ..processes.arguments import free_port

    folder, port = tempfile.mkdtemp(prefix="distlab-ranks-"), free_port()
    script = os.path.join(folder, "write_down.py")
    with open(script, "w") as f:
        f.write(WRITE_DOWN)
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
                                f"--node-rank={n}", f"--nproc-per-node={processes_per_node}",
                                "--master-addr=127.0.0.1", f"--master-port={port}", "--monitor-interval=0.1",
                                script, folder],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in range(nodes)]
    try:
        errors = [a.communicate(timeout=timeout)[1] for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    if any(a.returncode for a in agents):
        raise RuntimeError("torchrun failed:\n" + "\n".join(e[-1500:] for e in errors))
    got = {}
    for name in (n for n in os.listdir(folder) if n.endswith(".json")):
        with open(os.path.join(folder, name)) as f:
            env = {k: int(v) for k, v in json.load(f).items()}
        got[env["GROUP_RANK"], env["LOCAL_RANK"]] = env
    return got


def rank_environment(fn, nodes: int = 2, processes_per_node: int = 3) -> bool | None:
    """Lesson 09: check the learner's ``fn(nodes, processes_per_node, node, local_rank) -> {variable: value}``
    against the environment real torchrun agents gave every process of that layout."""
    from .build import unanswered

    if unanswered("rank environment", fn):
        return None
    real = torchrun_assignment(nodes, processes_per_node)
    for (node, local), env in sorted(real.items()):
        try:
            yours = dict(fn(nodes, processes_per_node, node, local))
        except Exception as err:          # the learner's code: say what it raised, on which call
            print(f"rank environment: not quite. {fn.__name__}({nodes}, {processes_per_node}, {node}, {local}) "
                  f"raised {type(err).__name__}: {err}")
            return False
        for name in ENV:
            if yours.get(name) != env[name]:
                print(f"rank environment: not quite. Node {node}'s local rank {local}: torchrun gave "
                      f"{name}={env[name]}, yours says {yours.get(name)!r} (torchrun's whole environment for "
                      f"it: {env})")
                return False
    print(f"rank environment: correct. Your environment equals what torchrun gave each of the {len(real)} "
          f"processes of {nodes} nodes x {processes_per_node}, started for real on this machine.")
    return True

