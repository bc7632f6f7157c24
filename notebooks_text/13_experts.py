# %% [markdown]
# # Lesson 13 · Experts: a bigger model for the same compute
#
# **Goal of this lesson.** The insurance company wants a more accurate reader, and a bigger model
# usually reads better, but every parameter a token goes through costs arithmetic. A **mixture of
# experts** (MoE) replaces a block's MLP by several MLPs, the *experts*, and a small *router* that
# sends each token to only k of them: many more parameters, about the same arithmetic per token.
# We train one, spread its experts over real ranks (**expert parallelism**), watch every token
# travel with **all-to-all**, and measure what an unbalanced router costs.

# %% [markdown]
# By the end of this lesson you can:
#
# 1. route tokens with top-k and a capacity, and count the requests that are dropped;
# 2. spread experts over ranks, write the all-to-all's dispatch yourself (it runs on real ranks), and
#    predict how many requests cross;
# 3. check that expert parallelism trains what one process trains (to within rounding);
# 4. see a router pile tokens on a few experts, and judge over seeds whether a balancing loss spreads them;
# 5. read, from the ranks' own records, who waits for the busiest expert.

# %%
import statistics

import torch

import distlab
from distlab.experts import measure
from distlab.experts.moe import MoE, MoEConfig
from distlab.parallelize import trainer
from distlab.predict import traffic
from distlab.predict.traffic import capacity
from distlab.verdict import verdict
from distlab.widgets import experts as pictures

# lesson 12's line reader: lines of 3 digits (48 tokens), 2 blocks, width 32; its MLP becomes 4 experts
READER = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16)     # width: the model's d_model
RANKS, EXPERTS = 4, 4

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. More parameters, the same arithmetic per token
#
# With k = 1 each token goes through one expert, an MLP as big as the dense model's: a token pays
# for the same arithmetic, while the layer holds four MLPs. The router is one small linear layer
# that scores each token against each expert; the token's output is its expert's output times the
# router's probability, so the router learns which expert serves which tokens best.
#
# **Predict:** after the same steps on the same lines, will the reader with four experts read more
# digits right than the dense reader whose tokens go through as many parameters? Three seeds a
# side, each an independent run, judged by the course's one rule (lesson 01):

# %% tags=["nbval-ignore-output"]
SHORT = dict(READER, steps=80, lr=1e-2, test_lines=128)
SEEDS = (0, 1, 2)
denses = [trainer.train_single(seed=seed, **SHORT) for seed in SEEDS]
moes = [trainer.train_single(experts=EXPERTS, top_k=1, capacity_factor=1.25, aux_weight=0.1, seed=seed, **SHORT)
        for seed in SEEDS]
dense, moe = denses[0], moes[0]
print("test digits read right:", verdict([r.test_accuracy for r in moes], [r.test_accuracy for r in denses],
                                         names=("the reader with experts", "the dense reader"), better="higher"))
print(f"({SHORT['test_lines'] * READER['digits']} test digits a run)")
step_ms = {name: [r.wall_time / len(r.steps) * 1e3 for r in runs] for name, runs in (("dense", denses), ("experts", moes))}
print("time of a step on this machine:", verdict(step_ms["experts"], step_ms["dense"], log=True, unit=" ms",
                                                 names=("with experts", "dense"), better="lower"))

# %%
def count(params, keep=lambda name: True):
    return sum(p.numel() for name, p in params.items() if keep(name))


one_expert = count(moe.params, lambda n: n.startswith("blocks.0.mlp.experts.0."))   # one expert, one block
active = count(moe.params) - READER["depth"] * (EXPERTS - 1) * one_expert     # a token uses 1 expert of 4
print(f"parameters: dense {count(dense.params):,}, with experts {count(moe.params):,}")
print(f"parameters a token goes through: dense {count(dense.params):,}, with experts {active:,} "
      f"(the dense count plus the routers' {active - count(dense.params)})")
assert active - count(dense.params) == READER["depth"] * READER["width"] * EXPERTS

# %% [markdown]
# Many more parameters for the same arithmetic per token (plus the routers' few). The accuracy
# verdict rests on three short runs a side: where it says "no clear difference", the runs allow
# either order however far apart the means look; more runs may settle it (`bench/experts.py` asks
# again over eight seeds, with longer runs).
#
# The second verdict times a step. Where it finds the reader with experts slower, the extra is not
# the MLP's arithmetic, the same per token, but routing, sorting each token to its expert, and each
# matrix product run four times on a few tokens instead of once on all: fixed costs that a model
# this small feels more than a large one. Big MoE models make the same trade at scale (Switch
# Transformer, Mixtral, DeepSeek-V3): their experts hold most of the parameters, and each token
# visits only a few.

# %% [markdown]
# ## 2. The router, top-k and a capacity
#
# Each expert takes at most a **capacity** of `ceil(factor x tokens x k / E)` requests from a group
# of tokens, the tokens routed together (on ranks, each rank's own): the fair share `tokens x k / E`
# times a capacity factor (Fedus et al. 2021, section 2.2). GShard and Switch pad every expert's
# buffer to its capacity, so the exchange's sizes are known before routing; this course's ranks
# exchange the counts first and send only the kept requests (pieces of varying size), so here the
# capacity only limits. First choices are served before second choices, each in token order; a
# request past the capacity is **dropped**: the token skips that expert and the residual connection
# carries it on.
#
# **Predict:** 24 tokens, k = 2, four experts, factor 1: what is the capacity, and can anything drop?

# %%
torch.manual_seed(0)
layer = MoE(8, 16, MoEConfig(experts=EXPERTS, top_k=2, capacity_factor=1.0))
layer(torch.randn(24, 8))
print("capacity of each expert:", capacity(24, layer.cfg))
print("requests each expert got:", layer.last["asked"])
print("requests each expert kept:", layer.last["kept"], " dropped:", layer.last["dropped"])
assert layer.last["kept"] == [min(a, capacity(24, layer.cfg)) for a in layer.last["asked"]]

# %% [markdown]
# A router that favours some experts fills them past their capacity while others have room: the
# fuller the favourite, the more requests it drops. Section 4 comes back to this.
#
# ## 3. Experts on ranks: tokens travel with all-to-all
#
# With four experts on four ranks, each rank keeps one expert and the whole router, and routes its
# own tokens. Then, in every MoE layer:
#
# 1. **counts**: each rank tells each rank how many requests it will send (they change every step);
# 2. **dispatch**: the requests' tokens go to their experts' ranks, an all-to-all with pieces of different sizes;
# 3. each rank runs its expert on what arrived;
# 4. **combine**: the results go back the same way, and each token adds up its experts' outputs.
#
# The backward pass runs the same exchanges the other way round.

# %% [markdown]
# `all_to_all="by_hand"` writes the all-to-all from send/recv: in round r each rank sends to the rank r
# after it and receives from the rank r before it, so every pair meets once. Every round's messages
# are posted before any is waited for, so no rank idles between rounds. `all_to_all="library"` is one
# `dist.all_to_all_single` with split sizes (on Horovod, `hvd.alltoall` with `splits`);
# `bench/experts.py` times the two side by side.
#
# **Predict:** each rank routes 4 lines of 48 tokens with k = 2. If the router spread them evenly,
# how many requests would leave a rank in one dispatch? Then check against one process routing
# four groups, with SGD (Adam divides an expert's near-zero gradient by its own small size, which
# can turn a rounding difference into a visible step; lesson 12's runs had no router and used Adam):

# %% tags=["nbval-ignore-output"]
EQUAL = dict(READER, steps=20, experts=EXPERTS, top_k=2, capacity_factor=1.25, aux_weight=0.1,
             optimizer="sgd", lr=0.1, test_lines=32, data=1, expert=-1)     # expert=-1: every rank
reference = trainer.train_single(world_size=RANKS, **EQUAL)   # routing in the ranks' groups
by_hand = distlab.launch(trainer.train, world_size=RANKS, all_to_all="by_hand", **EQUAL)

# %%
def kept(records, step):
    return [sum(r.routing[step][b]["kept"][e] for r in records for b in range(READER["depth"]))
            for e in range(EXPERTS)]


assert distlab.max_param_difference(measure.as_one_process(by_hand), reference.params) <= 1e-5
assert all(kept(by_hand, s) == kept([reference], s) for s in range(EQUAL["steps"]))
print(f"after {EQUAL['steps']} steps the experts on {RANKS} ranks equal one process (within 1e-5): True")
print("and every step kept the same tokens at every expert: True")

# %% tags=["nbval-ignore-output"]
tokens = READER["global_batch_size"] // RANKS * READER["digits"] * 16
left = [sum(row) - row[i] for i, row in enumerate(measure.matrix(by_hand, 0, 0))]
print(f"step 0, block 0: requests that left each rank: {left} (if spread evenly: {tokens * 2 * 3 // 4})")
formula = traffic.all_to_all_bytes(tokens, READER["width"], 2, EXPERTS, 1.25, RANKS, READER["depth"])
counted = measure.measured_bytes(by_hand)
print(f"bytes that crossed ranks per step, all ranks: counted {statistics.mean(counted):,.0f} "
      f"(from {min(counted):,} to {max(counted):,}); the formula if spread evenly {formula:,.0f}; "
      f"ratio {statistics.mean(counted) / formula:.3f}")

# %% [markdown]
# The formula (in `distlab/predict/traffic.py`): every kept request that leaves its rank crosses
# four times (to its expert and back, forward and backward), a row of width 4-byte numbers each.
# The count can land on either side of this even-spread formula: dropped requests lower it, and a
# router that sends fewer of a rank's requests to its own rank's experts than an even spread would
# raises it. The matrix shows each step's all-to-all: row i, the requests rank i sent to each rank;
# the diagonal never leaves its rank. Play it to watch the routing change with training.

# %% tags=["nbval-ignore-output"]
pictures.matrix_player(by_hand)

# %% [markdown]
# ## 4. Balance: the busiest expert
#
# Left alone, a router keeps sending tokens to the experts that did well early, which then learn
# faster and win more tokens: the imbalance reinforces itself (Shazeer et al. 2017, section 4). The
# Switch Transformer adds a **balancing loss**, `E x sum_e f_e P_e` (`f_e` the share of tokens whose
# first choice is e, `P_e` the router's mean probability for e), which is smallest when both are
# even.
#
# **Predict:** without the balancing loss, will the busiest expert end with more than its fair
# share of requests? How many more? On four ranks, the library's all-to-all, Adam, three seeds with
# the balancing loss and the same three without; each run gives one number, the busiest expert's
# requests over the mean (the worse block, averaged over its last 10 steps):

# %% tags=["nbval-ignore-output"]
BALANCE = dict(READER, steps=60, experts=EXPERTS, top_k=1, capacity_factor=1.25, lr=1e-2, test_lines=32,
               data=1, expert=-1)
seeded = {w: [distlab.launch(trainer.train, world_size=RANKS, all_to_all="library", aux_weight=w, seed=seed,
                             progress="none", **BALANCE) for seed in SEEDS] for w in (0.0, 0.1)}
runs = {f"balancing loss x {w}": seeded[w][0] for w in seeded}      # seed 0's runs, for the pictures
busiest = {w: [measure.settled(measure.imbalance(r))["mean"] for r in seeded[w]] for w in seeded}
for w in seeded:
    print(f"balancing loss x {w}: busiest expert / mean, by seed " + ", ".join(f"{x:.2f}" for x in busiest[w])
          + "; requests dropped in the last 10 steps " + ", ".join(str(sum(measure.dropped(r)[-10:])) for r in seeded[w]))
print(verdict(busiest[0.1], busiest[0.0], names=("with the balancing loss", "without"), better="lower"))

# %% tags=["nbval-ignore-output"]
pictures.load_explorer(runs)

# %% [markdown]
# Each column is a step, each row an expert, the colour its requests; the bars under it count the
# dropped ones. A busy expert past its capacity drops requests, and those tokens skip the MLP.
#
# Hold your prediction against the verdict, not against the pictures of one seed. Where it names
# the balancing loss, these runs show it evening the load; where it says "no clear difference",
# three short runs a side cannot tell, whatever the means suggest; `bench/experts.py` asks the
# question again over eight seeds, with longer runs on two ranks.

# %% [markdown]
# ## 5. The cost of imbalance: who waits?
#
# In every exchange a rank waits until the ranks it trades with get there, so each MoE layer lasts
# at least as long as its slowest expert's rank takes. Below: each rank's expert work (CPU seconds, a fair
# measure even when ranks share cores) against the mean, step by step, in the run without the
# balancing loss, beside the requests each rank served.

# %% tags=["nbval-ignore-output"]
alone = runs["balancing loss x 0.0"]
work = measure.slowest_vs_mean(alone)
rows = [max(r) / statistics.mean(r) for r in (measure.rows_arrived(alone, s) for s in range(2, len(work) + 2))]
print(f"slowest expert rank's work / mean: median {statistics.median(work):.2f} "
      f"(from {min(work):.2f} to {max(work):.2f}); the busiest expert rank's requests / mean: "
      f"median {statistics.median(rows):.2f} (the steps of one run)")

# %% [markdown]
# Compare the two medians: they describe the steps of one run, which share its start and its
# neighbours, so they are no verdict. If the work spreads less than the requests, part of an
# expert's time does not depend on its tokens (Python's calls, starting each matrix product), which weighs more
# the smaller the expert. Experts the size of a real model's spend their time on arithmetic, so their
# work grows with their requests.
#
# %% [markdown]
# The timeline is one MoE layer's forward on each rank, part by part. Read the *combine* bars: the
# other ranks wait in combine for the piece of the rank whose experts finish last, while that rank
# finds their results ready and waits only for the messages themselves; so it may end first or last,
# but no rank that sent it requests ends its layer before those experts are done (the cell under the
# picture checks).
# Four ranks share this machine's two cores, so some waiting is for a core rather than for an
# expert; a core (or a GPU) per rank leaves only the second kind.

# %% tags=["nbval-ignore-output"]
pictures.timeline_player(alone)

# %% tags=["nbval-ignore-output"]
last_step = len(alone[0].routing) - 1
parts = measure.timeline(alone, last_step, 0)
slow = max(range(RANKS), key=lambda r: parts[r]["experts"][1])
print(f"step {last_step}, block 0: rank {slow}'s experts finished last, at {1e3 * parts[slow]['experts'][1]:.1f} ms; "
      "each rank's layer ended at " + ", ".join(f"{1e3 * p['combine'][1]:.1f}" for p in parts) + " ms")
print(f"every other rank ended after rank {slow}'s experts finished:",
      all(p["combine"][1] >= parts[slow]["experts"][1] for r, p in enumerate(parts) if r != slow))

# %% [markdown]
# ## 6. Which expert reads which stroke?
#
# After training, each rank kept its router's first choice for the tokens of a few test lines.
# Each 2x2 patch is tinted with its expert: do blank patches share an expert? Do strokes?

# %% tags=["nbval-ignore-output"]
pictures.router_explorer(runs["balancing loss x 0.1"][0].router)

# %% [markdown]
# ## Exercises
#
# **1.** A group of 192 tokens, k = 2, four experts, capacity factor 1.25: how many requests can one
# expert take at most?

# %%
from distlab.course import exercises_experts

my_capacity = ...       # requests

exercises_experts.capacity_slots(my_capacity, tokens=192, experts=4, top_k=2, capacity_factor=1.25)

# %% [markdown]
# **2.** A rank routes 192 tokens with k = 2 to four experts on four ranks, one each. If the router
# spreads them evenly and nothing is dropped, how many requests leave the rank in one dispatch?

# %%
my_crossing = ...       # requests

exercises_experts.crossing_tokens(my_crossing, tokens=192, top_k=2, ranks=4)

# %% [markdown]
# **3.** An MoE layer of width 32 has four experts, each an MLP 32 -> 128 -> 32 with biases, and a
# router without bias. With k = 1, how many of the layer's parameters does one token go through?

# %%
my_parameters = ...     # parameters

exercises_experts.active_parameters(my_parameters, d_model=32, hidden=128, experts=4, top_k=1)

# %% [markdown]
# **4. Build it: the dispatch.** A rank holds its kept requests in token order, `expert[i]` the
# expert of request i; experts are spread evenly, rank d holding `experts // ranks` of them from
# `d x experts // ranks`. Write `dispatch`: return `order`, the requests in the order they leave
# (one cut per rank must give each rank its experts' requests, each expert's together, in token
# order), and `send`, how many go to each rank. The checker runs it on 4 real ranks (the counts
# travel first, then the rows) and compares what arrived at each rank with the library's plan.

# %%
def dispatch(expert, experts, ranks):
    """This rank's requests' experts -> (order they leave in, how many go to each rank)."""
    ...


exercises_experts.all_to_all_dispatch(dispatch)

# %% [markdown]
# ## What we measured
#
# | question | where the answer is printed |
# |---|---|
# | more parameters, same work per token: better reading? | section 1's verdict over three seeds |
# | do experts on ranks train what one process trains? | section 3: equal within 1e-5, same tokens kept |
# | bytes per step | section 3: counted against `requests x (n-1)/n x 4 x width x 4 bytes` |
# | does the balancing loss even the load? | section 4's verdict over three seeds a side |
# | what does imbalance cost? | section 5: the slowest expert rank's work against the mean |
#
# Expert parallelism is one more axis of the mesh (`data x expert`): the dense parameters are
# averaged over every rank, each expert's over its copies.

# %% [markdown]
# **For the insurance company.** Experts give the reader many more parameters for the same
# arithmetic per token. Spread over ranks, they cost every MoE layer two all-to-alls forward and
# two backward, and a rank's layer ends only when the experts it sent tokens to are done, so the
# slowest expert sets the pace. Whether the bigger reader reads better, and whether the balancing loss evens the
# load, are the verdicts of sections 1 and 4: with three short runs a side they may not decide, and
# the way to decide is more runs, not a longer look at one.

# %% [markdown]
# **Read further.** Shazeer et al., *Outrageously Large Neural Networks: the Sparsely-Gated
# Mixture-of-Experts Layer* (2017), [arXiv:1701.06538](https://arxiv.org/abs/1701.06538) (the
# self-reinforcing imbalance, section 4); Lepikhin et al., *GShard* (2020),
# [arXiv:2006.16668](https://arxiv.org/abs/2006.16668) (top-2 gating, capacity, section 2); Fedus,
# Zoph and Shazeer, *Switch Transformers* (2021), [arXiv:2101.03961](https://arxiv.org/abs/2101.03961)
# (capacity, section 2.2; the balancing loss, their equation 4); Zoph et al., *ST-MoE* (2022),
# [arXiv:2202.08906](https://arxiv.org/abs/2202.08906) (the router z-loss); Rajbhandari et al.,
# *DeepSpeed-MoE* (2022), [arXiv:2201.05596](https://arxiv.org/abs/2201.05596); Jiang et al.,
# *Mixtral of Experts* (2024), [arXiv:2401.04088](https://arxiv.org/abs/2401.04088); DeepSeek-AI,
# *DeepSeek-V3 Technical Report* (2024), [arXiv:2412.19437](https://arxiv.org/abs/2412.19437); the
# [Ultra-Scale Playbook](https://huggingface.co/spaces/nanotron/ultrascale-playbook) (Hugging Face,
# 2025), its chapter on expert parallelism.

# %% [markdown]
# **Previous:** [12 · Long lines: splitting the heads and the sequence](12_long_lines.ipynb) · **Next:** [14 · Fitting more: precision, recomputation and offload](14_fitting_more.ipynb) · [The course: map, glossary, solutions](../course/README.md)
