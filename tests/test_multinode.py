"""Lesson 09: multi-node for real: `distlab run` as 2 nodes x 2 processes, each node a network namespace.

The two "nodes" (distlab/cluster/fake_nodes.py) reach each other only over a veth pair, at their own
addresses; torchrun's c10d rendezvous meets on node 0, and Horovod's horovodrun starts node 1's
ranks over ssh (an sshd in node 1's namespace).  The result must equal the same run on one node
with 4 processes.  Needs root and `ip netns` (CI has both; the set-up installs openssh-server).
"""
import subprocess
import sys

import pytest

import distlab
from distlab.cluster import config as cfg
from distlab.cluster import fake_nodes, run

CLI = [sys.executable, "-m", "distlab.cli"]


def base(tmp_path, backend, port):
    return {"model": {"width": 32}, "training": {"steps": 8, "global_batch_size": 64, "lr": 0.2},
            "parallel": {"method": "by_hand"},
            "launch": {"backend": backend, "processes_per_node": 2, "port": port, "timeout": 60},
            "logging": {"dir": str(tmp_path / "one_node"), "name": "run"}}


def one_node_reference(tmp_path, backend, port):
    data = base(tmp_path, backend, port)
    data["launch"]["processes_per_node"] = 4
    c = cfg.RunConfig.parse(data)
    assert run.run(c) == 0
    return run.records(c)


@pytest.mark.multinode
@pytest.mark.parametrize("backend", ["torchrun", pytest.param("horovod", marks=pytest.mark.horovod)])
def test_two_nodes_train_exactly_like_one(tmp_path, backend):
    reason = fake_nodes.available()
    assert reason is None, f"this test needs network namespaces: {reason}"
    port = 29701 if backend == "torchrun" else 29703
    with fake_nodes.two_nodes(tag=backend[:2]) as nodes, \
            fake_nodes.ssh_server(nodes, 1, str(tmp_path / "ssh"), port=2222) as key:
        data = base(tmp_path, backend, port)
        data["launch"].update(nodes=2, hosts=nodes.addresses, ssh_port=2222, ssh_identity_file=key)
        runs = []
        for node in range(2):
            data["logging"]["dir"] = str(tmp_path / f"node{node}")       # each node its own disk
            path = cfg.RunConfig.parse(data).save(str(tmp_path / f"node{node}.yaml"))
            runs.append(subprocess.Popen(nodes.command(node, [*CLI, "run", path, "--node-rank", str(node)]),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=240)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], "\n\n".join(o[-3000:] for o in outputs)
    records = sorted(run.records(cfg.load(str(tmp_path / "node0.yaml"))) +
                     (run.records(cfg.load(str(tmp_path / "node1.yaml"))) if backend == "torchrun" else []),
                     key=lambda r: r.rank)
    assert [r.rank for r in records] == [0, 1, 2, 3]
    if backend == "torchrun":                         # each node's ranks left their records on that node
        assert {r.rank for r in run.records(cfg.load(str(tmp_path / "node1.yaml")))} == {2, 3}
    reference = one_node_reference(tmp_path, backend, port + 1)
    for two, one in zip(records, reference):
        assert distlab.max_param_difference(two.params, one.params) <= 1e-6
        assert two.losses == pytest.approx(one.losses, abs=1e-6)
    assert fake_nodes.available() is None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert nodes.names[0] not in listed and nodes.names[1] not in listed, "the namespaces must be removed"


@pytest.mark.multinode
def test_the_namespaces_go_even_when_the_body_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with fake_nodes.two_nodes(tag="fx") as nodes:
            raise RuntimeError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert all(name not in listed for name in nodes.names)
