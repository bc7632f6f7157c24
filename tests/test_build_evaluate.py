"""Issue 37: lesson 05's build-it checker (accuracy on shards, one decision) on real ranks."""
import pytest
from test_build import checked, solution_cell

from distlab.course import exercises_evaluate

RIGHT = solution_cell("05_does_distributing_pay", "accuracy_and_stop")     # the stored solution


def test_the_solution_gives_the_whole_test_sets_accuracy_on_every_rank(capsys):
    answer, out = checked(exercises_evaluate.accuracy_on_shards, RIGHT, "accuracy_and_stop", capsys)
    assert answer is True, out
    assert "correct. On 2 real ranks each evaluated only its shard (180 + 179 test samples)" in out, out
    assert "stop after step" in out, out


def test_an_answer_divided_in_float32_counts(capsys):
    """The second review of issue 37: the natural tensor of default dtype is float32; its rounding is no mistake."""
    float32 = RIGHT.replace("dtype=torch.float64", "dtype=torch.float32")
    assert float32 != RIGHT
    answer, out = checked(exercises_evaluate.accuracy_on_shards, float32, "accuracy_and_stop", capsys)
    assert answer is True, out


@pytest.mark.parametrize("mistake,named", [
    # the mean of the ranks' accuracies: shards of 180 and 179 make it differ from the whole set's
    (RIGHT.replace("torch.tensor([float(correct), float(total)]", "torch.tensor([correct / total, 1.0]"),
     "that is the mean of the ranks' shard accuracies, and the shards hold 180 and 179 samples"),
    # no collective: each rank answers from its own shard
    (RIGHT.replace("    worker.all_reduce(counts)", "    pass"), "that is rank 0's own shard"),
    # the right accuracy, but each rank decides from its own shard: they part at the target
    (RIGHT.replace("return accuracy, accuracy >= target", "return accuracy, correct / total >= target"),
     "the ranks disagreed"),
    # the wrong comparison: it never stops where it should
    (RIGHT.replace("accuracy >= target", "accuracy > target + 0.1"), "every rank said go on"),
])
def test_planted_mistakes_are_named(capsys, mistake, named):
    answer, out = checked(exercises_evaluate.accuracy_on_shards, mistake, "accuracy_and_stop", capsys)
    assert answer is False and named in out, out


def test_the_placeholder_starts_nothing(capsys):
    cell = "def accuracy_and_stop(worker, correct, total, target):\n    ...\n"
    answer, out = checked(exercises_evaluate.accuracy_on_shards, cell, "accuracy_and_stop", capsys)
    assert answer is None and "not answered yet" in out, out
