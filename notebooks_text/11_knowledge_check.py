# %% [markdown]
# # Lesson 11 · What did you find? A knowledge check, and the answer for the insurance company
#
# **Goal of this lesson.** The insurance company asked: *does distributing the training help?*
# Ten lessons measured pieces of the answer on real processes. This last one
#
# 1. checks what you took from them, with short questions, several of them about **your own
#    runs**: the checkers read what lessons 01, 04, 05, 08 and 10 stored when you ran them
#    (`distlab.course_results`, a small file in your home folder), so your right answers may
#    differ from your neighbour's;
# 2. puts your measurements together into the answer for the company.
#
# Run the lessons first; a question about a lesson you skipped says which one to run.

# %% tags=["nbval-ignore-output"]
from distlab import course_results
from distlab import exercises_course as check

print("lessons with stored results:", ", ".join(sorted(k for k in course_results.load())) or "none yet")

# %% [markdown]
# ## 1. Dividing the work (lessons 01, 06, 08)
#
# For each situation, which way of dividing the work does it call for: `"data"` (data
# parallelism), `"model"` (pipeline or tensor parallelism) or `"zero"` (sharding what every rank copies)?

# %%
my_choices = {"the data takes too long on one worker": ...,
              "the model does not fit in one worker's memory": ...,
              "the optimizer's state does not fit, the model does": ...}
check.which_parallelism(my_choices)

# %% [markdown]
# ## 2. One global update (lesson 01)
#
# In lesson 01 your ranks averaged their gradients at every step. Did they train exactly like
# one process on the whole global batch, `True` or `False`? Your run's numbers:

# %% tags=["nbval-ignore-output"]
lesson01 = course_results.recall("01")
print(lesson01)

# %%
my_same = ...
check.same_as_one_big_batch(my_same, lesson01)

# %% [markdown]
# ## 3. Parameter server or all-reduce (lesson 03)
#
# As the number of ranks grows, whose busiest link carries more bytes per step: the
# `"parameter server"`'s or a `"ring"` rank's?

# %%
my_busiest = ...
check.busiest_link(my_busiest)

# %% [markdown]
# ## 4. Synchronisation (lesson 04)
#
# In lesson 04 one rank was made slower by a fixed delay per step. How many **seconds** longer,
# per step, did the *fast* rank wait in your run? Predict it from the delay, then look:

# %% tags=["nbval-ignore-output"]
lesson04 = course_results.recall("04")
print(lesson04)

# %%
my_wait = ...
check.straggler_wait(my_wait, lesson04)

# %% [markdown]
# ## 5. Speedup and overhead (lesson 05)
#
# Lesson 05 measured three regimes on 1 and 2 ranks (`worst`, `probe`, `best`: how much
# arithmetic each step does per byte of gradient). Which one gained most from the second rank
# **in your run**?

# %% tags=["nbval-ignore-output"]
lesson05 = course_results.recall("05")
print(lesson05)

# %%
my_regime = ...
check.best_regime(my_regime, lesson05)

# %% [markdown]
# ## 6. ZeRO (lesson 08)
#
# How many times less memory did rank 0 hold at ZeRO stage 3 than at stage 0 in your run
# (parameters, gradients and optimizer state together)?

# %% tags=["nbval-ignore-output"]
lesson08 = course_results.recall("08")
print(lesson08)

# %%
my_saving = ...
check.zero3_saving(my_saving, lesson08)

# %% [markdown]
# ## 7. A cluster or a cloud (lesson 09)
#
# Which `distlab` command writes an Azure Machine Learning job for the config `run.yaml`?

# %%
my_command = ...
check.azure_ml_command(my_command)

# %% [markdown]
# ## 8. Failure at scale (lesson 10)
#
# How many training steps did the worker you killed in lesson 10 cost the job?

# %% tags=["nbval-ignore-output"]
lesson10 = course_results.recall("10")
print(lesson10)

# %%
my_cost = ...
check.failure_cost(my_cost, lesson10)

# %% [markdown]
# ## 9. The answer for the insurance company
#
# Built from what **you** measured (each line says which lesson it comes from; a lesson you
# did not run is named instead of a number):

# %% tags=["nbval-ignore-output"]
def line(lesson, text):
    found = course_results.load().get(lesson)
    print(f"- lesson {lesson}: " + (text(found) if found else "not run yet: run it to fill in this line"))


line("01", lambda r: f"distributing does not change what is learned: {r['world_size']} ranks ended "
                     f"{r['max_param_difference']:.1e} from one big-batch process; test accuracy "
                     f"{r['test_accuracy']['ranks']:.3f} against {r['test_accuracy']['one_process']:.3f}.")
def paid(speedups):
    gained = [k for k, v in speedups.items() if v > 1]
    return (f"a second rank paid off in {', '.join(gained)}" if gained else "a second rank paid off in none of "
            "the regimes") + " (speedup on 2 ranks: " + ", ".join(f"{k} {v:.2f}" for k, v in speedups.items()) + ")"


line("05", lambda r: f"whether it pays depends on the arithmetic per byte sent: in your run {paid(r['speedup_2_ranks'])}"
                     "; lesson 05's verdicts say which gains beat the spread.")
line("04", lambda r: f"every rank waits for the slowest: a rank {r['straggler_seconds'] * 1e3:.0f} ms slower made "
                     f"the others wait {r['extra_wait_of_rank_0'] * 1e3:.0f} ms more per step.")
line("08", lambda r: "when the model's training state no longer fits, ZeRO-3 held "
                     f"{r['bytes_held_by_rank_0']['0'] / r['bytes_held_by_rank_0']['3']:.1f} times less per rank.")
line("10", lambda r: f"at scale failures are normal: a killed worker cost {r['steps_redone']} steps and "
                     f"{r['seconds_to_restart']:.1f} s, and the run still ended where it would have "
                     f"(difference {r['largest_difference']:.1e}).")

# %% [markdown]
# So: distribute when one worker is too slow **and** each step does enough arithmetic per byte
# of gradient that the all-reduce is a small part of it (lesson 05 shows where that line falls
# on your machine); keep one process with more threads while that is faster; shard with ZeRO or
# split the model when the model's state outgrows a worker; and on a cluster, write the run
# down as a config and keep checkpoints, because something will fail.
#
# **Previous:** [10 · Failure is normal at scale](10_failure_is_normal_at_scale.ipynb) · [The course: map, glossary, solutions](../course/README.md)
