"""Issue 37: lessons 06-10's build-it exercises.  The learner's function, as a notebook cell defines it,
is run on real ranks (or, where the mechanism is data, in the real pipeline or launcher) and compared
with one process or the library; a correct answer passes and each planted mistake is caught and named.
"""
import pytest
from test_build import from_cell, solution_cell

from distlab.course import exercises_cluster, exercises_pipeline, exercises_tensor, exercises_zero

pytestmark = pytest.mark.usefixtures("warm_ranks")      # one start-up per world size, shared by the checks

ONE_F_ONE_B = '''
def my_one_f_one_b(stages, micro_batches, stage):
    warmup = min(stages - 1 - stage, micro_batches)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro_batches - warmup, micro_batches)]
'''


def said(capsys) -> str:
    return capsys.readouterr().out


def test_lesson_06_a_correct_1f1b_order_runs_on_real_ranks_and_passes(capsys):
    assert exercises_pipeline.one_f_one_b_order(from_cell(ONE_F_ONE_B, "my_one_f_one_b")) is True
    out = said(capsys)
    assert "correct. On 2 real ranks with 4 micro-batches" in out and "held at most 2 and 1" in out, out


@pytest.mark.parametrize("mistake,named", [
    # GPipe's order: every forward first
    (ONE_F_ONE_B.replace("warmup = min(stages - 1 - stage, micro_batches)", "warmup = micro_batches"),
     "stage 0's pass number 2 is F2 where 1F1B runs B0"),
    # a warm-up of one forward on every stage but the last: right for 2 stages, wrong for 3
    (ONE_F_ONE_B.replace("min(stages - 1 - stage, micro_batches)", "1 if stage < stages - 1 else 0"),
     "with 3 stages and 6 micro-batches, stage 0's pass number 2 is B0 where 1F1B runs F2"),
    # no warm-up at all: a valid order, but stage 1 idles while stage 0 waits for each gradient
    (ONE_F_ONE_B.replace("min(stages - 1 - stage, micro_batches)", "0"),
     "stage 0's pass number 1 is B0 where 1F1B runs F1"),
    # backward before forward in the steady state: the last stage waits for its own forward
    (ONE_F_ONE_B.replace('[("F", warmup + i), ("B", i)]', '[("B", i), ("F", warmup + i)]'), "deadlock"),
    # the last backward forgotten
    (ONE_F_ONE_B.replace("range(micro_batches - warmup, micro_batches)", "range(micro_batches - warmup, "
                                                                          "micro_batches - 1)"),
     "missing B3"),
])
def test_lesson_06_planted_mistakes_in_the_order_are_named(capsys, mistake, named):
    assert exercises_pipeline.one_f_one_b_order(from_cell(mistake, "my_one_f_one_b")) is False
    out = said(capsys)
    assert named in out, out


def test_lesson_06_the_placeholder_starts_nothing(capsys):
    cell = 'def my_one_f_one_b(stages, micro_batches, stage):\n    """The passes."""\n    ...\n'
    assert exercises_pipeline.one_f_one_b_order(from_cell(cell, "my_one_f_one_b")) is None
    assert "not answered yet" in said(capsys)


SPLIT = solution_cell("07_tensor_and_3d_parallelism", "my_split")    # the stored solution


def test_lesson_07_correct_split_layers_train_to_one_process_on_real_ranks(capsys):
    assert exercises_tensor.split_layers(from_cell(SPLIT, "my_split")) is True
    assert "correct. On 2 real ranks your layers trained" in said(capsys)


@pytest.mark.parametrize("mistake,named", [
    # the bias inside the all-reduce: added on both ranks
    (SPLIT.replace("G.apply(torch.nn.functional.linear(x, self.weight)) + self.bias",
                   "G.apply(torch.nn.functional.linear(x, self.weight, self.bias))"),
     "The output layer moved differently too: the block's output is wrong"),
    # g's backward all-reduced as well: the block's gradients doubled
    (SPLIT.replace("        def backward(ctx, grad):\n            return grad\n",
                   "        def backward(ctx, grad):\n            grad = grad.clone()\n"
                   "            dist.all_reduce(grad)\n            return grad\n"),
     "part at fc1.weight"),
    # f forgotten: fc1 gets only this rank's share of its gradient
    (SPLIT.replace("F.apply(x)", "x"), "Also apart at that step: fc1.bias. The output layer agrees"),
    # fc3 cut by rows instead of columns
    (SPLIT.replace("linear.weight.detach()[:, rank * cols:(rank + 1) * cols]",
                   "linear.weight.detach()[rank * cols:(rank + 1) * cols]"),
     "mat1 and mat2 shapes cannot be multiplied"),
])
def test_lesson_07_planted_mistakes_in_the_split_are_named(capsys, mistake, named):
    assert exercises_tensor.split_layers(from_cell(mistake, "my_split")) is False
    out = said(capsys)
    assert named in out, out


def test_lesson_07_the_placeholder_starts_nothing(capsys):
    cell = 'def my_split(worker, fc2, fc3):\n    """Yours."""\n    ...\n'
    assert exercises_tensor.split_layers(from_cell(cell, "my_split")) is None
    assert "not answered yet" in said(capsys)


ZERO1 = '''
def my_zero1_update(worker, flat, flat_grad, shard, optimizer):
    mine = worker.reduce_scatter(flat_grad)          # my slice of everyone's gradients, summed
    shard.grad = mine / worker.world_size            # the mean, as data parallelism takes
    optimizer.step()                                 # only my shard moves; only its state is kept
    flat.copy_(torch.cat(worker.all_gather(shard)))  # everyone's new shards, to every rank
'''


def test_lesson_08_a_correct_zero1_update_makes_one_process_update_on_real_ranks(capsys):
    assert exercises_zero.zero1_update(from_cell(ZERO1, "my_zero1_update")) is True
    assert "correct. On 2 real ranks, each updating only its shard" in said(capsys)


@pytest.mark.parametrize("mistake,named", [
    (ZERO1.replace("mine / worker.world_size", "mine"), "the whole update is 2x one process's: a sum"),
    (ZERO1.replace("    flat.copy_(torch.cat(worker.all_gather(shard)))", "    pass"),
     "did not move at all: the shards of the other ranks never reached it (the all-gather)"),
    (ZERO1.replace("mine = worker.reduce_scatter(flat_grad)",
                   "mine = flat_grad[worker.rank * shard.numel():(worker.rank + 1) * shard.numel()] * 2"),
     "rank 0's update and one process's part at fc1.weight"),
])
def test_lesson_08_planted_mistakes_in_the_zero1_update_are_named(capsys, mistake, named):
    assert exercises_zero.zero1_update(from_cell(mistake, "my_zero1_update")) is False
    out = said(capsys)
    assert named in out, out


RANK_ENV = '''
def my_rank_environment(nodes, processes_per_node, node, local_rank):
    return {"RANK": node * processes_per_node + local_rank, "LOCAL_RANK": local_rank,
            "WORLD_SIZE": nodes * processes_per_node, "LOCAL_WORLD_SIZE": processes_per_node,
            "GROUP_RANK": node}
'''


@pytest.mark.parametrize("answer,named", [
    (RANK_ENV, "correct. Your environment equals what torchrun gave each of the 6 processes of 2 nodes x 3"),
    # ranks numbered local rank first: the nodes interleaved
    (RANK_ENV.replace("node * processes_per_node + local_rank", "local_rank * nodes + node"),
     "Node 0's local rank 1: torchrun gave RANK=1, yours says 2"),
    # the world of one node
    (RANK_ENV.replace('"WORLD_SIZE": nodes * processes_per_node', '"WORLD_SIZE": processes_per_node'),
     "torchrun gave WORLD_SIZE=6, yours says 3"),
])
def test_lesson_09_the_rank_environment_is_checked_against_real_torchrun_agents(capsys, answer, named):
    """One real 2 x 3 job (cached), every answer compared with what its processes received."""
    assert exercises_cluster.rank_environment(from_cell(answer, "my_rank_environment")) is ("correct" in named)
    out = said(capsys)
    assert named in out, out
