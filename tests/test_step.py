"""Issue 36: the one micro-step.  The model owns its loss (the loop never names one), the losses its layers
add (the experts' balancing losses) are found and added, a pipeline stage's backward adds its own layers'
extra losses as they were in that micro-batch's forward, and every record carries the FLOPs of a step,
counted by PyTorch: for the MLP, exactly the matrix products' count."""
import pytest
import torch

import distlab
from distlab.experts.moe import MoEConfig, add_experts
from distlab.models import build_model
from distlab.data_parallel import data_parallel as dp
from distlab.sequence.transformer import TransformerConfig, build_transformer, line_loss
from distlab.train import step as S

pytestmark = pytest.mark.usefixtures("warm_ranks")


def test_the_micro_step_asks_the_model_for_its_loss_and_adds_the_extra_losses():
    torch.manual_seed(0)
    model = add_experts(build_transformer(TransformerConfig(d_model=16, heads=2, layers=2, max_digits=2)),
                        MoEConfig(experts=4, top_k=1, aux_weight=0.5), seed=0)
    x, y = torch.randn(4, 32, 4), torch.cat([torch.randint(10, (4, 2)), torch.randint(2, (4, 1))], 1)
    loss, accuracy = S.micro_step(model, x, y, share=2)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    out = model(x)
    want = (line_loss(*out, y)[0] + sum(b.mlp.extra_loss for b in model.blocks)) / 2
    want.backward()
    assert loss == pytest.approx(line_loss(*out, y)[0].item()) and accuracy == line_loss(*out, y)[1]
    for n, p in model.named_parameters():
        assert torch.allclose(grads[n], p.grad, atol=1e-7), n
    router = model.blocks[0].mlp.router.weight
    model.zero_grad()
    S.forward_loss(model, x, y)[0].backward()
    with_extra = router.grad.clone()
    for block in model.blocks:
        block.mlp.cfg = MoEConfig(experts=4, top_k=1, aux_weight=0.0)
    model.zero_grad()
    S.forward_loss(model, x, y)[0].backward()
    assert not torch.allclose(with_extra, router.grad)           # the balancing loss reached the router


def test_a_stage_backward_adds_the_extra_losses_of_its_own_forward():
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 3)
    layer.extra_loss = None
    x = torch.randn(2, 3)
    out = layer(x)
    extra = layer.weight.square().sum()            # what its forward added, taken then
    S.stage_backward(out, torch.ones_like(out), extra, share=4)
    want = x.sum(0).expand(3, 3) + layer.weight.detach() * 2 / 4
    assert torch.allclose(layer.weight.grad, want)
    assert S.extra_losses(torch.nn.Linear(2, 2)) == 0.0      # a model without any adds nothing


def test_every_optimizer_is_made_in_one_place_and_a_wrong_name_is_refused():
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(S.make_optimizer("momentum", params, 0.1), torch.optim.SGD)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        S.make_optimizer("lion", params, 0.1)


def mlp_flops(width: int, depth: int, batch: int, side: int = 8) -> int:
    """Forward 2 x multiply-adds of every layer; backward the weights' gradients (as many) and the inputs'
    gradients of every layer but the first (the images need none)."""
    sizes = [side * side] + [width] * depth + [10]
    products = [a * b for a, b in zip(sizes, sizes[1:])]
    return 2 * batch * (2 * sum(products) + sum(products[1:]))


def test_each_steps_record_holds_its_flops_counted_by_pytorch():
    records = distlab.launch(dp.train, world_size=2, method="by_hand", width=32, depth=2, global_batch_size=32,
                             steps=3, record_grads_at=(), progress="none")
    want = mlp_flops(32, 2, 16)
    for r in records:
        assert r.flops_per_step == want and all(s.flops == want for s in r.steps)
    single = dp.train_single(width=32, depth=2, global_batch_size=32, steps=2, record_grads_at=())
    assert single.flops_per_step == mlp_flops(32, 2, 32)
    assert build_model("mlp", 32).loss(torch.zeros(1, 10), torch.zeros(1, dtype=torch.long))[1] == 1.0
