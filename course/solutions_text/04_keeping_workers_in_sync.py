# %% [markdown]
# # Lesson 04 · solutions
#
# The exercises of `notebooks/04_keeping_workers_in_sync.ipynb` with their answers filled in,
# checked by the same checkers as in the lesson, against a run with the lesson's settings.

# %% tags=["nbval-ignore-output"]
import distlab
from distlab.course import exercises, exercises_build
from distlab.data_parallel import local_sgd

SETUP = dict(model="mlp", width=64, batch_size=32, lr=0.3, seed=0)
run = distlab.launch(local_sgd.train, world_size=2, k=16, average="parameters", steps=64,
                     progress="none", **SETUP)

# %% [markdown]
# **Local SGD rounds.** 64 steps, parameters averaged after every 16th: 64 / 16 = 4 all-reduces
# (gradient accumulation with k = 16 would make as many, with 4 updates instead of 64).

# %%
my_answer = 64 // 16

assert exercises.local_sgd_rounds(my_answer, local_sgd.all_reduce_rounds(run[0]), steps=64, k=16)

# %% [markdown]
# **Build it: local SGD's average.** Sum every parameter over the ranks, in place, and divide by
# N: the average of the copies. The parameters, not their gradients: after k local steps the
# copies themselves have drifted apart, and it is they that must agree again.

# %%
def average_parameters(model, worker):
    for p in model.parameters():
        worker.all_reduce(p.data)           # the sum of the ranks' copies, in place
        p.data /= worker.world_size         # their mean


assert exercises_build.parameter_average(average_parameters)
