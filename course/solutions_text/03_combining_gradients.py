# %% [markdown]
# # Lesson 03 · solutions
#
# The exercises of `notebooks/03_combining_gradients.ipynb` with their answers filled in,
# checked by the same checkers as in the lesson.

# %%
import torch

from distlab.course import exercises, exercises_ring
from distlab.predict import alpha_beta

# %% [markdown]
# **Ring bytes.** The ring cuts the tensor into N = 4 chunks of 250,000 numbers. In the
# reduce-scatter each rank sends N-1 = 3 chunks, in the all-gather 3 more: 6 chunks of
# 250,000 float32 numbers, 6 x 250,000 x 4 = 6,000,000 bytes (1.5 tensors). The parameter
# server sends 3 whole tensors, 12,000,000 bytes.

# %%
N, numel, bytes_per_float = 4, 1_000_000, 4
my_answer = 2 * (N - 1) * (numel // N) * bytes_per_float

assert exercises.ring_bytes(my_answer, world_size=N, numel=numel)

# %% [markdown]
# **Fastest on the cluster.** For 100 floats the bytes cost nothing next to α: what counts is
# how many messages follow one another. The tree needs 2·log₂16 = 8 of them, the ring
# 2(16-1) = 30, and the server of the parameter server (like rank 0 of the naive all-reduce)
# takes in 15 messages on its one link, one after another, then sends 15: 30 as well. For 100
# million floats the bytes dominate: a ring rank sends 2(N-1)/N ≈ 1.9 tensors over its own link,
# the tree sends a whole tensor in each of its 8 steps in a row (its busiest rank, rank 0, sends 4),
# the server 15 each way.

# %%
cluster = alpha_beta.Link(alpha=5e-6, beta=1 / 10e9, gamma=1 / 20e9, lanes=None)
answer = dict(fastest_small="tree", fastest_big="ring")

assert exercises.fastest_on_cluster(answer, world_size=16, link=cluster)

# %% [markdown]
# **Identical on 2 ranks.** On 2 ranks the naive all-reduce sends rank 1's whole tensor to
# rank 0 and the sum back: two whole-tensor messages, one after the other. The parameter
# server (rank 0 is the server) does exactly the same, and so does the tree, whose single
# level pairs rank 1 with rank 0. The ring cuts the tensor into 2 chunks and in each of its 2
# steps both ranks send half a tensor at once: four messages instead of two, and only half a
# tensor to add. The model prices that differently on any link: on one lane the halves take
# turns (two more α, the same bytes in a row), on two they travel together. So the answer does
# not depend on the link fitted in the lesson; the cell checks it on a made-up one.

# %%
this_machine = alpha_beta.Link(alpha=1e-4, beta=1 / 5e9, gamma=1 / 20e9, lanes=1)   # any link gives the same set
identical = {"naive", "parameter_server", "tree"}

assert exercises.identical_at_two(identical, this_machine)

# %% [markdown]
# **Build it: a ring all-reduce.** Rank r sends to r + 1 and receives from r - 1. In
# reduce-scatter step s it sends chunk (r - s) and adds the arriving chunk (r - s - 1) into its
# own; after N - 1 steps it holds the finished sum of chunk (r + 1). In all-gather step s it sends
# chunk (r + 1 - s) and stores the arriving chunk (r - s) in place. All indices modulo N.

# %%
def my_ring(tensor, worker):
    rank, n = worker.rank, worker.world_size
    chunks = tensor.tensor_split(n)                     # views into tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):                           # reduce-scatter
        send_c, recv_c = (rank - step) % n, (rank - step - 1) % n
        incoming = torch.empty_like(chunks[recv_c])
        worker.exchange(chunks[send_c], right, incoming, left)
        chunks[recv_c].add_(incoming)
    for step in range(n - 1):                           # all-gather
        send_c, recv_c = (rank + 1 - step) % n, (rank - step) % n
        worker.exchange(chunks[send_c], right, chunks[recv_c], left)


assert exercises_ring.ring(my_ring)
