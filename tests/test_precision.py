"""Issue 38: mixed precision in the one micro-step: bf16 autocast, fp16 with a dynamic loss scaler written
out, and where fp16 would lose a gradient.  One process; the ranks come with the wiring of the update."""
import pytest
import torch

from distlab import datasets
from distlab.models import build_model
from distlab.precision import mixed
from distlab.train.step import FP32, make_optimizer, micro_step

DIGITS = datasets.load_dataset("digits")


def train(precision, steps=60, lr=0.1, batch=64):
    """Steps of the one micro-step and the precision's update; the losses, the model."""
    torch.manual_seed(0)
    model = build_model("mlp", 64, seed=0)
    optimizer = make_optimizer("momentum", precision.prepare(model), lr)
    losses, g = [], torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, DIGITS.n_train, (batch,), generator=g)
        optimizer.zero_grad()
        loss, _ = micro_step(model, DIGITS.x_train[idx], DIGITS.y_train[idx], precision=precision)
        precision.step(optimizer)
        losses.append(loss)
    return losses, model


def tail(losses, n=10):
    return sum(losses[-n:]) / n


def test_bf16_and_fp16_with_scaling_train_like_fp32():
    fp32, _ = train(FP32)
    for name in ("bf16", "fp16"):
        low, model = train(mixed.policy(name))
        assert all(p.dtype == torch.float32 for p in model.parameters())      # master weights stay fp32
        assert 0.9 <= tail(low) / tail(fp32) <= 1.1, (name, tail(low), tail(fp32))
        assert tail(low) != tail(fp32)                                          # it did compute in 16 bits


def test_an_overflowing_scale_skips_the_update_and_halves_until_it_fits():
    fp16 = mixed.policy("fp16", init_scale=2.0 ** 40, growth_interval=1000)
    losses, _ = train(fp16, steps=60)
    history = fp16.scaler.history
    first_clean = next(i for i, (_, skipped) in enumerate(history) if not skipped)
    assert first_clean >= 1                                    # fp16's largest is 65504: 2^40 overflows
    assert [s for s, _ in history[:first_clean + 1]] == [2.0 ** (40 - i) for i in range(first_clean + 1)]
    assert sum(not skipped for _, skipped in history) > len(history) / 2      # then it fits and trains
    assert tail(losses) < losses[0]


def test_a_skipped_update_leaves_the_weights_alone_and_clean_ones_grow_the_scale():
    model = build_model("mlp", 64, seed=0)
    optimizer = make_optimizer("sgd", model.parameters(), 0.1)
    before = [p.detach().clone() for p in model.parameters()]
    fp16 = mixed.policy("fp16", init_scale=2.0 ** 40, growth_interval=2)
    micro_step(model, DIGITS.x_train[:64], DIGITS.y_train[:64], precision=fp16)
    assert fp16.step(optimizer) is False
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    scaler = mixed.LossScaler(init_scale=8.0, growth_interval=2)
    for _ in range(4):
        scaler.update(True)
    assert scaler.scale_value == 32.0 and [s for s, _ in scaler.history] == [8.0, 8.0, 16.0, 16.0]


def test_fp16_flushes_small_gradients_that_the_scale_keeps():
    """The reason for loss scaling: a loss 2^-28 times smaller gives gradients below fp16's smallest
    subnormal inside backward; scaled by 2^28 they come back equal to fp32's, to fp16's precision."""
    x, y = DIGITS.x_train[:64], DIGITS.y_train[:64]

    def grads(precision, shrink):
        model = build_model("mlp", 64, seed=0)
        with precision.autocast():
            loss, _ = model.loss(model(x), y)
        precision.scale(loss * shrink).backward()
        return [p.grad.clone() for p in model.parameters()]

    exact = grads(FP32, 2.0 ** -28)
    plain = grads(mixed.Autocast(dtype=torch.float16), 2.0 ** -28)
    scaler = mixed.LossScaler(init_scale=2.0 ** 28)
    scaled = grads(mixed.ScaledAutocast(scaler=scaler), 2.0 ** -28)
    assert zeros(plain) > zeros(exact) + 0.2                                # fp16 lost many
    assert mixed.exponent_histogram(exact)["zero_in_fp16"] > 0.2            # and the histogram says why
    for g in scaled:                                                        # unscale, as the update would
        g.div_(scaler.scale_value)
    assert zeros(scaled) <= zeros(exact) + 0.01
    rel = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(scaled, exact))
    assert rel < 5e-2                            # fp16's 10-bit mantissa, rounded through every layer


def zeros(gradients):
    """The share of exact zeros among ``gradients``' numbers."""
    return sum(int((g == 0).sum()) for g in gradients) / sum(g.numel() for g in gradients)


def test_the_exponent_histogram_counts_what_fp16_cannot_hold():
    h = mixed.exponent_histogram([torch.tensor([1e-9, 1e-6, 1.0, 1e5, 0.0])])
    assert h["count"] == 4 and h["zero_in_fp16"] == 0.25 and h["subnormal_in_fp16"] == 0.25
    assert h["overflow_in_fp16"] == 0.25 and h["exponents"][0] == 1


def test_bad_precision_settings_are_refused():
    with pytest.raises(ValueError, match="precision must be one of"):
        mixed.policy("fp8")
    with pytest.raises(ValueError, match="bf16 has no loss scaler"):
        mixed.policy("bf16", init_scale=1024.0)
    with pytest.raises(ValueError, match="growth_factor > 1"):
        mixed.LossScaler(growth_factor=1.0)


# ---- on real ranks: the one loop takes the precision's update --------------------------------------
def test_bf16_and_fp16_on_two_ranks_keep_the_copies_identical_and_train_like_fp32():
    import distlab
    from distlab.data_parallel import data_parallel as dp

    setup = dict(global_batch_size=64, steps=40, lr=0.1, optimizer="momentum", progress="none")
    fp32 = distlab.launch(dp.train, world_size=2, **setup)
    for name in ("bf16", "fp16", "bf16_master"):
        for method in ("by_hand", "ddp"):
            ranks = distlab.launch(dp.train, world_size=2, method=method, precision=name, **setup)
            if method == "by_hand":     # (DDP also keeps its buckets, a copy of the gradients no tensor shows)
                bytes_match_the_prediction(ranks[0], name, "momentum", batch=32)
            assert ranks[0].config["precision"] == name
            assert distlab.max_param_difference(ranks[0].params, ranks[1].params) == 0.0   # one update everywhere
            assert ranks[0].loss_scale == ranks[1].loss_scale                             # and one verdict on it
            assert len(ranks[0].loss_scale) == (40 if name == "fp16" else 0)
            ratio = tail(ranks[0].losses) / tail(fp32[0].losses)
            assert 0.9 <= ratio <= 1.1, (name, method, ratio)
            assert distlab.max_param_difference(ranks[0].params, fp32[0].params) > 0     # it computed in 16 bits


def bytes_match_the_prediction(record, policy, optimizer, batch):
    """The bytes a rank counted (``record.memory``: its tensors between steps, and one more forward's saved
    tensors) against ``predict``, category by category (1%: Adam's step counters, the loss's one number)."""
    from distlab.predict import activations, memory

    n = sum(p.numel() for p in record.params.values())
    want = {k: v * n for k, v in memory.bytes_per_parameter(policy, optimizer).items()}
    want.update(activations.mlp_saved_bytes(batch, record.config["width"], record.config["depth"], policy=policy))
    assert set(want) == set(record.memory)
    for category, expected in want.items():
        assert record.memory[category] == pytest.approx(expected, rel=0.01, abs=0), (policy, category)


def test_each_policy_holds_the_bytes_the_model_predicts_on_one_process():
    """Lesson 14: fp32 and autocast keep 4 + 4 + 8 bytes a parameter with Adam, bf16 master weights
    2 + 2 + 4 + 8: the same 16, but autocast adds a 16-bit copy of each weight while a step runs, and
    halves the activations as the master weights do."""
    from distlab.data_parallel import data_parallel as dp

    got = {}
    for name in ("fp32", "bf16", "fp16", "bf16_master"):
        got[name] = dp.train_single(global_batch_size=64, steps=5, optimizer="adam", lr=0.01, precision=name)
        bytes_match_the_prediction(got[name], name, "adam", batch=64)
    assert got["bf16_master"].params["fc1.weight"].dtype == torch.bfloat16
    assert got["bf16"].memory["weight copies"] > 0 == got["bf16_master"].memory["weight copies"]
    assert got["bf16"].memory["activations"] < 0.6 * got["fp32"].memory["activations"]


def test_master_weights_keep_updates_that_bf16_would_round_away():
    """Lesson 14: why the master copy: an update a thousand times smaller than bf16's step near 1 is
    lost by a bf16 weight updated in place, and adds up in the fp32 master."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    policy = mixed.policy("bf16_master")
    optimizer = torch.optim.SGD(policy.prepare(model), lr=1.0)
    in_place = torch.ones(1, dtype=torch.bfloat16)
    for _ in range(1000):
        model.weight.grad = torch.full_like(model.weight, -2.0 ** -17)   # bf16's step at 1 is 2^-7
        policy.step(optimizer)
        in_place += torch.tensor(2.0 ** -17, dtype=torch.bfloat16)
    assert in_place.item() == 1.0                                        # every update rounded away
    assert policy.pairs[0][1].item() == pytest.approx(1 + 1000 * 2.0 ** -17)
    assert model.weight.item() == pytest.approx(1 + 1000 * 2.0 ** -17, abs=2.0 ** -7)
    assert model.weight.item() > 1.0


def test_a_precision_the_run_cannot_take_is_refused_before_any_process_starts():
    import distlab
    from distlab.data_parallel import data_parallel as dp

    with pytest.raises(ValueError, match="precision must be one of"):
        distlab.launch(dp.train, world_size=2, precision="fp8", progress="none")
    with pytest.raises(ValueError, match="it needs dtype='float32'"):
        distlab.launch(dp.train, world_size=2, precision="bf16", dtype="float64", progress="none")
    with pytest.raises(ValueError, match="fp32 master copies, which backward never reaches"):
        distlab.launch(dp.train, world_size=2, method="ddp", precision="bf16_master", backend="horovod",
                       progress="none")


def test_a_checkpoint_keeps_the_loss_scalers_state():
    """Lesson 10's checkpoints hold what the precision keeps: a resumed fp16 run goes on at its scale."""
    fp16 = mixed.policy("fp16", init_scale=2.0 ** 40, growth_interval=3)
    train(fp16, steps=30)
    saved = fp16.state_dict()
    again = mixed.policy("fp16")
    again.load_state_dict(saved)
    assert (again.scaler.scale_value, again.scaler.clean_steps, again.trace()) == (
        fp16.scaler.scale_value, fp16.scaler.clean_steps, fp16.trace())
    assert FP32.state_dict() == {} and mixed.policy("bf16").state_dict() == {}


def test_zero_shards_the_master_copy_and_the_loss_scalers_verdict():
    """Lesson 14: hand-written ZeRO with bf16 master weights keeps an fp32 master of its shard only (the
    ZeRO paper's accounting: 2 + 2 bytes a parameter, and K = 12 of Adam's state and master sharded), and
    takes exactly plain data parallelism's updates; with fp16 the ranks, each seeing a shard of the
    gradients, agree on every overflow, so they skip the same updates as plain data parallelism."""
    import distlab
    from distlab.data_parallel import data_parallel as dp
    from distlab.predict import memory
    from distlab.zero import zero

    setup = dict(global_batch_size=32, steps=8, lr=0.01, optimizer="adam", progress="none")
    for precision in ("bf16_master", "fp16"):
        plain = distlab.launch(dp.train, world_size=2, method="by_hand", precision=precision, **setup)
        for stage in (1, 2):
            ranks = distlab.launch(zero.train, world_size=2, stage=stage, precision=precision, **setup)
            assert distlab.max_param_difference(ranks[0].params, plain[0].params) == 0.0, (precision, stage)
            assert ranks[0].loss_scale == ranks[1].loss_scale == plain[0].loss_scale
            if precision == "bf16_master":
                n = sum(p.numel() for p in ranks[0].params.values())
                want = memory.per_rank(n, 2, stage=stage, optimizer="adam", precision="mixed")
                for category in ("params", "grads", "optimizer"):
                    # (the flat buffer is padded to a multiple of 2: within 1%)
                    assert ranks[0].memory[category] == pytest.approx(getattr(want, category), rel=0.01), category
    with pytest.raises(ValueError, match="overlapped stage 2"):
        distlab.launch(zero.train, world_size=2, stage=2, overlap=True, precision="bf16", progress="none")


def test_every_precision_runs_on_the_transformers_axes_like_one_process():
    """Lesson 14 on the five-axis trainer: 4-rank meshes that cover the five axes, data 2 x tensor 2 with
    sequence parallelism, context 2 (the ring) x expert 2 (two experts a block), data 2 x pipeline 2, per
    precision: the copies of the data axis stay identical, fp16's verdict on overflow is every rank's, the
    loss ends where one process's does in the same precision (16-bit sums in another order: within 10%), and
    the pipeline's stages send their activations and gradients in 16 bits: half fp32's bytes."""
    import math

    import distlab
    from distlab.parallelize import trainer

    base = dict(steps=10, global_batch_size=16, lr=3e-3)
    layouts = (dict(data=2, tensor=2, sequence_parallel=True), dict(context=2, expert=2, experts=2, data=1),
               dict(data=2, pipeline=2, micro_batches=2))
    sent = {"fp32": distlab.launch(trainer.train, world_size=4, progress="none", **layouts[2], **base)[0].traffic}
    for layout in layouts:
        for precision in ("bf16", "fp16", "bf16_master"):
            ranks = distlab.launch(trainer.train, world_size=4, precision=precision, progress="none", **layout,
                                   **base)
            one = trainer.train_single(world_size=4, precision=precision, **layout, **base)
            computed = next(r for r in ranks if r.losses and not math.isnan(r.losses[-1]))   # (a last stage)
            assert 0.9 <= tail(computed.losses, 4) / tail(one.losses, 4) <= 1.1, (layout, precision)
            assert all(r.loss_scale == ranks[0].loss_scale for r in ranks)
            assert len(ranks[0].loss_scale) == (10 if precision == "fp16" else 0)
            assert precision in ranks[0].method
            # ranks 0 and 2 hold the same slice, or stage, in the two data replicas
            if layout.get("data") == 2:
                assert distlab.max_param_difference(ranks[0].params, ranks[2].params) == 0.0
            want = torch.bfloat16 if precision == "bf16_master" else torch.float32
            assert all(p.dtype == want for p in ranks[0].params.values())
            if "pipeline" in layout:
                assert ranks[0].traffic["pipeline"] * 2 == sent["fp32"]["pipeline"]


def test_fsdp2s_mixed_precision_keeps_fp32_shards_as_the_master_copy():
    """Lesson 14: FSDP2's MixedPrecisionPolicy gathers each layer in bf16 and computes in it, while the shards
    a rank keeps between steps are fp32 (the master copy): the bytes of fp32 FSDP, 1/N of 4 + 4 + 8 a
    parameter with Adam, as predict's stage 3 says; the loss moves (16-bit products) but stays within 10%."""
    import distlab
    from distlab.predict import memory
    from distlab.zero import fsdp

    setup = dict(global_batch_size=32, steps=20, lr=0.01, optimizer="adam", progress="none")
    runs = {p: distlab.launch(fsdp.train, world_size=2, precision=p, **setup) for p in ("fp32", "bf16")}
    n = sum(p.numel() for p in runs["bf16"][0].params.values())
    want = memory.per_rank(n, 2, stage=3, optimizer="adam", precision="autocast")
    for category in ("params", "grads", "optimizer"):
        assert runs["bf16"][0].memory[category] == pytest.approx(getattr(want, category), rel=0.01), category
    assert runs["bf16"][0].memory == runs["fp32"][0].memory
    assert runs["bf16"][0].config["precision"] == "bf16"
    assert tail(runs["bf16"][0].losses) != tail(runs["fp32"][0].losses)
    assert 0.9 <= tail(runs["bf16"][0].losses) / tail(runs["fp32"][0].losses) <= 1.1
    with pytest.raises(ValueError, match="fsdp.train takes precision 'fp32' or 'bf16'"):
        distlab.launch(fsdp.train, world_size=2, precision="fp16", progress="none")
