# %% [markdown]
# # Lesson 03 · Combining gradients: parameter server vs all-reduce
#
# **Goal of this lesson.** In lesson 01 every rank averaged its gradients with one call,
# `dist.all_reduce`. Lesson 01's small model has thousands of gradient numbers (the first
# cell counts them), a production model billions, and they travel between workers every step.
# *How* decides whether more workers pay off. By the end of this lesson you can
#
# 1. explain four ways of combining N gradients: **naive** (all to one, then back), a
#    **parameter server**, the **ring all-reduce** and a **tree**, each a short function of
#    point-to-point messages in `distlab/comm/collectives.py`;
# 2. predict the bytes each rank sends and the time it takes with the **alpha-beta model**,
#    and say which of its predictions this machine can test;
# 3. test them on real worker processes (predictions are always labelled as such), and train
#    with an all-reduce you wrote.

# %%
import inspect

import distlab
from distlab.comm import collective_runs, collectives, cost_model, measure_costs
from distlab.predict import alpha_beta
from distlab.data_parallel.data_parallel import train, train_single
from distlab.widgets import collectives as pictures, costs
from distlab.models import build_model
from distlab.widgets.display import show

gradient_numbers = sum(p.numel() for p in build_model("mlp", 64).parameters())
print("gradient numbers of lesson 01's model, per step:", gradient_numbers)

# %% tags=["nbval-ignore-output"]
from distlab import doctor

print(doctor.this_run())    # the machine the numbers in this lesson come from

# %% [markdown]
# ## 1. The ring, in a few lines
#
# Open `distlab/comm/collectives.py` next to this notebook: each algorithm is one short function.
# Here is the ring. Rank *r* only ever talks to its neighbours: it sends to *r+1* and receives
# from *r−1*, both at once. The tensor is cut into N chunks; in the **reduce-scatter** phase
# each chunk travels once round the ring collecting everybody's numbers, in the **all-gather**
# phase the finished chunks travel round once more.

# %%
print(inspect.getsource(collectives.ring_all_reduce))

# %% [markdown]
# ## 2. Watch it on 4 real ranks
#
# To make the additions visible, rank *r* starts with the numbers (i+1)·10<sup>r</sup>:
# rank 0 holds 1 2 3 …, rank 1 holds 10 20 30 …, and so on. In a sum, digit *r* is non-zero
# exactly when rank *r*'s number is in it: 1111 means "all four ranks", 110 "ranks 1 and 2".
#
# The next cell starts 4 worker processes; each runs all four algorithms once and records
# every message it received (from whom, which chunk, how many bytes, the numbers).

# %% tags=["nbval-ignore-output"]
records = distlab.launch(collective_runs.trace, world_size=4, numel=8)
traces = collective_runs.merge_traces(records)

# %% [markdown]
# Every algorithm must give what `dist.all_reduce` gives, on every rank:

# %%
for name, t in traces.items():
    same = t["results"] == t["dist_results"]
    print(f"{name:17} rank 0 holds {t['results'][0]}  equals dist.all_reduce on all ranks: {same}")
    assert same

# %% [markdown]
# **The ring, step by step.** Press play, or drag the slider. Each row is a rank, each cell one
# of its numbers; the coloured bar under a number shows *whose* numbers are added into it (one
# colour per rank), the thick outline marks what just arrived, and the arrows are the messages
# of that step. Watch chunk 3: it starts on rank 3, picks up rank 0's numbers (7007), then
# rank 1's (7077), then rank 2's (7777); the all-gather then carries it to everyone.

# %%
pictures.animation(traces["ring"])

# %% [markdown]
# **Predict first:** in the parameter server (rank 0 is the server and also a worker), how many
# whole tensors arrive at rank 0, and how many leave it? Then look.

# %%
pictures.animation(traces["parameter_server"])

# %% [markdown]
# The **tree** adds in pairs (1→0 and 3→2 at the same time), then pairs of pairs (2→0), and sends
# the sum back down the same tree: 2·log₂N steps in a row instead of the ring's 2(N−1).

# %%
pictures.animation(traces["tree"])

# %% [markdown]
# ## 3. Who sends how much?
#
# The bytes each rank sent, read from the message logs of the run above, and the same divided
# by the size of the whole tensor (8 numbers of 8 bytes). The model's first prediction needs no
# stopwatch: its schedule of each algorithm (`alpha_beta.bytes_per_rank`, computed without
# running anything) must give exactly these bytes, and the cell checks it:

# %%
demo = collective_runs.demo_values(0, 8)
tensor_bytes = demo.numel() * demo.element_size()
for name, t in traces.items():
    sent = cost_model.bytes_sent(t["messages"], 4)
    schedule = alpha_beta.bytes_per_rank(name, 4, demo.numel(), demo.element_size())   # the model
    in_tensors = ", ".join(f"{b / tensor_bytes:.2f}" for b in sent)
    print(f"{name:17} bytes sent per rank: {str(sent):18} in tensors: {in_tensors}   "
          f"the model's schedule gives the same: {sent == schedule}")
    assert sent == schedule
show(pictures.traffic_figure(traces))

# %% [markdown]
# The server (and the naive rank 0) sends N−1 = 3 whole tensors; every ring rank sends
# 2(N−1)/N = 1.5 tensors. **Exercise.** A 4-rank ring all-reduces a gradient of 1,000,000
# float32 numbers. How many bytes does each rank send? Replace the `...` with a number or an
# expression and run the cell.

# %%
from distlab.course import exercises

my_answer = ...   # bytes each rank of a 4-rank ring sends for 1,000,000 float32 numbers

exercises.ring_bytes(my_answer, world_size=4, numel=1_000_000)

# %% [markdown]
# With 64 ranks the server would send 63 tensors per step, and receive 63: its link is the
# bottleneck, and it grows with N. A ring rank sends 2·63/64 ≈ 1.97 tensors: never more
# than 2, whatever N is. [Patarasuk and Yuan 2009](https://doi.org/10.1016/j.jpdc.2008.09.002)
# prove a lower bound on the bytes an all-reduce must move and show that this ring reaches it
# for large tensors. This is why large jobs use all-reduce, as Horovod did from its first release
# ([Sergeev and Del Balso 2018](https://arxiv.org/abs/1802.05799)), or shard the server over
# many machines ([Li et al. 2014](https://www.usenix.org/conference/osdi14/technical-sessions/presentation/li_mu)).

# %%
numel = 1_000_000
for n in (2, 4, 16, 64):
    ring = max(alpha_beta.bytes_per_rank("ring", n, numel)) / (4 * numel)
    server = max(alpha_beta.bytes_per_rank("parameter_server", n, numel)) / (4 * numel)
    print(f"N = {n:2}: busiest ring rank sends {ring:.2f} tensors, the server {server:.0f}")

# %% [markdown]
# ## 4. Predict, then measure
#
# The **alpha-beta model** prices a message of *b* bytes at α + b·β: α is the fixed cost of any
# message, β the cost per byte ([Hockney 1994](https://doi.org/10.1016/S0167-8191%2806%2980021-9));
# adding a received byte into one's own costs γ ([Thakur, Rabenseifner and Gropp 2005](https://doi.org/10.1177/1094342005051521)).
# α and β come from a **ping-pong**: rank 0 sends a message, rank 1 sends it straight back, and
# half the fastest round trip is one message; γ comes from timing an add. Then every algorithm is
# timed next to gloo's own `dist.all_reduce` (a reference only: the model has no schedule for it),
# taking turns, so that the machine's busy moments fall on all of them alike. The fit also
# prints `lanes`: how many messages this machine moves at full speed at once (more on it after
# the measurement).

# %% [markdown]
# **Before running:** on 2 ranks, draw who sends what to whom in each of the four. Which of
# them send exactly the same messages, one after the other, so that the model must price them
# identically (a **tie**)? The cell after the measurement checks your answer. Then guess:
#
# * will the stopwatch put the tied ones in a fixed order? A tie is a prediction too: what
#   would the stopwatch have to show to refute it?
# * where does the model put the ring, whose messages differ, and could the stopwatch disagree?

# %% [markdown]
# The measurement is repeated: three launches, each its own sitting of the ranks. Lesson 01's
# rule needs independent runs, and the timed repetitions inside one launch share its moment.

# %% tags=["nbval-ignore-output"]
repeats = [distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000, 100_000, 1_000_000),
                          repeats=7, ping_pong_bytes=(8, 8_000, 80_000, 800_000, 4_000_000),
                          ping_pong_repeats=10, progress="none")[0] for _ in range(3)]
measured = repeats[0]
link = cost_model.fit_link(measured["ping_pong"], measured["add"])
print(link)

# %%
from distlab.course import exercises

identical = ...   # a set of algorithm names, e.g. {"naive", "ring"}

exercises.identical_at_two(identical, link)

# %% [markdown]
# The measured times of the first launch: the best of its repetitions, and in brackets the median
# and the slowest, so that you see how far they spread; then the model's prediction. The model is
# fitted to the *best* ping-pong, so it predicts the best case: a message when no other process
# has taken a core. The last column says how far each median lies above its best, even for
# algorithms with identical messages. A likely reason, not measured here: on 2 cores the 2 ranks,
# the notebook and anything else running take turns, and a rank that loses its core for a moment
# holds up its partner. Whether a gap between two algorithms is more than such moments is for the
# rule over the 3 launches to say, two cells down.

# %% tags=["nbval-ignore-output"]
import statistics

rows = measure_costs.compare(measured, link)
for row in rows:
    reps = measured["times"][row["algorithm"]][row["numel"]]
    line = (f"{row['algorithm']:17} {row['numel']:>9,} floats: measured {row['measured'] * 1e3:6.2f} ms "
            f"(median {statistics.median(reps) * 1e3:6.2f}, slowest {max(reps) * 1e3:6.2f})")
    if "predicted" in row:
        line += f", model {row['predicted'] * 1e3:7.2f} ms (model/measured {row['ratio']:.2f})"
    print(line + f", median/best {statistics.median(reps) / min(reps):.1f}")

# %% [markdown]
# Did the model get it right? The next cell answers from the numbers, not from what the model
# should do: how far its times were from the measured ones, and, at each size, whether the
# stopwatch names a winner between its two fastest by lesson 01's rule over the 3 launches (each
# launch's median one run), and whether the model picked it. When those two are ones the model
# ties, their order is no prediction of the model's and that cell tests nothing; the tie itself,
# and the algorithms outside it, are tested in the cell after it.

# %% tags=["nbval-ignore-output"]
print(measure_costs.verdict(repeats, rows))

# %% [markdown]
# **What the model can decide on 2 ranks.** At each size its ranking makes two claims that the
# stopwatch could refute:
#
# * the algorithms it ties show no clear difference. A clear one between the two furthest apart
#   would refute the tie: their messages are the same, but the calls around them differ
#   (blocking `send`/`recv` against `isend`/`irecv` and `wait`), and the model does not price calls;
# * every algorithm outside the tie is slower than the tie's fastest (the cell prints the factor
#   the model predicts next to the measured ratio, for you to compare).
#
# The next cell applies the rule to the 3 launches' medians: medians, because an order that held
# only for the luckiest repetition would help nobody. For each claim it prints the stopwatch's
# answer: agrees, disagrees or cannot tell (for a tie: not contradicted, which is not "confirmed":
# three launches can show only large differences; read the 99% intervals).

# %% tags=["nbval-ignore-output"]
from distlab.verdict import verdict

for numel in sorted({r["numel"] for r in rows}):
    mine = [r for r in rows if r["numel"] == numel and "predicted" in r]
    predicted = {r["algorithm"]: r["predicted"] for r in mine}
    runs = {a: [1e3 * statistics.median(m["times"][a][numel]) for m in repeats] for a in predicted}   # ms
    tied = sorted(measure_costs.model_pick(mine), key=lambda a: statistics.fmean(runs[a]))
    print(f"{numel:>9,} floats: the model's fastest: {', '.join(tied)}")
    if len(tied) > 1:
        said = verdict(runs[tied[0]], runs[tied[-1]], names=(tied[0], tied[-1]), better="lower", log=True,
                       digits=3, unit=" ms")
        print(f"  the tie, its two furthest apart: {'disagrees' if said.clear else 'not contradicted'}: {said}")
    for other in sorted(set(predicted) - set(tied)):
        said = verdict(runs[other], runs[tied[0]], names=(other, tied[0]), better="lower", log=True,
                       digits=3, unit=" ms")
        check = {None: "cannot tell", tied[0]: "agrees on the order", other: "disagrees on the order"}[said.winner]
        print(f"  {other} slower, by the model {predicted[other] / predicted[tied[0]]:.2f} times "
              f"{tied[0]}'s time: {check}: {said}")

# %% [markdown]
# What the numbers say, honestly:
#
# * On one machine there is no network: "sending" is CPU cores copying bytes, and a single
#   message can keep both of our 2 cores busy (one copies out, one copies in). The fit measures
#   it (two messages at once against the same two one after the other) and prints `lanes`. With `lanes = 1` the ring's
#   simultaneous messages (one per rank) take turns, so it moves as many bytes one after another
#   as the others; a busy machine can tip the fit either way. On a cluster every rank has its own
#   link (`lanes=None`), and there the ring's at most 2 tensors per rank, whatever N, is what lets
#   it scale.
# * On 2 ranks naive, parameter server and tree are the same two messages: the model prices them
#   identically at every size, and only the tie itself can be tested.

# %% [markdown]
# * The 2-rank ring sends four messages of half a tensor: two more α than the others, but it adds
#   only half a tensor (γ). With one lane the model puts it behind at small sizes, and as the size
#   grows its smaller adding makes up for the two α: the explorer below shows at what size, for
#   the fitted link. With two lanes its halves travel at once and it leads wherever bytes matter.
# * The lines above print the gap the model predicted at each measured size and the stopwatch's
#   answer. If the measured gap is far larger, the ring pays for something the model leaves out.
#   One suspect, not tested here: its small messages travel both ways at once, while the
#   ping-pong times small messages one way only (the two-way timing starts at large ones).

# %% [markdown]
# * Small tensors are ruled by α: an all-reduce of 1,000 floats is a few messages of about α
#   each. A moment in which the operating system hands a core to another process can cost more
#   than that, so one launch's small-size times can come out in any order. A size whose *best*
#   repetition lies far above the model is another matter: a passing moment would have to hit
#   every repetition while the algorithms timed between them ran fast. Whether any difference
#   means something is for the rule over the launches to say, not for one launch's table.
# * The model is a sketch, not a stopwatch: compare ratios, not last digits. Caches can make
#   large tensors slower per byte: `bench/collectives.py` measures much larger messages and fits
#   them a line of their own (`Link.large`), so you can see whether they are on your machine.

# %% [markdown]
# Explore the model below: change N, the tensor size, and switch the hardware from "this
# machine" to "a cluster". Marks are the first launch's best repetitions (the table above).

# %% tags=["nbval-ignore-output"]
costs.cost_explorer(link, [measured], world_size=2, numel=1_000_000)

# %% [markdown]
# **Exercise.** On a cluster of 16 ranks (each with its own link, α = 5 µs, 1/β = 10 GB/s),
# which algorithm does the model say is fastest for a tiny gradient of 100 floats, and which
# for 100 million? Put your answers in the cell.

# %%
cluster = alpha_beta.Link(alpha=5e-6, beta=1 / 10e9, gamma=1 / 20e9, lanes=None)
print("algorithms:", ", ".join(collectives.ALGORITHMS))
answer = dict(fastest_small=..., fastest_big=...)   # names from the list above

exercises.fastest_on_cluster(answer, world_size=16, link=cluster)

# %% [markdown]
# ## 5. Train with your own all-reduce
#
# `distlab.data_parallel.data_parallel.train(method="by_hand", collective=...)` averages the gradients with
# any of the four algorithms instead of `dist.all_reduce`. With the ring, 3 ranks at batch 16
# (3 ranks: the layers' sizes do not divide into equal chunks) must take exactly the steps of
# one process at batch 48 (lesson 01), up to rounding:

# %% tags=["nbval-ignore-output"]
ring_run = distlab.launch(train, world_size=3, method="by_hand", collective="ring",
                          model="mlp", width=64, batch_size=16, steps=10, lr=0.2, seed=0)
single = train_single(world_size=3, model="mlp", width=64, batch_size=16, steps=10, lr=0.2, seed=0)

# %% tags=["nbval-ignore-output"]
difference = max(distlab.max_param_difference(r.params, single.params) for r in ring_run)
print(f"largest parameter difference, ring-trained ranks vs one process: {difference:.0e}")

# %% [markdown]
# The exact figure depends on the processor's rounding, and so differs between machines;
# the fact does not:

# %%
assert difference < 1e-5
print("the ring-trained ranks took the steps of one process, within 1e-5")

# %% [markdown]
# ### Build it: a ring all-reduce
#
# Write the ring yourself, in place, on `worker.exchange(outgoing, right, incoming, left)`, which
# sends to one neighbour while it receives from the other. Cut the tensor into N chunks with
# `tensor.tensor_split(n)` (views: writing into a chunk writes into the tensor); N - 1
# reduce-scatter steps (send one chunk, add the one that arrives), then N - 1 all-gather steps
# (pass the finished chunks on). Section 1 shows one way; try it without looking. The checker runs
# your function on 3 real ranks, on a tensor that 3 does not divide (chunks of unequal size, as
# for the layers above), next to `dist.all_reduce`, and names the first wrong rank and chunk,
# and whose numbers that chunk holds.

# %%
from distlab.course import exercises_ring


def my_ring(tensor, worker):
    ...   # rank, n = worker.rank, worker.world_size; chunks = tensor.tensor_split(n); ...


exercises_ring.ring(my_ring)

# %% [markdown]
# ## What to take away
#
# * All four algorithms give the same sum; they differ in **who sends what to whom**.
# * A **parameter server**'s link carries N−1 tensors in and out: it grows with N. A **ring**
#   rank sends 2(N−1)/N tensors (one at N = 2, never more than two), in 2(N−1) steps; a
#   **tree** needs only 2·⌈log₂N⌉ steps but sends whole tensors.
# * The **alpha-beta model**'s schedules predict the bytes exactly (section 3 checks them against
#   the message logs). Its times are a sketch of the best case: how far they were from the
#   stopwatch, and whether its ties and its ranking survived lesson 01's rule, is printed above
#   for this run. At N = 2 every busiest rank sends one tensor: the ring's strength, under two
#   tensors whatever N, cannot show here. Lesson 05 asks when distributing pays at all.
#
# Benchmark on a quiet machine: `python bench/collectives.py`.

# %% [markdown]
# **Previous:** [02 · The same job with Horovod](02_horovod.ipynb) · **Next:** [04 · Keeping workers in sync](04_keeping_workers_in_sync.ipynb) · [The course: map, glossary, solutions](../course/README.md)
