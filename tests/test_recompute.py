"""Issue 38 (lesson 14): activation recomputation, none, full (every block) and selective (attention's core),
as one model transform (``train.recompute``).  On one process it changes no loss and no gradient, bit for bit;
what PyTorch keeps for backward (``sequence.memory.SavedTensors``) is what ``predict.activations`` says for
each mode, on one process, on 2 tensor-parallel ranks with sequence parallelism and on a 2-stage GPipe pipeline
with micro-batches; the recomputed FLOPs counted by ``FlopCounterMode`` are ``predict.flops.recomputed_flops``;
and the split blocks' collectives, recomputed in backward, still train like one process.  The ranks run once
for every test that reads them (one launch of 2 ranks: ``helpers.launched``)."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from distlab.predict.activations import full_recompute_peak_bytes, transformer_activation_bytes
from distlab.predict.flops import recomputed_flops
from distlab.sequence.memory import SavedTensors
from distlab.sequence.transformer import Block, TransformerConfig
from distlab.train import recompute

MODES = recompute.MODES
# SGD, as test_sequence's splits that add up gradients: it moves each parameter by lr x its gradient, so a
# gradient off by a factor shows (Adam's update would hide it)
SMALL = dict(width=32, heads=4, depth=2, digits=3, global_batch_size=16, steps=3, lr=0.1, optimizer="sgd", seed=0,
             test_lines=32)
TOLERANCE = 1e-5         # a split against one process (sums in another order), as tests/test_sequence.py


def one_process(**settings):
    """``trainer.train_single`` on SMALL's settings, once per session (``helpers.once``)."""
    from distlab.parallelize import trainer
    from helpers import once

    return once(trainer.train_single, **dict(SMALL, **settings))


def config_of(record) -> TransformerConfig:
    c = record.config
    return TransformerConfig(d_model=c["width"], heads=c["heads"], layers=c["depth"], max_digits=c["digits"],
                             causal=c["causal"])


def predicted(record, **stage) -> int:
    """What ``predict.activations`` says this record's rank keeps for backward, from its settings."""
    c, mesh = record.config, record.config["mesh"] or {}
    return transformer_activation_bytes(config_of(record), c["batch_size"], c["tokens"], tensor=mesh.get("tensor", 1),
                                        sequence_parallel=c["sequence_parallel"], context=mesh.get("context", 1),
                                        attention=c["attention"], recompute=c["recompute"], **stage)["total"]


# ---- one process -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_recomputation_changes_no_loss_and_no_parameter_on_one_process(causal):
    """Recomputing runs the same operations on the same inputs: the same losses and, after 3 SGD steps, the
    same parameters, bit for bit (CPU kernels are deterministic; the checkpoint restores the RNG state and
    this model draws none).  The experts too: their router runs again and routes alike."""
    for extra in ({}, dict(experts=4, top_k=2, capacity_factor=1.0)):
        none = one_process(causal=causal, **extra)
        for mode in ("full", "selective"):
            run = one_process(causal=causal, recompute=mode, **extra)
            assert run.losses == none.losses, (mode, extra)
            assert all(torch.equal(run.params[n], none.params[n]) for n in none.params), (mode, extra)
            assert run.config["recompute"] == mode and none.config["recompute"] == "none"


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_what_one_process_keeps_is_the_model_in_every_mode(causal):
    """SavedTensors' count of one process's step against ``transformer_activation_bytes(recompute=...)``:
    within 1% (the issue asks 10%).  Measured: lesson 12's model is 8 (3b + 1) bytes short in every mode (392 B
    of 4.5 MB with recompute none: the digit labels' flattened copy, which it leaves out), so what each mode
    saves is predicted to the byte."""
    kept, short = {}, {}
    for mode in MODES:
        record = one_process(causal=causal, recompute=mode)
        kept[mode], short[mode] = record.activation_bytes, record.activation_bytes - predicted(record)
        assert abs(predicted(record) / kept[mode] - 1) < 0.01, (mode, predicted(record), kept[mode])
        print(f"one process{', causal' if causal else ''}, recompute {mode}: kept {kept[mode]:,} B, "
              f"predicted {predicted(record):,} B")
    assert kept["full"] < kept["selective"] < kept["none"] and short["full"] == short["selective"] == short["none"]
    record = one_process(causal=causal)
    cfg, c = config_of(record), record.config
    parts = transformer_activation_bytes(cfg, c["batch_size"], c["tokens"])
    # selective drops exactly the s^2 terms; full keeps one line a block and what lies outside the blocks
    assert kept["none"] - kept["selective"] == parts["attention probabilities"] + parts.get("causal masks", 0)
    assert kept["full"] - (kept["none"] - parts["total"] + parts["outside the blocks"]) == \
        cfg.layers * c["batch_size"] * c["tokens"] * cfg.d_model * 4
    # the backward's peak with full recomputation: what it keeps and one block rematerialised, below none's
    peak = full_recompute_peak_bytes(cfg, c["batch_size"], c["tokens"])
    assert predicted(one_process(causal=causal, recompute="full")) < peak < parts["total"]


def test_flop_counter_counts_the_recomputed_forward_the_model_predicts():
    """FlopCounterMode over a forward and backward, each mode less none: full recomputes every block's forward
    (its projections, attention and MLP), selective attention's two products (the softmax between them is
    element-wise: neither side counts it), exactly ``recomputed_flops`` for both lengths of line."""
    from distlab.data import load_digits
    from distlab.sequence import lines as L
    from distlab.sequence.transformer import build_transformer, loss_and_accuracy

    data = load_digits()
    for digits in (3, 8):
        cfg = TransformerConfig(d_model=32, heads=4, layers=2, max_digits=digits)
        batch = L.train_lines(data, 4, digits, seed=0, step=0)
        counted = {}
        for mode in MODES:
            model = build_transformer(cfg)
            recompute.apply(model, mode)
            with FlopCounterMode(display=False) as flops:
                loss_and_accuracy(model, batch)[0].backward()
            counted[mode] = flops.get_total_flops()
        for mode in ("full", "selective"):
            assert counted[mode] - counted["none"] == recomputed_flops(cfg, 4, digits * 16, mode), (digits, mode)
        print(f"{digits * 16} tokens: full recomputes {counted['full'] - counted['none']:,} FLOPs, selective "
              f"{counted['selective'] - counted['none']:,}")


# ---- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings,match", [
    (dict(recompute="partial"), "unknown recompute 'partial'"),
    (dict(model="mlp", recompute="full", data=2), "recompute='full' recomputes the transformer's blocks: model "
                                                  "kind 'mlp' has none"),
    (dict(recompute="selective", context=2), "recompute='selective' with ring attention is refused"),
])
def test_a_recomputation_that_cannot_run_is_refused_before_anything_starts(settings, match):
    import distlab
    from distlab.parallelize import trainer
    from helpers import children

    before = children()
    with pytest.raises(ValueError, match=match):
        distlab.launch(trainer.train, 2, progress="none", **dict(SMALL, **settings))
    assert children() - before == set()


def test_only_the_transformer_trainer_takes_a_recomputation():
    """The other strategies never read ``training.recompute``: a run config that sets it is refused by name
    (``registry.unused_fields``), and their functions have no such keyword."""
    import distlab
    from distlab.cluster.config import RunConfig
    from distlab.data_parallel import data_parallel

    with pytest.raises(ValueError, match="training.recompute = 'full': strategy data does not use it "
                                         r"\(it is for transformer\)"):
        RunConfig(training=dict(recompute="full"))
    assert RunConfig(parallel=dict(strategy="transformer"), model=dict(kind="transformer"),
                     training=dict(recompute="selective")).call()[1]["spec"].training.recompute == "selective"
    with pytest.raises((TypeError, ValueError), match="recompute"):
        distlab.launch(data_parallel.train, 2, progress="none", recompute="full")


def test_the_transform_refuses_a_model_without_what_it_recomputes():
    from distlab.models import build_model
    from distlab.sequence.transformer import build_transformer

    with pytest.raises(ValueError, match="recompute='full' found no transformer block"):
        recompute.apply(build_model("mlp", 16), "full")
    with pytest.raises(ValueError, match="recompute='selective' found no attention"):
        recompute.apply(torch.nn.Sequential(torch.nn.Linear(4, 4)), "selective")
    with pytest.raises(ValueError, match="unknown recompute 'everything'"):
        recompute.apply(build_model("mlp", 16), "everything")
    model = build_transformer(TransformerConfig(d_model=16, heads=2, layers=1))
    assert recompute.apply(model, "full") == 1 and recompute.apply(model, "selective") == 1   # one of each
    with pytest.raises(ValueError, match="recomputed already"):
        recompute.apply(model, "full")
    assert all(isinstance(b, Block) for b in model.blocks)          # the modules (and their names) stay


# ---- real ranks: tensor (+ sequence) parallelism, a pipeline, context parallelism, experts -------------------
TP_SP = dict(SMALL, data=1, tensor=2, sequence_parallel=True, method="fused")
PIPELINE = dict(SMALL, data=1, pipeline=2, micro_batches=2, method="fused")
CONTEXT = {"ring": dict(SMALL, data=1, context=2, attention="ring", split="zigzag", causal=True, method="fused"),
           "all_gather": dict(SMALL, data=1, context=2, attention="all_gather", causal=True, method="fused")}
EXPERTS = dict(SMALL, data=1, expert=2, experts=4, top_k=2, capacity_factor=1.0, method="fused")
CASES = {**{f"tp-sp {mode}": ("train", dict(TP_SP, recompute=mode)) for mode in MODES},
         "tp full": ("train", dict(TP_SP, sequence_parallel=False, recompute="full")),
         **{f"pipeline {mode}": ("pipeline", dict(PIPELINE, recompute=mode)) for mode in MODES},
         "context ring full": ("train", dict(CONTEXT["ring"], recompute="full")),
         "context all_gather selective": ("train", dict(CONTEXT["all_gather"], recompute="selective")),
         "experts full": ("train", dict(EXPERTS, recompute="full"))}


def pipeline_step(worker, settings):
    """Test worker: one GPipe step of the transformer cut into 2 stages (every forward, then every backward),
    counted by SavedTensors: what this stage keeps for its micro-batches in flight, which pieces it holds, and
    its gradients."""
    from distlab.parallelize import trainer
    from distlab.parallelize.transforms import parallelize
    from distlab.parallelize.workloads import workload
    from distlab.pipeline import schedules
    from distlab.sequence.transformer import Embed, ReadOut
    from distlab.train.mesh import Mesh

    spec = trainer.spec_of(**settings)
    mesh, work = Mesh(worker, **spec.parallel.mesh), workload(spec)
    model = work.build()
    par = parallelize(model, worker, mesh, spec, work.data.x_test[:1])
    x, y = work.data.train_batch(work.batches(mesh.share())(0))
    m, stage = spec.parallel.micro_batches, mesh.coordinates["pipeline"]
    ops = schedules.schedule("gpipe", mesh.size("pipeline"), m, 1)[stage]
    with SavedTensors(model) as saved:
        par.stage.run(0, ops, x.chunk(m), y.chunk(m), m)
    pieces = list(par.stage.parts[stage])
    return {"bytes": saved.bytes, "stage": stage, "micro": len(x) // m, "tokens": x.shape[1],
            "blocks": sum(isinstance(p, Block) for p in pieces), "embedding": isinstance(pieces[0], Embed),
            "read_out": isinstance(pieces[-1], ReadOut),
            "grads": {n: p.grad.clone() for n, p in par.params.items()}}


def recompute_runs(worker, cases):
    """Test worker: every case of CASES on these ranks, in turn: ``{name: record or pipeline_step's dict}``."""
    from distlab.parallelize import trainer

    return {name: trainer.train(worker, trainer.spec_of(**settings)) if kind == "train"
            else pipeline_step(worker, settings) for name, (kind, settings) in CASES.items() if name in cases}


def ranks(name: str):
    """The 2 ranks' results of case ``name``: one launch for all of CASES (``helpers.launched``)."""
    from helpers import launched

    return [r[name] for r in launched(recompute_runs, 2, cases=tuple(CASES), timeout=120)]


def check_equals_one_process(records, settings) -> float:
    import distlab
    from distlab.parallelize import trainer

    reference = one_process(**{k: v for k, v in settings.items() if k in ("causal",)})
    difference = distlab.max_param_difference(trainer.assemble(records), reference.params)
    assert difference <= TOLERANCE, difference
    return difference


def test_tensor_parallel_blocks_recompute_their_collectives(warm_ranks):
    """tensor=2 with sequence parallelism in every mode, and without it recomputing every block: each trains
    like one process (within 1e-5), and with sequence parallelism like recompute none on the same ranks, bit
    for bit (the recomputed all-gathers and reduce-scatters return what the first ones did); every rank keeps
    what the model says (full: its 1/t piece of the line a block, with sequence parallelism).  Full
    recomputation runs every block's forward collectives once more, during the backward pass: the bytes they
    carry are ``predict.traffic.tensor_parallel_bytes``' forward bytes twice (the traffic counts them as
    forward bytes: they are the forward's all-reduces, or all-gathers and reduce-scatters)."""
    from distlab.predict.traffic import tensor_parallel_bytes

    none = ranks("tp-sp none")
    for name in ("tp full", *(f"tp-sp {mode}" for mode in MODES)):
        records, (sp, mode) = ranks(name), (name.startswith("tp-sp"), name.split()[-1])
        difference = check_equals_one_process(records, TP_SP)
        if sp:
            assert all(torch.equal(r.params[n], n0.params[n]) for r, n0 in zip(records, none) for n in r.params)
        for r in records:
            assert abs(predicted(r) / r.activation_bytes - 1) < 0.01, (name, r.rank, predicted(r), r.activation_bytes)
        once = tensor_parallel_bytes(SMALL["global_batch_size"], SMALL["width"], tokens=SMALL["digits"] * 16,
                                     regions=2 * SMALL["depth"], sequence_parallel=sp)
        again = once["forward"] if mode == "full" else 0
        assert records[0].traffic == {"forward": once["forward"] + again, "backward": once["backward"]}, name
        print(f"{name}: |difference| {difference:.1e}; rank 0 keeps {records[0].activation_bytes:,} B (predicted "
              f"{predicted(records[0]):,}); collectives carried {records[0].traffic}")


def test_a_pipeline_stage_keeps_each_micro_batch_in_flight(warm_ranks):
    """A 2-stage GPipe pipeline with 2 micro-batches: every stage keeps, for each micro-batch in flight, what
    the model says of its blocks and pieces (full: its blocks' inputs, GPipe's re-materialisation), within
    1%; its gradients are recompute none's, bit for bit."""
    from distlab.predict.bubbles import held_micro_batches

    none = ranks("pipeline none")
    cfg = TransformerConfig(d_model=SMALL["width"], heads=SMALL["heads"], layers=SMALL["depth"],
                            max_digits=SMALL["digits"])
    assert [s["blocks"] for s in none] == [1, 1] and none[0]["embedding"] and none[1]["read_out"]
    for mode in MODES:
        for s, s0 in zip(ranks(f"pipeline {mode}"), none):
            held = held_micro_batches("gpipe", 2, PIPELINE["micro_batches"], s["stage"])
            model = held * transformer_activation_bytes(cfg, s["micro"], s["tokens"], recompute=mode,
                                                        layers=s["blocks"], embedding=s["embedding"],
                                                        read_out=s["read_out"])["total"]
            assert abs(model / s["bytes"] - 1) < 0.01, (mode, s["stage"], model, s["bytes"])
            assert all(torch.equal(g, s0["grads"][n]) for n, g in s["grads"].items())
            print(f"pipeline stage {s['stage']}, recompute {mode}: keeps {s['bytes']:,} B, predicted {model:,}")


@pytest.mark.parametrize("attention", ["ring", "all_gather"])
def test_context_parallel_attention_recomputes_its_exchange(attention, warm_ranks):
    """Context parallelism, causal: full recomputation with the ring (its hops run again in the backward
    pass) and selective with K and V all-gathered (the gather runs again) train like one process within
    1e-5 and keep what the model says.  The ring's log shows the recomputed hops: n - 1 forward hops a block
    in the forward pass, n - 1 again and n backward ones in the backward pass."""
    mode = "full" if attention == "ring" else "selective"
    records = ranks(f"context {attention} {mode}")
    check_equals_one_process(records, CONTEXT[attention])
    for r in records:
        assert abs(predicted(r) / r.activation_bytes - 1) < 0.01, (r.rank, predicted(r), r.activation_bytes)
    if attention == "ring":
        phases = [m["phase"] for m in records[0].ring["log"]]
        assert phases == ["forward"] * SMALL["depth"] + ["forward", "backward", "backward"] * SMALL["depth"]


def test_experts_spread_over_ranks_recompute_their_all_to_all(warm_ranks):
    """Lesson 13's experts on 2 expert-parallel ranks, every block recomputed: the router routes again and
    the all-to-all runs again in the backward pass; after 3 SGD steps the parameters equal one process's
    (routing in the ranks' groups, recompute none) within 1e-5."""
    import distlab
    from distlab.parallelize import trainer
    from helpers import once

    records = ranks("experts full")
    reference = once(trainer.train_single, world_size=2, **EXPERTS)
    difference = distlab.max_param_difference(trainer.assemble(records), reference.params)
    assert difference <= TOLERANCE, difference
    assert "full recomputation" in records[0].method
