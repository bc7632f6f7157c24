# %% [markdown]
# # Lesson 10 · solutions
#
# The exercises of `notebooks/10_failure_is_normal_at_scale.ipynb` with their answers filled in,
# checked by the same checkers as in the lesson.

# %%
import math

from distlab.course import results as course_results, exercises_checkpoint, exercises_failure

# %% [markdown]
# **1. How often to save?** Saving every `T` seconds wastes `30 / T` of the time; a failure,
# once every `M = 20 × 3600` seconds, loses half an interval on average: `T / (2M)` of the time.
# The sum `30/T + T/(2M)` is smallest where its two terms are equal, `T = sqrt(2 × 30 × M)`
# (Young's rule, 1974). The cell prints `T` and the share of the time it wastes, `2 × 30 / T`.

# %%
my_interval = math.sqrt(2 * 30 * 20 * 3600)
print(f"a checkpoint every {my_interval:.0f} seconds ({my_interval / 60:.0f} minutes), "
      f"wasting {2 * 30 / my_interval:.1%} of the time")

assert exercises_failure.checkpoint_interval(my_interval, save_seconds=30, hours_between_failures=20)

# %% [markdown]
# **2. What did your failure cost?** Only the steps after the last complete checkpoint are lost:
# `reached - resumed_from`. Your numbers are your own run's (the kill lands wherever the job
# happens to be): lesson 10 kept them for lesson 11, and the cell below reads them back and does
# the arithmetic on them. (If you have not run lesson 10 yet, it says so.)

# %% tags=["nbval-ignore-output"]
mine = course_results.recall("10")          # what your run of lesson 10 measured
if mine:
    resumed_from, measured = mine["resumed_from"], mine["steps_redone"]
    reached = mine.get("reached", resumed_from + measured)
    my_redone = reached - resumed_from
    print(f"your run: rank 1 reached step {reached}, went back to step {resumed_from}: {my_redone} steps trained twice")
    assert exercises_failure.steps_redone(my_redone, reached=reached, resumed_from=resumed_from, measured=measured)

# %% [markdown]
# **3.** The parameters, the optimizer's state (here each parameter's momentum; Adam would add its two
# moments and its step count) and the step to go on from. Without the optimizer's state the first
# step after the restart (step 5) already differs: the velocity starts again at zero. The data needs
# no more: the mini-batches are a function of the seed and the step. (A run with dropout would also
# save the random generators, as the library's `Checkpointer` does.)

# %%
def save(model, optimizer, step):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


assert exercises_checkpoint.checkpoint_contents(save)
