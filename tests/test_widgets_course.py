"""Lesson 11's figure: the learner's own measurements across the course, from what the lessons stored."""
from distlab.widgets import course
from distlab.widgets.display import figure_png

STORED = {"01": {"world_size": 2, "max_param_difference": 3.6e-7,
                 "test_accuracy": {"ranks": 0.92, "one_process": 0.92}},
          "04": {"straggler_seconds": 0.02, "extra_wait_of_rank_0": 0.021},
          "05": {"speedup_2_ranks": {"worst": 0.1, "probe": 1.1, "best": 1.0},
                 "speedup_2_ranks_repeats": {"worst": [0.1, 0.12], "probe": [1.0, 1.2], "best": [0.9, 1.1]},
                 "compute_ratio_2_ranks": {"worst": 0.9, "probe": 0.6, "best": 0.7}},
          "05b": {course.MORE_DATA_KEY: {"summary": [
              {"model": m, "samples": n, "mean": a, "median": a, "low": a - 0.01, "high": a + 0.01}
              for m in ("mnist_5k", "distorted_mnist_5k") for n, a in ((250, 0.65), (4_000, 0.94))]}},
          "08": {"world_size": 2, "bytes_held_by_rank_0": {"0": 1360036, "1": 1020028, "2": 850024, "3": 680040}},
          "10": {"steps_redone": 3, "seconds_to_restart": 14.2, "largest_difference": 0.0}}


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts + [ax.title]]


def test_every_lesson_stored_gets_a_panel_drawn_from_its_numbers():
    fig = course.course_figure(STORED)
    assert not any("not measured yet" in t for t in texts(fig))
    panels = {ax.get_title(): ax for ax in fig.axes}
    speed = panels["05: does a second rank pay?"]
    assert [round(p.get_height(), 2) for p in speed.patches] == [0.1, 1.1, 1.0]
    zero = panels["08: ZeRO on 2 ranks"]
    assert [round(p.get_height(), 2) for p in zero.patches] == [1.36, 1.02, 0.85, 0.68]
    more = panels["05b: more data, more accuracy?"]
    assert [list(line.get_xdata()) for line in more.lines] == [[250, 4_000]] * 2
    assert figure_png(fig)[:4] == b"\x89PNG"


def test_a_lesson_not_run_says_which_lesson_to_run():
    fig = course.course_figure({"01": STORED["01"], "05": {"speedup_2_ranks": {"worst": 0.1}}})
    said = "\n".join(texts(fig))
    for lesson in ("04", "08", "10"):
        assert f"run lesson {lesson}" in said
    assert "run lesson 05b" in said
