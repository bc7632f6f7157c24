# %% [markdown]
# # Lesson 13 · solutions
#
# The exercises of `notebooks/13_experts.ipynb` with their answers filled in, checked by the same
# checkers as in the lesson, and each one also against the library's own layer or formula;
# exercise 4 runs on real ranks.

# %%
import torch

from distlab.course import exercises_experts
from distlab.experts.moe import MoE, MoEConfig
from distlab.predict import traffic
from distlab.predict.traffic import capacity

# %% [markdown]
# **1. An expert's capacity.** 192 tokens with k = 2 make 384 requests, a fair share of 96 for each
# of four experts; the factor 1.25 gives each expert room for 120, rounded up if it were a fraction.
# A real layer never keeps more than that at any expert, whatever the router does:

# %%
my_capacity = 120

torch.manual_seed(0)
cfg = MoEConfig(experts=4, top_k=2, capacity_factor=1.25)
layer = MoE(8, 16, cfg)
with torch.no_grad():
    layer.router.weight.zero_()
    layer.router.weight[0], layer.router.weight[1] = 1.0, 0.5    # every token (positive features): 0, then 1
    layer(torch.rand(192, 8))
print("requests asked:", layer.last["asked"], "kept:", layer.last["kept"])
assert max(layer.last["kept"]) <= capacity(192, cfg) == my_capacity
assert exercises_experts.capacity_slots(my_capacity, tokens=192, experts=4, top_k=2, capacity_factor=1.25)

# %% [markdown]
# **2. Tokens that cross ranks.** 192 tokens x 2 = 384 requests; spread evenly over four experts on
# four ranks, a quarter are for this rank's own expert and stay; three quarters, 288, leave. The
# lesson's formula for the bytes is this number times four crossings, the width and 4 bytes, for
# each rank and layer:

# %%
my_crossing = 288

assert traffic.all_to_all_bytes(192, 32, 2, 4, 1.25, 4, 1) == 4 * my_crossing * 4 * 32 * 4
assert exercises_experts.crossing_tokens(my_crossing, tokens=192, top_k=2, ranks=4)

# %% [markdown]
# **3. Parameters a token uses.** One expert is 32 x 128 + 128 (first layer) and 128 x 32 + 32
# (second layer) = 8,352 parameters; the router is 32 x 4 = 128. With k = 1 a token goes through
# one expert and the router: 8,480, of the layer's 33,536.

# %%
my_parameters = 8_480

layer = MoE(32, 128, MoEConfig(experts=4, top_k=1))
one_expert = sum(p.numel() for p in layer.experts[0].parameters())
router = layer.router.weight.numel()
whole = sum(p.numel() for p in layer.parameters())
print(f"one expert {one_expert:,}, the router {router:,}, the whole layer {whole:,}")
assert one_expert + router == my_parameters
assert exercises_experts.active_parameters(my_parameters, d_model=32, hidden=128, experts=4, top_k=1)

# %% [markdown]
# **4. The dispatch.** Sorting the requests by expert lays rank 0's experts' requests first, then
# rank 1's, and so on: one cut per rank. A *stable* sort keeps token order within an expert, the
# order the expert serves them. Each rank's count is the sum of its experts' counts:

# %% tags=["nbval-ignore-output"]
def dispatch(expert, experts, ranks):
    """This rank's requests' experts -> (order they leave in, how many go to each rank)."""
    order = torch.argsort(expert, stable=True)
    send = torch.bincount(expert, minlength=experts).view(ranks, experts // ranks).sum(dim=1)
    return order, send.tolist()


right = exercises_experts.all_to_all_dispatch(dispatch)

# %%
assert right
print("the dispatch, on 4 real ranks, delivers every request as the library's plan does:", right)
