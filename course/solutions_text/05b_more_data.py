# %% [markdown]
# # Lesson 05b · solutions
#
# The exercise of `notebooks/05b_more_data.ipynb` with its answer filled in, checked by the same
# checker as in the lesson: on 64 real held-out MNIST digits, against the library's distortion.

# %% [markdown]
# **The elastic distortion.** The raw field is the first 2 x 28 x 28 numbers (the last 5 drive the
# library's affine map, off in Simard's setting); a 2-D Gaussian separates, so smoothing is one
# matrix product on each side (`G @ field @ G.T` with `G[i, j] = exp(-(i - j)^2 / (2 sigma^2))`,
# rows normalised so a constant field stays constant). Scaled by alpha it is a displacement in pixels;
# `F.grid_sample` reads where each output pixel points, in grid units of 2/28 per pixel, x first.
# (The checker's line shows the largest difference: it depends on the machine's arithmetic.)

# %% tags=["nbval-ignore-output"]
import torch
import torch.nn.functional as F

from distlab.course import exercises_more_data


def my_elastic(images, noise, alpha, sigma):
    n, _, h, w = images.shape
    field = noise[:, :2 * h * w].reshape(n, 2, h, w)
    t = torch.arange(h, dtype=images.dtype)
    g = torch.exp(-(t[:, None] - t[None, :]) ** 2 / (2 * sigma ** 2))
    g = g / g.sum(1, keepdim=True)
    moved = g @ field @ g.T * alpha                                      # pixels
    grid = F.affine_grid(torch.eye(2, 3, dtype=images.dtype)[None].expand(n, 2, 3), list(images.shape),
                         align_corners=False)
    grid = grid + moved.permute(0, 2, 3, 1) * (2 / w)                    # (n, h, w, 2): x then y
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False).clamp(0, 1)


assert exercises_more_data.elastic(my_elastic)
