"""One node of a Vertex AI custom job: where it stands, from ``CLUSTER_SPEC``, then ``distlab run`` (lesson 09).

``python -m distlab.cluster.vertex_node`` is what every replica of the job ``distlab job vertex``
writes runs.  Vertex AI starts the same container on each replica and tells it its place in one
environment variable, ``CLUSTER_SPEC`` (JSON)::

    {"cluster": {"workerpool0": ["HOST:PORT"], "workerpool1": ["HOST:PORT", ...]},
     "task": {"type": "workerpool1", "index": 0}}

torchrun asks the same question in other words: how many nodes, which one is this, where is the
first.  So: the primary replica (``workerpool0``) is node 0 and hosts the rendezvous, replica ``i``
of ``workerpool1`` is node ``i + 1``, and the hosts, in that order, become ``launch.hosts``.  Then
this node does exactly what ``distlab run CONFIG --node-rank N`` does on a SLURM node or a
laptop: torchrun, whose ranks each run ``config_rank`` on the config.

The config itself travels in the job (``DISTLAB_RUN_CONFIG``, its YAML), as it travels in a
ConfigMap on Kubernetes: one image serves every config.  Records and checkpoints go where the
config's ``logging.dir`` says; on Vertex a ``/gcs/BUCKET/...`` folder keeps them after the job.
"""
from __future__ import annotations

import json
import os
import sys

import yaml

from .config import ConfigError, RunConfig

CONFIG_VARIABLE = "DISTLAB_RUN_CONFIG"


def place(spec: dict) -> tuple[list[str], int]:
    """Lesson 09: the nodes' hosts (primary first) and this replica's node rank, from a ``CLUSTER_SPEC``."""
    try:
        cluster, task = spec["cluster"], spec["task"]
        pools = [cluster["workerpool0"], cluster.get("workerpool1", [])]
        kind, index = task["type"], int(task["index"])
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"CLUSTER_SPEC has no cluster.workerpool0 or task.type/index ({err}): "
                          "is this a Vertex AI custom job?") from None
    if kind not in ("workerpool0", "workerpool1"):
        raise ConfigError(f"this replica is in {kind}: a distlab job uses worker pools 0 (node 0) and 1 only")
    if len(pools[0]) != 1:
        raise ConfigError(f"worker pool 0 must hold exactly one replica (node 0), not {len(pools[0])}")
    hosts = [address.rsplit(":", 1)[0] for address in pools[0] + pools[1]]
    return hosts, index if kind == "workerpool0" else index + 1


def node_config(text: str, spec: dict) -> tuple[RunConfig, int]:
    """Lesson 09: the run config of this node (the job's, with the cluster's hosts) and its node rank."""
    hosts, node_rank = place(spec)
    config = RunConfig.parse(yaml.safe_load(text), source=CONFIG_VARIABLE)
    if len(hosts) != config.launch.nodes:
        raise ConfigError(f"the job has {len(hosts)} replicas but launch.nodes is {config.launch.nodes}: "
                          "write the job again with distlab job vertex")
    if config.launch.nodes > 1:
        config.launch.hosts = hosts
    return config, node_rank


def main() -> int:
    from .run import run

    if "CLUSTER_SPEC" not in os.environ or CONFIG_VARIABLE not in os.environ:
        print(f"vertex_node: CLUSTER_SPEC and {CONFIG_VARIABLE} must be set (Vertex AI sets the first, "
              "the job written by distlab job vertex the second)", file=sys.stderr)
        return 2
    try:
        config, node_rank = node_config(os.environ[CONFIG_VARIABLE], json.loads(os.environ["CLUSTER_SPEC"]))
    except (ConfigError, ValueError) as err:
        print(f"vertex_node: {err}", file=sys.stderr)
        return 2
    return run(config, node_rank=node_rank)


if __name__ == "__main__":
    sys.exit(main())
