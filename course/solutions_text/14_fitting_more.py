# %% [markdown]
# # Lesson 14 · solutions
#
# The exercises of `notebooks/14_fitting_more.ipynb` with their answers filled in, checked by the same
# checkers as in the lesson, and each also against the library's own model; exercise 3 runs on real ranks.

# %%
import torch

from distlab.course import exercises_fitting, exercises_precision
from distlab.predict import activations, memory
from distlab.sequence.transformer import TransformerConfig

# %% [markdown]
# **1. Bytes per parameter with ZeRO-1.** bf16 parameters (2 bytes) and bf16 gradients (2) stay whole on
# every rank; ZeRO-1 shards the optimizer's state, and the fp32 master copy (4) is part of it, beside
# Adam's two moments (8): 12 bytes over 8 ranks, 1.5 each: 2 + 2 + 1.5 = 5.5 bytes a parameter, about a
# third of a whole copy's 16.

# %%
my_bytes = 2 + 2 + (4 + 8) / 8

assert memory.per_rank(7e9, 8, stage=1, optimizer="adam", precision="mixed").total == my_bytes * 7e9
assert exercises_fitting.zero1_mixed_bytes(my_bytes, ranks=8)

# %% [markdown]
# **2. What selective recomputation saves.** The softmax's probabilities, one per query, key and head
# for each line: 4 x 8 x 256 x 256 = 2,097,152 fp32 numbers, 4 bytes each. The prediction the lesson's
# counted bytes are checked against says the same for one block:

# %%
my_saved = 4 * 8 * 256 * 256 * 4

one_block = TransformerConfig(d_model=64, heads=4, layers=1, max_digits=16)
kept = {mode: activations.transformer_activation_bytes(one_block, 8, 256, recompute=mode)["total"]
        for mode in ("none", "selective")}
assert kept["none"] - kept["selective"] == my_saved
assert exercises_fitting.selective_saving(my_saved, batch=8, tokens=256, heads=4)

# %% [markdown]
# **3. Build it: a loss scaler.** Divide first, then look: a gradient that overflowed is inf (or nan) after
# the division too, and a finite one is now the gradient of the loss itself. Skip the update on an
# overflow and halve the scale (the next step's gradients are half as large); after four clean updates in
# a row, try twice the scale. This is `distlab.precision.mixed.LossScaler`'s rule, which the checker runs
# beside yours on 2 real ranks:

# %%
def scaler_step(optimizer, scale, clean):
    """The update of fp16 training with dynamic loss scaling; the next (scale, clean)."""
    from distlab.course.exercises_precision import GROWTH

    finite = True
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad.div_(scale)                      # the gradient of the loss itself
                finite = finite and bool(torch.isfinite(p.grad).all())
    if not finite:              # an inf or a nan: skip this update, try a smaller scale
        return scale * 0.5, 0
    optimizer.step()
    clean += 1
    if clean == GROWTH:         # GROWTH clean updates in a row: try a larger scale
        return scale * 2, 0
    return scale, clean


assert exercises_precision.loss_scaler(scaler_step)
