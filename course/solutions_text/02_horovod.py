# %% [markdown]
# # Lesson 02 · solutions
#
# The exercises of `notebooks/02_horovod.ipynb` with their answers filled in, checked by the
# same checkers as in the lesson.

# %%
from distlab.course import exercises, exercises_build
from distlab.models import build_model
from distlab.processes import horovod_backend

model = build_model("mlp", 64)

# %% [markdown]
# **1.** By hand, one all-reduce per parameter tensor: 3 weight matrices and 3 bias vectors
# make 6. The gradient has one float32 per parameter: 4 x 8,970 = 35,880 bytes. In a ring of
# 4 ranks each rank sends 2(N-1) = 6 chunks of a quarter of the gradient, 2(N-1)/N = 1.5
# gradients: 53,820 bytes for rank 0 (the chunks of 8,970 numbers are not all the same size,
# so the other ranks send a few bytes more or less). At N = 2 that fraction is exactly 1.

# %%
sizes = [p.numel() for p in model.parameters()]
gradient_bytes = 4 * sum(sizes)
answer = dict(all_reduces_per_step=len(sizes), gradient_bytes=gradient_bytes,
              ring_bytes_sent_at_4=round(2 * (4 - 1) / 4 * gradient_bytes))
print(answer)
assert exercises.fusion_in_numbers(answer, "mlp", 64)

# %% [markdown]
# **2.** `-np 4` processes, `--gloo` for the controller, `-H localhost:4`: this host, with 4
# slots.

# %%
my_command = "horovodrun -np 4 --gloo -H localhost:4"

assert exercises.horovodrun_start(my_command, horovod_backend.horovodrun_command(4, "runs/hvd4")[:6])

# %% [markdown]
# **3. Start from rank 0.** `hvd.broadcast_` (with the underscore) writes rank 0's values into
# each rank's own tensor. `hvd.broadcast` without it returns a new tensor and leaves the
# parameter as it was: rank 1 would keep its own start (the checker names that mistake).
# `hvd.broadcast_parameters(model.state_dict(), root_rank=0)` does the same loop for you.

# %%
def start_from_rank_0(model):
    for p in model.parameters():
        hvd.broadcast_(p.data, root_rank=0)   # noqa: F821 (hvd: Horovod's module, on the ranks)


assert exercises_build.start_from_rank_0(start_from_rank_0)
