# %% [markdown]
# # Lesson 11 · solutions
#
# The knowledge check of `notebooks/11_knowledge_check.ipynb`, answered. Where a question is
# about your own runs, the answer is read from what your lessons stored, as you would read it
# from their outputs: run lessons 01 to 10 first.

# %%
from distlab import course_results
from distlab import exercises_course as check

# %% [markdown]
# **1.** Too much data for one worker's time: copies of the model on parts of the data. A model
# too big for one worker: cut the model. The model fits but Adam's state does not: ZeRO shards
# the optimizer's state (and, at higher stages, gradients and parameters).

# %%
assert check.which_parallelism({"the data takes too long on one worker": "data",
                                "the model does not fit in one worker's memory": "model",
                                "the optimizer's state does not fit, the model does": "zero"})

# %% [markdown]
# **2.** Yes: the mean of the ranks' mini-batch gradients is the gradient of their union, so
# every step is the big batch's step (lesson 01 measured the parameters equal up to rounding).

# %%
assert check.same_as_one_big_batch(True, course_results.recall("01"))

# %% [markdown]
# **3.** The parameter server: it receives N-1 whole gradients and sends N-1 back, so its link
# grows with N; a ring rank sends 2(N-1)/N of one gradient, less than two, whatever N.

# %%
assert check.busiest_link("parameter server")

# %% [markdown]
# **4.** About the straggler's delay: the fast rank reaches every all-reduce that much earlier
# and waits. Your run's measured value is the answer:

# %%
lesson04 = course_results.recall("04")
assert check.straggler_wait(lesson04["extra_wait_of_rank_0"], lesson04)

# %% [markdown]
# **5.** The regime with the most arithmetic per byte usually gains most, but on a shared
# machine the measurement decides: the largest measured speedup.

# %%
lesson05 = course_results.recall("05")
speedups = lesson05["speedup_2_ranks"]
assert check.best_regime(max(speedups, key=speedups.get), lesson05)

# %% [markdown]
# **6.** Stage 0's bytes over stage 3's, as rank 0 held them: close to the number of ranks, a
# little less (shards are padded).

# %%
lesson08 = course_results.recall("08")
held = lesson08["bytes_held_by_rank_0"]
assert check.zero3_saving(held["0"] / held["3"], lesson08)

# %% [markdown]
# **7.** `distlab job azureml run.yaml` (add `-o job.yml` to write it to a file).

# %%
assert check.azure_ml_command("distlab job azureml run.yaml")

# %% [markdown]
# **8.** The steps between the last complete checkpoint and the kill, as the monitor counted them.

# %%
lesson10 = course_results.recall("10")
assert check.failure_cost(lesson10["steps_redone"], lesson10)
