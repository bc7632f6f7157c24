# %% [markdown]
# # Lesson 15 · solutions
#
# The exercises of `notebooks/15_where_the_time_goes.ipynb` with their answers filled in, checked by the
# same checkers as in the lesson; the build-it exercise runs on real ranks.

# %%
import torch

from distlab.course import exercises_overlap, exercises_time

# %% [markdown]
# **1. ZB-H1's bubble.** Each stage is busy `3m` pass-times (a forward, a B and a W per micro-batch) and
# idles `p - 1` (1F1B idles `3(p - 1)`: two thirds of it is filled with deferred W passes):
# `3 / (24 + 3) = 1/9`.

# %%
my_bubble = 3 / (3 * 8 + 3)

assert exercises_time.zb_h1_bubble(my_bubble, stages=4, micro_batches=8)

# %% [markdown]
# **2. Tokens for the all-reduce to hide.** A ring all-reduce sends `2 (N - 1) / N` of the gradient's
# `2 x 7e9` bytes; backward computes `4 x 7e9` FLOPs per token. Equal when
# `tokens = 2 (N - 1) / N x 2 x flops / (4 x bandwidth) = (N - 1) / N x flops / bandwidth`: the
# scaling-book's FLOP/s-over-bandwidth rule with one direction's bandwidth (its W counts both, for a
# ring that sends both ways), about twenty thousand tokens here.

# %%
my_tokens = 63 / 64 * 989e12 / 50e9

assert exercises_time.tokens_to_hide(my_tokens, params=7e9, ranks=64, bandwidth=50e9, flops=989e12)

# %% [markdown]
# **3. Build it: buckets sent during backward.** Walk the parameters in reverse (backward writes the last
# layer's gradients first) and cut them into buckets of at most `cap_bytes`, a tensor larger than the
# cap alone. The hook counts the gradients written into each bucket; when the next bucket in order is
# full it lays the bucket end to end and launches its average without waiting. `finish` waits for each
# bucket in turn and copies the averages back, then resets the counts for the next step.

# %%
def attach_buckets(model, worker, cap_bytes):
    """Buckets of at most cap_bytes, in backward's order, each averaged from a hook once it is full."""
    params = list(model.parameters())[::-1]              # the order backward writes the gradients
    buckets, size = [[]], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if buckets[-1] and size + nbytes > cap_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += nbytes
    where = {id(p): i for i, bucket in enumerate(buckets) for p in bucket}
    ready = [0] * len(buckets)
    sent = []                                             # (bucket, its flat copy, the pending average)

    def written(p):
        ready[where[id(p)]] += 1
        while len(sent) < len(buckets) and ready[len(sent)] == len(buckets[len(sent)]):
            bucket = buckets[len(sent)]                   # the next bucket in order is full: send it now
            flat = torch.cat([q.grad.reshape(-1) for q in bucket])
            sent.append((bucket, flat, worker.all_reduce(flat, op="avg", async_op=True)))

    for p in params:
        p.register_post_accumulate_grad_hook(written)

    def finish():
        for bucket, flat, pending in sent:
            pending.wait()
            for q, part in zip(bucket, flat.split([q.numel() for q in bucket])):
                q.grad.copy_(part.view_as(q))
        sent.clear()
        ready[:] = [0] * len(buckets)

    return finish


assert exercises_overlap.buckets(attach_buckets)
