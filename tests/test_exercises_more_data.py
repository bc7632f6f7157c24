"""Lesson 05b's build-it exercise: the learner's elastic distortion, checked on real MNIST digits against
the library's; a correct answer passes and each planted mistake is caught and named."""
import pytest
import torch
import torch.nn.functional as F

from distlab.course import exercises_more_data as ex


def elastic(images, noise, alpha, sigma, *, swap=False, smooth=True, scale=True):
    n, _, h, w = images.shape
    field = noise[:, :2 * h * w].reshape(n, 2, h, w)
    if swap:
        field = field.flip(1)
    t = torch.arange(h, dtype=images.dtype)
    g = torch.exp(-(t[:, None] - t[None, :]) ** 2 / (2 * sigma ** 2))
    g = g / g.sum(1, keepdim=True)
    moved = (g @ field @ g.T if smooth else field) * (alpha if scale else 1)
    grid = F.affine_grid(torch.eye(2, 3)[None].expand(n, 2, 3), list(images.shape), align_corners=False)
    grid = grid + moved.permute(0, 2, 3, 1) * (2 / w)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False).clamp(0, 1)


def test_a_correct_elastic_distortion_passes(capsys):
    assert ex.elastic(...) is None and "not answered yet" in capsys.readouterr().out
    assert ex.elastic(lambda im, no, alpha, sigma: None) is None and "not answered yet" in capsys.readouterr().out
    assert ex.elastic(elastic) is True and "correct" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, named", [
    (dict(swap=True), "x and y are swapped"), (dict(smooth=False), "the field was not smoothed"),
    (dict(scale=False), "the field was not scaled"), ("identity", "nothing moved")])
def test_a_planted_mistake_is_caught_and_named(capsys, mistake, named):
    fn = (lambda im, no, alpha, sigma: im) if mistake == "identity" else \
        (lambda *a, **k: elastic(*a, **k, **mistake))
    assert ex.elastic(fn) is False
    out = capsys.readouterr().out
    assert named in out and "part at distorted digits" in out


def test_a_wrong_shape_is_said():
    assert ex.elastic(lambda im, no, alpha, sigma: im[:, 0]) is False
