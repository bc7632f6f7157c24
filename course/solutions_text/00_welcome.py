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
# **Digits per rank.** The test digits are held back: only the training digits are shared out.
# Each of the 2 ranks gets the same number of them, the training digits divided by 2, rounded up
# when they do not divide (PyTorch's `DistributedSampler` then repeats a few, so that every rank
# takes as many steps as the others). The cell prints the numbers. A shard is the digits a rank
# *may* draw from in an epoch: the lesson's 5 steps of 32 used only some of them.

# %%
print(f"{digits.n_train + len(digits.y_test)} digits, {len(digits.y_test)} held back for testing, "
      f"{digits.n_train} for training")
my_answer = -(-digits.n_train // 2)          # the training digits over 2 ranks, rounded up
print(my_answer)
assert exercises.digits_per_rank(my_answer, digits, world_size=2)
