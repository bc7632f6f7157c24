"""Issue 39: lesson 15's build-it checker (a bucketed reducer launched from hooks) on real ranks against the
library's buckets: the solution passes, each planted mistake is named, the placeholder starts nothing."""
import pytest
from test_build import checked, solution_cell

from distlab.course import exercises_overlap

pytestmark = pytest.mark.usefixtures("warm_ranks")      # one start-up of two ranks, shared by every check
RIGHT = solution_cell("15_where_the_time_goes", "attach_buckets")     # the stored solution's own text
LAUNCH = "            sent.append((bucket, flat, worker.all_reduce(flat, op=\"avg\", async_op=True)))\n"


def test_the_solution_sends_the_librarys_buckets_during_backward(capsys):
    answer, out = checked(exercises_overlap.buckets, RIGHT, "attach_buckets", capsys)
    assert answer is True, out
    assert "sent 4 buckets a step (186, 256, 16, 1024 numbers)" in out, out


@pytest.mark.parametrize("mistake,named", [
    (RIGHT.replace("    for p in params:\n        p.register_post_accumulate_grad_hook(written)\n", ""),
     "never called worker.all_reduce"),
    (RIGHT.replace('op="avg"', 'op="sum"'), "as a sum where a mean is due"),
    (RIGHT.replace("list(model.parameters())[::-1]", "list(model.parameters())"), "you sent 4 messages of"),
    (RIGHT.replace(LAUNCH, "            sent.append((bucket, flat, None))\n")
     .replace("            pending.wait()\n", "            worker.all_reduce(flat, op=\"avg\")\n"),
     "after backward had ended: nothing overlapped"),
], ids=["no_hooks", "summed", "model_order", "sent_after_backward"])
def test_planted_mistakes_are_named(capsys, mistake, named):
    assert mistake != RIGHT
    answer, out = checked(exercises_overlap.buckets, mistake, "attach_buckets", capsys)
    assert answer is False and named in out, out


def test_the_placeholder_starts_nothing(capsys, monkeypatch):
    from distlab.course import build

    monkeypatch.setattr(build, "run", lambda *a, **k: pytest.fail("the placeholder started ranks"))
    answer, out = checked(exercises_overlap.buckets, "def attach_buckets(model, worker, cap_bytes):\n    ...\n",
                          "attach_buckets", capsys)
    assert answer is None and "not answered yet" in out, out
