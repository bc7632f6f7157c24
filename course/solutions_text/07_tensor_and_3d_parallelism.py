# %% [markdown]
# # Lesson 07 · solutions
#
# The exercises of [lesson 07](../../notebooks/07_tensor_and_3d_parallelism.ipynb) with their
# answers filled in, checked by the same checkers as in the lesson; exercise 1 also against a
# real run. *f* and *g* (exercise 4) are the conjugate operators of Megatron-LM
# ([Shoeybi et al. 2019](https://arxiv.org/abs/1909.08053), section 3, figure 3).

# %%
import torch
import torch.distributed as dist

import distlab
from distlab.course import exercises, exercises_tensor
from distlab.models import build_model, count_parameters
from distlab.parallelize import mesh_3d as mesh
from distlab.tensor import tensor_parallel

# %% [markdown]
# **1. Bytes per step of the split block.** One all-reduce of the block's output forward and one
# of its input's gradient backward, each 64 x 512 numbers of 4 bytes: 2 x 64 x 512 x 4 = 262,144.

# %% tags=["nbval-ignore-output"]
run = distlab.launch(tensor_parallel.train, world_size=2, width=512, global_batch_size=64, steps=2,
                     progress="none")

# %%
my_bytes = 2 * 64 * 512 * 4

assert my_bytes == sum(run[0].traffic.values())
assert exercises.tensor_parallel_bytes(my_bytes, batch=64, width=512)

# %% [markdown]
# **2. The rank at (data 1, pipeline 1, tensor 0).** The grid is `arange(8).reshape(2, 2, 2)`,
# so the last axis varies fastest: rank = (d x 2 + p) x 2 + t = (1 x 2 + 1) x 2 + 0 = 6.

# %%
print(mesh.grid(2, 2, 2))
my_rank = (1 * 2 + 1) * 2 + 0

assert exercises.rank_in_grid(my_rank, 2, 2, 2, dict(data=1, pipeline=1, tensor=0))

# %% [markdown]
# **3. The batch at which both move the same bytes.** Data parallelism all-reduces every
# gradient: 4 x P bytes, P the number of parameters. The split block all-reduces 2 x B x 512 x 4.
# Equal when B = P / (2 x 512); above that batch, tensor parallelism moves more.

# %%
P = count_parameters(build_model("mlp", 512, depth=3))
my_batch = P / (2 * 512)
print(f"P = {P:,} parameters: equal at a batch of {my_batch:.0f}")

assert exercises.equal_traffic_batch(my_batch, width=512)

# %% [markdown]
# **4. Build it: the split layers.** *f* is the identity forward and an all-reduce of the
# gradient backward (each rank's slice of `fc2` gives part of the input's gradient); *g* is an
# all-reduce of the partial sums forward and the identity backward (the gradient of a sum is the
# same for every term). `fc2` keeps rows `r·w/t` to `(r+1)·w/t` of its weight and bias and runs
# *f* on its input; `fc3` keeps the matching columns, runs *g* on its partial output, then adds
# its whole bias once.

# %%
def my_split(worker, fc2, fc3):
    """This rank's column-parallel fc2 and row-parallel fc3: (new_fc2, new_fc3)."""
    rank, size = worker.rank, worker.world_size

    class F(torch.autograd.Function):          # f: identity forward, all-reduce backward
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad

    class G(torch.autograd.Function):          # g: all-reduce forward, identity backward
        @staticmethod
        def forward(ctx, partial):
            partial = partial.clone()
            dist.all_reduce(partial)
            return partial

        @staticmethod
        def backward(ctx, grad):
            return grad

    class Column(torch.nn.Module):
        def __init__(self, linear):
            super().__init__()
            rows = linear.out_features // size
            self.weight = torch.nn.Parameter(linear.weight.detach()[rank * rows:(rank + 1) * rows].clone())
            self.bias = torch.nn.Parameter(linear.bias.detach()[rank * rows:(rank + 1) * rows].clone())

        def forward(self, x):
            return torch.nn.functional.linear(F.apply(x), self.weight, self.bias)

    class Row(torch.nn.Module):
        def __init__(self, linear):
            super().__init__()
            cols = linear.in_features // size
            self.weight = torch.nn.Parameter(linear.weight.detach()[:, rank * cols:(rank + 1) * cols].clone())
            self.bias = torch.nn.Parameter(linear.bias.detach().clone())

        def forward(self, x):
            return G.apply(torch.nn.functional.linear(x, self.weight)) + self.bias

    return Column(fc2), Row(fc3)


assert exercises_tensor.split_layers(my_split)
