# %% [markdown]
# # Lesson 00 · solutions
#
# The exercise of `notebooks/00_welcome.ipynb` with its answer filled in, checked by the same
# checker as in the lesson (the test suite runs this notebook too).

# %%
from distlab.course import exercises
from distlab.data import load_digits

digits = load_digits()

# %% [markdown]
# **Digits per rank.** Of the 1,797 digits, 359 are held back for testing; the 1,438 training
# digits are split between the 2 ranks: 1,438 / 2 = 719 each.

# %%
my_answer = digits.n_train // 2
print(my_answer)
assert exercises.digits_per_rank(my_answer, digits, world_size=2)
