"""Issue 37: lesson 10's build-it checker (what a checkpoint holds), by a real restart on real ranks."""
import pytest
from test_build import checked, solution_cell

from distlab.course import exercises_checkpoint

RIGHT = solution_cell("10_failure_is_normal_at_scale", "save")     # the stored solution


def test_the_solution_resumes_exactly(capsys):
    answer, out = checked(exercises_checkpoint.checkpoint_contents, RIGHT, "save", capsys)
    assert answer is True, out
    assert "steps 5 to 8 came out as in the run that never stopped (keys kept: model, optimizer, step)" in out, out


@pytest.mark.parametrize("mistake,named", [
    (RIGHT.replace(', "optimizer": optimizer.state_dict()', ""),
     "step 5 (the first after the restart) moved"),                               # momentum lost
    (RIGHT.replace(', "step": step', ""), "went on from step 0, but the checkpoint was taken after step 4"),
    (RIGHT.replace('"step": step', '"step": step + 1'), "it would skip mini-batches"),
    (RIGHT.replace('"model": model.state_dict(), ', ""), "the parameters are not the ones saved"),
    (RIGHT.replace("model.state_dict()", "model"), "a checkpoint file could not hold what save returned"),
])
def test_planted_mistakes_are_named(capsys, mistake, named):
    answer, out = checked(exercises_checkpoint.checkpoint_contents, mistake, "save", capsys)
    assert answer is False and named in out, out


def test_the_placeholder_starts_nothing(capsys):
    answer, out = checked(exercises_checkpoint.checkpoint_contents, "def save(model, optimizer, step):\n    ...\n",
                          "save", capsys)
    assert answer is None and "not answered yet" in out, out
