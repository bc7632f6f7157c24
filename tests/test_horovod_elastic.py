"""Lesson 10: Horovod's elastic mode with this Gloo build: a worker killed mid-training, the survivor
carries on from the last in-memory commit and ends where an uninterrupted run ends."""
import json
import os
import subprocess

import pytest
import torch

import distlab
from distlab.data_parallel import horovod_elastic
from test_faults import marked

pytestmark = pytest.mark.horovod


def run(run_dir, fault_step=None):
    import uuid

    mark = uuid.uuid4().hex
    out = subprocess.run(horovod_elastic.command(str(run_dir), 80, commit_every=10, fault_step=fault_step),
                         capture_output=True, text=True, timeout=300, env={**os.environ, "DISTLAB_TEST_MARK": mark})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert marked(mark) == []                                  # nothing of the job is left
    with open(run_dir / "elastic_record.json") as f:
        return json.load(f), torch.load(run_dir / "params.pt")


def test_a_killed_worker_leaves_a_survivor_that_finishes_the_training(tmp_path):
    whole, whole_params = run(tmp_path / "whole")
    assert whole["steps"] == 80 and set(whole["sizes"]) == {2} and whole["resets"] == []
    killed, killed_params = run(tmp_path / "killed", fault_step=35)
    assert killed["steps"] == 80
    assert len(killed["resets"]) == 1 and killed["resets"][0]["size"] == 1      # a new ring, of one
    # steps 0-34 on two workers; back to the commit of step 30; steps 30-79 on the survivor alone
    assert killed["sizes"] == [2] * 35 + [1] * 50
    died = os.path.getmtime(tmp_path / "killed" / "fault_done")
    difference = distlab.max_param_difference(whole_params, killed_params)
    print(f"\nHOROVOD ELASTIC: re-formed {killed['resets'][0]['time'] - died:.2f} s after the kill; "
          f"max |survivor - uninterrupted| = {difference:.3g} (float64)")
    assert difference <= 1e-6
