"""Issue 38: lesson 14's build-it checker (a loss scaler), in fp16 training on real ranks against the library's
``LossScaler``: the solution passes, each planted mistake is named, the placeholder starts nothing."""
import pytest
from test_build import checked, solution_cell

from distlab.course import exercises_precision

pytestmark = pytest.mark.usefixtures("warm_ranks")      # one start-up of two ranks, shared by every check
RIGHT = solution_cell("14_fitting_more", "scaler_step")     # the stored solution's own text
DIVIDE = "                p.grad.div_(scale)                      # the gradient of the loss itself\n"
VERDICT = "                finite = finite and bool(torch.isfinite(p.grad).all())\n"


def test_the_solution_scales_as_the_library_does(capsys):
    answer, out = checked(exercises_precision.loss_scaler, RIGHT, "scaler_step", capsys)
    assert answer is True, out
    assert "skipped the 7 updates whose gradients overflowed (steps 0, 1, 2, 3, 4, 6, 11)" in out, out
    assert "doubled it after 4 clean updates in a row (it grew at step 11)" in out, out
    assert "2^24* 2^23* 2^22* 2^21* 2^20* 2^19 2^19* 2^18" in out, out
    assert "Every step's parameters equal the library's" in out, out


def test_testing_for_overflow_before_dividing_is_accepted(capsys):
    """An inf stays an inf when divided: the same verdict, so the same run."""
    early = RIGHT.replace(DIVIDE + VERDICT, VERDICT + DIVIDE)
    assert early != RIGHT
    answer, out = checked(exercises_precision.loss_scaler, early, "scaler_step", capsys)
    assert answer is True, out


@pytest.mark.parametrize("mistake,named", [
    (RIGHT.replace(DIVIDE, ""), "the gradients were not divided by the scale"),                          # (a)
    (RIGHT.replace("    optimizer.step()\n    clean += 1", "    clean += 1")
     .replace("    if not finite:", "    optimizer.step()\n    if not finite:"), "it stepped on an overflow"),  # (b)
    (RIGHT.replace("return scale * 0.5, 0", "return scale, 0"), "the scale was not halved"),               # (c)
    (RIGHT.replace("return scale * 2, 0", "return scale, 0"), "your scale never grows"),                   # (d)
    (RIGHT.replace("if clean == GROWTH:", "if clean == GROWTH - 1:"),
     "doubled the scale after 3 clean update(s) in a row"),                                                # (d)
    (RIGHT.replace("    return scale, clean\n", "    return scale\n"), "not a pair (new_scale, new_clean)"),  # (f)
], ids=["not_unscaled", "steps_on_overflow", "not_halved", "never_grows", "grows_early", "not_a_pair"])
def test_planted_mistakes_are_named(capsys, mistake, named):
    assert mistake != RIGHT
    answer, out = checked(exercises_precision.loss_scaler, mistake, "scaler_step", capsys)
    assert answer is False and named in out, out


def test_the_placeholder_starts_nothing(capsys, monkeypatch):
    from distlab.course import build

    monkeypatch.setattr(build, "run", lambda *a, **k: pytest.fail("the placeholder started ranks"))
    answer, out = checked(exercises_precision.loss_scaler, "def scaler_step(optimizer, scale, clean):\n    ...\n",
                          "scaler_step", capsys)
    assert answer is None and "not answered yet" in out, out
