"""Lesson 08's memory pictures: drawn from the memory model and from counted records."""
from types import SimpleNamespace

from distlab.predict import memory as M
from distlab.widgets import memory as W
from distlab.widgets.display import figure_png


def test_calculator_redraws_and_a_named_model_sets_the_parameters():
    calc = W.memory_calculator({"our MLP": 85_002})
    pick, params, world, optimizer, precision, stage, gpu = calc.controls
    first = bytes(calc.image.value)
    assert first.startswith(b"\x89PNG")
    assert "120 GB per rank" in repr(calc) and "not enough" in repr(calc)    # the paper's example, stage 0
    stage.value = 3
    assert "1.88 GB per rank" in repr(calc) and "holds it" in repr(calc)
    assert bytes(calc.image.value) != first
    pick.value = "our MLP"
    assert params.value == 85_002


def test_verdict_says_which_stage_fits():
    text = W.verdict(7.5e9, 64, 80e9, optimizer="adam", precision="mixed")
    lines = text.splitlines()
    assert len(lines) == 4
    assert "does NOT fit" in lines[0] and all("fits;" in line for line in lines[1:])
    # the largest model printed is where the budget runs out
    assert f"{M.largest_model(80e9, 64, stage=3) / 1e9:,.3g} billion" in lines[3]


def test_measured_bars_are_the_records_counts_next_to_the_model():
    records = [SimpleNamespace(rank=r, memory=dict(params=100, grads=50, optimizer=200)) for r in (1, 0)]
    predicted = dict(params=100, grads=50, optimizer=190)
    bars = W.measured_bars(records)
    assert [b["label"].split()[1] for b in bars] == ["0", "1"]
    assert W.ratio_line(records, predicted).endswith("optimizer state 1.053")
    assert figure_png(W.compare_figure(records, predicted)).startswith(b"\x89PNG")


def test_predicted_bars_show_at_most_eight_ranks():
    bars = W.predicted_bars(1e9, 64, stage=1)
    assert len(bars) == W.SHOWN_RANKS and bars[-1]["label"] == "... rank 63"
    assert bars[0]["total"] == M.per_rank(1e9, 64, stage=1).total
