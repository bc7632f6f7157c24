"""Issue 37: the build-it checkers of lessons 01, 02 and 04 run the learner's function on real ranks:
a correct answer passes, each planted mistake is caught and named (the hint's text)."""
import pytest

from distlab.course import exercises_build as ex
from tests.test_build import from_cell

AVERAGE = '''
def average_gradients(model, worker):
    for p in model.parameters():
        worker.all_reduce(p.grad){divide}
'''
RIGHT = AVERAGE.format(divide="\n        p.grad /= worker.world_size")
NO_DIVIDE = AVERAGE.format(divide="")
HALVED = AVERAGE.format(divide="\n        p.grad /= 2")       # right on 2 ranks only: the checker runs 3
SOME_LAYERS = '''
def average_gradients(model, worker):
    for p in list(model.parameters())[:2]:
        worker.all_reduce(p.grad)
        p.grad /= worker.world_size
'''


def test_lesson_01_average_right_and_wrong(capsys):
    assert ex.gradient_average(...) is None
    assert "not answered yet" in capsys.readouterr().out
    assert ex.gradient_average(from_cell(RIGHT, "average_gradients")) is True
    assert ex.gradient_average(from_cell(NO_DIVIDE, "average_gradients")) is False
    said = capsys.readouterr().out
    assert "3x" in said and "divide by worker.world_size" in said and "step 0" in said, said
    assert ex.gradient_average(from_cell(HALVED, "average_gradients")) is False
    said = capsys.readouterr().out
    assert "1.5x" in said and "step 0" in said, said
    assert ex.gradient_average(from_cell(SOME_LAYERS, "average_gradients")) is False
    said = capsys.readouterr().out
    names = [n for n, _ in __import__("distlab").models.build_model("mlp", 16).named_parameters()]
    assert f"parameter {names[2]}" in said and "is every parameter's gradient all-reduced" in said, said


LOCAL = '''
def average_parameters(model, worker):
    for p in model.parameters():
        worker.all_reduce({what}){divide}
'''


def test_lesson_04_parameter_average_right_and_wrong(capsys):
    right = LOCAL.format(what="p.data", divide="\n        p.data /= worker.world_size")
    assert ex.parameter_average(from_cell(right, "average_parameters")) is True
    assert ex.parameter_average(from_cell(LOCAL.format(what="p.data", divide=""), "average_parameters")) is False
    said = capsys.readouterr().out
    assert "the parameters were summed" in said and "step 3" in said, said
    grads = LOCAL.format(what="p.grad", divide="\n        p.grad /= worker.world_size")
    assert ex.parameter_average(from_cell(grads, "average_parameters")) is False
    assert "not their gradients" in capsys.readouterr().out


BROADCAST = '''
def start_from_rank_0(model):
    for p in model.parameters():
        {call}
'''


@pytest.mark.horovod
def test_lesson_02_start_from_rank_0_right_and_wrong(capsys):
    right = BROADCAST.format(call="hvd.broadcast_(p.data, root_rank=0)")
    assert ex.start_from_rank_0(from_cell(right, "start_from_rank_0")) is True
    wrong = BROADCAST.format(call="hvd.broadcast(p.data, root_rank=0)")
    assert ex.start_from_rank_0(from_cell(wrong, "start_from_rank_0")) is False
    said = capsys.readouterr().out
    assert "kept its own start" in said and "broadcast_ (with the underscore)" in said, said
