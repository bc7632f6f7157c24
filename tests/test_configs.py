"""The example run configs that ship in configs/: each passes `distlab check` and trains for a few steps.

Lesson 09: the README sends a user to `distlab check configs/...`; a shipped example that no longer
loads, or that no longer runs, would be the first thing a user meets.  Each one-node config runs
through `distlab.launch(config)` (what `distlab run` starts on every rank) for 2 steps on warm
ranks; the two-node one is checked and turned into each node's torchrun line, not run.
"""
import glob
import os

import pytest

import distlab
from distlab import cli
from distlab.cluster import config as cfg
from distlab.cluster import run
from distlab.parallelize import registry

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
FILES = sorted(glob.glob(os.path.join(CONFIGS, "*.yaml")))
ONE_NODE = [f for f in FILES if cfg.load(f).launch.nodes == 1]

pytestmark = pytest.mark.usefixtures("warm_ranks")


def name(path):
    return os.path.basename(path)


def test_every_strategy_of_the_registry_has_an_example_and_each_example_is_commented():
    shipped = {cfg.load(f).parallel.strategy for f in FILES}
    assert shipped == set(registry.STRATEGIES), set(registry.STRATEGIES) ^ shipped
    assert any(cfg.load(f).launch.nodes > 1 for f in FILES), "a multi-node example ships too"
    for f in FILES:
        with open(f) as fh:
            assert fh.readline().startswith("# "), f"{name(f)} opens with a comment that says what it runs"


def test_distlab_check_accepts_every_example(capsys):
    for f in FILES:                  # in this process: `distlab check` as a command is test_cli's
        assert cli.main(["check", f]) == 0, f"{name(f)}: {capsys.readouterr().err}"
        out = capsys.readouterr().out
        assert f"{name(f)}: valid;" in out and f"strategy {cfg.load(f).parallel.strategy}" in out


@pytest.mark.parametrize("path", ONE_NODE, ids=name)
def test_each_one_node_example_trains_for_a_few_steps(tmp_path, path):
    config = cfg.load(path, ["training.steps=2", f"logging.dir={tmp_path}"])
    records = distlab.launch(config, progress="none")
    assert len(records) == config.launch.world_size
    trained = [r for r in records if hasattr(r, "steps")]      # async SGD's server returns its own record
    assert trained and all(len(r.steps) == 2 for r in trained), name(path)
    for server in (r for r in records if hasattr(r, "updates")):
        assert len(server.updates) == 2 * (config.launch.world_size - 1)     # every worker's 2 gradients


def test_the_two_node_example_becomes_one_torchrun_line_per_node():
    path = os.path.join(CONFIGS, "two_nodes.yaml")
    config = cfg.load(path)
    config.check_call()
    hosts = config.launch.hosts
    for node in range(config.launch.nodes):
        cmd, _ = run.command(config, node)
        line = " ".join(cmd)
        assert "torch.distributed.run" in line and f"--rdzv-endpoint={hosts[0]}:{config.launch.port}" in line
        assert f"--local-addr={hosts[node]}" in line and f"--rdzv-conf=is_host={int(node == 0)}" in line
    with pytest.raises(cfg.ConfigError, match="--node-rank 2 is not a node of this run"):
        run.command(config, 2)


def test_gradient_accumulation_killed_between_two_updates_resumes_to_the_uninterrupted_run(tmp_path):
    """local_sgd declares "checkpoint": its accumulated gradients travel in the checkpoint (average: gradients,
    local_steps 4, a checkpoint every 5 steps falls between two updates)."""
    from distlab.long_runs import checkpoint

    sets = ["training.steps=12", "parallel.average=gradients", f"logging.dir={tmp_path}", "checkpoint.every=5",
            f"checkpoint.dir={tmp_path / 'ckpt'}"]
    whole = distlab.launch(cfg.load(os.path.join(CONFIGS, "local_sgd.yaml"), sets[:3]), progress="none", warm=False)
    killed = cfg.load(os.path.join(CONFIGS, "local_sgd.yaml"), [*sets, "fault.kind=kill", "fault.rank=1",
                                                                 "fault.step=8"])
    with pytest.raises(distlab.WorkerError, match="rank 1 failed: it was killed by SIGKILL"):
        distlab.launch(killed, progress="none", warm=False)
    assert [s for s, _ in checkpoint.complete_checkpoints(str(tmp_path / "ckpt"))] == [5]
    resumed = distlab.launch(cfg.load(os.path.join(CONFIGS, "local_sgd.yaml"), sets), progress="none", warm=False)
    assert [r.resumed_from for r in resumed] == [5, 5]
    for mine, theirs in zip(resumed, whole):
        assert distlab.max_param_difference(mine.params, theirs.params) == 0.0
