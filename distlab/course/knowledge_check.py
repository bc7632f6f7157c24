"""The knowledge check of lesson 11: questions from the whole course, checked against the learner's own runs.

Each checker works as ``exercises.check`` does (a placeholder is "not answered yet", a wrong
answer is told why).  Where a question is about something the learner measured, the expected
answer comes from what that lesson stored (``course_results``), so two learners may have
different right answers; when the lesson has not been run, the checker says which one to run.
"""
from __future__ import annotations

from .checking import check, check_each


def _measured(results: dict | None, lesson: str, exercise: str) -> bool:
    if results is None:
        print(f"{exercise}: this question is about your own run of lesson {lesson}: run that lesson first.")
        return False
    return True


PARALLELISMS = {"data parallelism": "data", "data parallel": "data", "model parallelism": "model",
                "pipeline": "model", "pipeline parallelism": "model", "tensor": "model", "tensor parallelism": "model",
                "zero sharding": "zero", "sharding": "zero", "fsdp": "zero", "zero 3": "zero", "zero 1": "zero"}


def which_parallelism(answers) -> bool | None:
    """Lesson 11 (lessons 01, 06, 08): which way of dividing the work each situation calls for."""
    expected = {"the data takes too long on one worker": "data",
                "the model does not fit in one worker's memory": ("model", "zero"),    # ZeRO-3 shards it too
                "the optimizer's state does not fit, the model does": "zero"}
    return check_each("which parallelism", answers, expected, synonyms=PARALLELISMS, hints={
        "the data takes too long on one worker": "copies of the model, each on a part of the data (lesson 01)",
        "the model does not fit in one worker's memory": "cut the model itself into parts (lessons 06, 07)",
        "the optimizer's state does not fit, the model does": "shard what every rank copies (lesson 08)"})


def same_as_one_big_batch(answer, results: dict | None) -> bool | None:
    """Lesson 11 (lesson 01): do N ranks with averaged gradients train like one process at N times the batch?"""
    if answer is not ... and not _measured(results, "01", "same as one big batch"):
        return None
    gap = results["max_param_difference"] if results else 0.0
    return check("same as one big batch", answer, gap <= 1e-5, hints={
        False: f"your lesson 01 run: {results['world_size'] if results else 'N'} ranks ended {gap:.1e} from "
               "one process: the mean of the ranks' gradients is the big batch's gradient."})


def busiest_link(answer) -> bool | None:
    """Lesson 11 (lesson 03): whose busiest link carries more per step as N grows."""
    return check("busiest link", answer, "parameter server", synonyms={
        "server": "parameter server", "ps": "parameter server", "the parameter server": "parameter server",
        "ring all reduce": "ring", "ring allreduce": "ring", "a ring rank": "ring"}, hints={
        "ring": "each ring rank sends 2(N-1)/N of the gradient, under twice it, whatever N; "
                "the server receives N-1 whole gradients."},
        otherwise="answer 'parameter server' or 'ring'.")


def straggler_wait(answer, results: dict | None) -> bool | None:
    """Lesson 11 (lesson 04): how much longer the fast rank waited per step, in seconds (your run)."""
    if answer is not ... and not _measured(results, "04", "straggler wait"):
        return None
    measured = results["extra_wait_of_rank_0"] if results else 0.0
    return check("straggler wait", answer, measured, tolerance=0.3, hints={
        0: "a synchronous step ends when the slowest rank has sent its gradient: the others wait."},
        otherwise=f"your lesson 04 run measured {measured * 1e3:.0f} ms for a straggler "
                  f"{results['straggler_seconds'] * 1e3:.0f} ms slower (answer in seconds)." if results else "")


def best_regime(answer, results: dict | None) -> bool | None:
    """Lesson 11 (lesson 05): which of lesson 05's regimes had the highest median speed-up, in your run.

    A plain reading of your table (the median names a leader; whether any regime clearly gained is
    the rule's, in lesson 11's answer); the regime's name in any case."""
    if answer is not ... and not _measured(results, "05", "best regime"):
        return None
    speedups = results["speedup_2_ranks"] if results else {"?": 0}
    best = max(speedups, key=speedups.get)
    runs = (results or {}).get("speedup_2_ranks_runs", {})
    return check("best regime", answer, best,
                 otherwise="your lesson 05 run measured these medians: " + ", ".join(
                     f"{k} {v:.2f}" + (f" (repeats {min(runs[k]):.2f} to {max(runs[k]):.2f})" if k in runs else "")
                     for k, v in speedups.items()))


def zero3_saving(answer, results: dict | None) -> bool | None:
    """Lesson 11 (lesson 08): how many times less rank 0 held at ZeRO stage 3 than at stage 0, in your run."""
    if answer is not ... and not _measured(results, "08", "ZeRO-3 saving"):
        return None
    held = results["bytes_held_by_rank_0"] if results else {"0": 1, "3": 1}
    ratio = held["0"] / held["3"]
    return check("ZeRO-3 saving", answer, ratio, tolerance=0.05, hints={
        1: "stage 3 shards the parameters, the gradients and the optimizer's state: all of it."},
        otherwise=f"divide the bytes held at stage 0 by those at stage 3 ({held['0']} / {held['3']}): "
                  "close to the number of ranks, a little less (shards are padded).")


def failure_cost(answer, results: dict | None) -> bool | None:
    """Lesson 11 (lesson 10): how many steps your killed worker cost the job."""
    if answer is not ... and not _measured(results, "10", "failure cost"):
        return None
    redone = results["steps_redone"] if results else 0
    return check("failure cost", answer, redone, hints={
        0: "the job went back to its last checkpoint: the steps after it were trained again.",
        redone + 1: "one too many: the steps done when the rank died minus the checkpoint's step (both count "
                    "steps done) are the steps trained twice."},
        otherwise="the steps between the last checkpoint and the kill (lesson 10, exercise 2).")


IMAGE = "myregistry.azurecr.io/distlab:0.1"      # the image lesson 11's question gives


def azure_ml_command(answer) -> bool | None:
    """Lesson 11 (lesson 09): a command that writes an Azure ML job for ``run.yaml``, a config like lesson 09's
    that names no image yet (lesson 11 gives one to use).  Run for real by ``commands.distlab_job``: every
    spelling distlab accepts is right; without ``launch.image`` distlab refuses, and the checker shows why."""
    import yaml

    from ..cluster.config import RunConfig
    from .commands import distlab_job

    config = yaml.safe_dump(RunConfig().model_dump(mode="json"), sort_keys=False)
    return distlab_job(answer, config, target="azureml", config_file="run.yaml", image=IMAGE)


def horovod_fusion(answer, tensors: int = 6) -> bool | None:
    """Lesson 11 (lesson 02): how many all-reduces Horovod runs for ``tensors`` gradients that are
    all ready within one cycle and fit in the fusion buffer together."""
    return check("Horovod tensor fusion", answer, 1, hints={
        tensors: "that is one per tensor, as by hand; tensor fusion packs the tensors ready in one cycle "
                 "into one buffer and all-reduces it once."},
        otherwise="tensors that are ready in the same cycle and fit in the fusion buffer travel together.")


def pipeline_schedule(answer, stages: int = 4, micro_batches: int = 8) -> bool | None:
    """Lesson 11 (lesson 06): what 1F1B shrinks against GPipe, "bubble" or "memory".

    The answer is read from lesson 06's own schedules, simulated: the idle share of each, and the
    micro-batches whose activations stage 0 holds at once."""
    from ..pipeline import schedules

    runs = {name: schedules.schedule(name, stages, micro_batches) for name in ("gpipe", "1f1b")}
    idle = {name: schedules.bubble(schedules.simulate(ops)) for name, ops in runs.items()}
    held = {name: schedules.held_activations(ops[0]) for name, ops in runs.items()}
    expected = [what for what, shrinks in (("bubble", idle["1f1b"] < idle["gpipe"] - 1e-9),
                                           ("memory", held["1f1b"] < held["gpipe"])) if shrinks]
    return check("1F1B against GPipe", answer, " and ".join(expected), synonyms={
        "activation memory": "memory", "activations": "memory", "the memory": "memory",
        "the bubble": "bubble", "idle bubble": "bubble"}, hints={
        "bubble": f"both idle (p-1)/(m+p-1) of the time ({idle['gpipe']:.2f} and {idle['1f1b']:.2f} at p = {stages}, "
                  f"m = {micro_batches}): 1F1B starts each backward early, so stage 0 holds {held['1f1b']} "
                  f"micro-batches' activations instead of {held['gpipe']}."},
        otherwise="answer 'bubble' or 'memory'.")


def long_line_split(answers) -> bool | None:
    """Lesson 11 (lesson 12): for each trouble with long lines, which split answers it: "tensor", "sequence"
    or "context" parallelism."""
    expected = {"one block's weights and heads are too much work for one rank": "tensor",
                "every tensor rank keeps the same LayerNorm activations of the whole line": "sequence",
                "the attention of one line no longer fits in one rank's memory": "context"}
    return check_each("splitting long lines", answers, expected, hints={
        "one block's weights and heads are too much work for one rank": "split each block's heads and MLP units "
                                                                         "across ranks (lesson 12, section 2)",
        "every tensor rank keeps the same LayerNorm activations of the whole line": "cut the line across the "
        "tensor ranks between the split regions (lesson 12, section 3)",
        "the attention of one line no longer fits in one rank's memory": "give each rank a piece of the line "
                                                                         "and pass K and V round (section 4)"})


def expert_troubles(answers) -> bool | None:
    """Lesson 11 (lesson 13): for each trouble with a mixture of experts, what answers it: a "capacity",
    the "balancing loss" or "expert parallelism"."""
    expected = {"the router sends most tokens to the same few experts": "balancing loss",
                "each expert's buffer needs a size known before the tokens are routed": "capacity",
                "the experts together hold more parameters than one rank can keep": "expert parallelism"}
    return check_each("troubles with experts", answers, expected, hints={
        "the router sends most tokens to the same few experts": "a capacity only drops the requests past it; a "
        "loss that is smallest when the experts share the tokens evenly pushes the router to spread them "
        "(Switch Transformer, eq. 4; lesson 13, section 4 tests it)",
        "each expert's buffer needs a size known before the tokens are routed": "cap each expert's requests at "
        "factor x tokens x k / experts, rounded up, drop the rest and pad to it, as GShard and Switch do "
        "(lesson 13, section 2; the course's ranks exchange counts instead)",
        "the experts together hold more parameters than one rank can keep": "keep each expert on one rank and "
        "send every token to its experts' ranks with all-to-all (lesson 13, section 3)"})


def memory_levers(answers) -> bool | None:
    """Lesson 11 (lesson 14): for each trouble of a rank short of memory or of precision, the lever that
    answers it: "loss scaling", "selective recomputation", "full recomputation", "offload" or "bf16 master
    weights" (one of them answers none)."""
    expected = {"in fp16 the smallest gradients become zero": "loss scaling",
                "the attention probabilities of long lines fill the accelerator's memory": "selective recomputation",
                "every block's activations, not only attention's, fill the accelerator's memory": "full recomputation",
                "Adam's moments and the fp32 master copy do not fit, and the host has memory to spare": "offload"}
    synonyms = {"dynamic loss scaling": "loss scaling", "a loss scaler": "loss scaling",
                "selective": "selective recomputation", "selective activation recomputation": "selective recomputation",
                "full": "full recomputation", "activation checkpointing": "full recomputation",
                "offloading": "offload", "zero-offload": "offload", "cpu offload": "offload"}
    return check_each("levers for fitting more", answers, expected, synonyms=synonyms, hints={
        "in fp16 the smallest gradients become zero": "multiply the loss by a scale before backward: every "
        "gradient grows by the same factor, into fp16's range, and is divided back before the update (lesson 14, "
        "section 4)",
        "the attention probabilities of long lines fill the accelerator's memory": "keep Q, K and V and compute "
        "attention's core (scores, softmax, their product with V) again in the backward pass: the a b s^2 bytes "
        "for a part of one block's arithmetic (lesson 14, section 6)",
        "every block's activations, not only attention's, fill the accelerator's memory": "keep each block's "
        "input only and run the whole block's forward again in the backward pass (lesson 14, section 6)",
        "Adam's moments and the fp32 master copy do not fit, and the host has memory to spare": "keep them in the "
        "host's memory and run the update there, as ZeRO-Offload does (lesson 14, section 7); bf16 master weights "
        "add the master copy rather than remove it"})


def time_levers(answers) -> bool | None:
    """Lesson 11 (lesson 15): for each place a step loses time, the lever that wins it back: "buckets", "zero
    bubble", "post the hop first", "no_sync" or "one bucket as large as the model" (one of them answers none)."""
    expected = {"the gradients' all-reduce starts only once backward has ended": "buckets",
                "a pipeline's stages idle in the cool-down of every step": "zero bubble",
                "each ring-attention hop is waited for in full before its block is used": "post the hop first",
                "gradient accumulation all-reduces every gradient after each micro-batch": "no_sync"}
    synonyms = {"bucketing": "buckets", "gradient buckets": "buckets", "ddp buckets": "buckets",
                "zb h1": "zero bubble", "zero bubble pipeline": "zero bubble",
                "overlapped ring": "post the hop first", "overlap the hops": "post the hop first",
                "no sync": "no_sync", "no sync()": "no_sync", "send once": "no_sync"}
    return check_each("levers for time", answers, expected, synonyms=synonyms, hints={
        "the gradients' all-reduce starts only once backward has ended": "launch each bucket from a hook as soon "
        "as its gradients are written, so it travels while backward computes the rest (lesson 15, section 3); "
        "one bucket as large as the model can only leave at the end",
        "a pipeline's stages idle in the cool-down of every step": "split backward into B and W and run deferred "
        "W passes where 1F1B idles: ZB-H1 (lesson 15, section 7)",
        "each ring-attention hop is waited for in full before its block is used": "post the next hop's exchange, "
        "compute with the block held, then wait (lesson 15, section 5)",
        "gradient accumulation all-reduces every gradient after each micro-batch": "arm the hooks only for the "
        "last micro-batch, as DDP's no_sync does (lesson 15, section 4)"})


def tensor_parallel_traffic(answer, width: int = 512) -> bool | None:
    """Lesson 11 (lesson 07): as the batch grows, whose bytes per step grow: "tensor" or "data" parallelism's?"""
    from ..predict import traffic

    grows = {"tensor": sum(traffic.tensor_parallel_bytes(512, width).values())
             > sum(traffic.tensor_parallel_bytes(64, width).values()),
             "data": False}                       # gradient_bytes("mlp", width) takes no batch at all
    expected = next(k for k, v in grows.items() if v)
    return check("traffic that grows with the batch", answer, expected, hints={
        "data": "data parallelism all-reduces the gradient: one number per parameter, whatever the batch; "
                "tensor parallelism all-reduces activations, batch x width numbers each."},
        otherwise="answer 'tensor' or 'data'.")


def zero2_bytes_per_parameter(answer, world_size: int = 8) -> bool | None:
    """Lesson 11 (lesson 08): bytes per parameter one of ``world_size`` ranks holds at ZeRO-2
    (Adam, mixed precision: the ZeRO paper's 16 bytes per parameter at stage 0)."""
    from ..predict import memory

    def held(stage):
        return memory.per_rank(1, world_size, stage=stage, optimizer="adam", precision="mixed").total

    return check("ZeRO-2 bytes per parameter", answer, held(2), tolerance=0.01, hints={
        held(0): "that is stage 0: every rank a full copy of everything.",
        held(1): "that is stage 1: stage 2 shards the gradients too.",
        held(3): "that is stage 3: stage 2 keeps the full fp16 parameters on every rank."},
        otherwise=f"2 bytes of fp16 parameters stay whole; gradients (2) and optimizer state (12) are divided "
                  f"by {world_size}.")


def per_rank_batch_from_config(answer, nodes: int = 2, processes_per_node: int = 4,
                               global_batch_size: int = 96) -> bool | None:
    """Lesson 11 (lesson 09): samples per rank and step for a config's launch and training sections."""
    from ..data_parallel.data_parallel import per_rank_batch

    world = nodes * processes_per_node
    expected = per_rank_batch(world, None, global_batch_size)
    return check("batch per rank from the config", answer, expected, hints={
        global_batch_size // processes_per_node: "that divides by one node's processes; every rank of every "
                                                 "node shares the global batch.",
        global_batch_size: "training.global_batch_size is the batch of all ranks together."},
        otherwise=f"world size = launch.nodes x launch.processes_per_node = {world}; divide the global batch.")


def job_hours_between_failures(answer, machines: int = 512, years_between_failures: float = 3) -> bool | None:
    """Lesson 11 (lesson 10): the mean hours between failures of a job on ``machines`` machines,
    each failing once in ``years_between_failures`` years on average (failures at random)."""
    one = years_between_failures * 365 * 24
    return check("hours between the job's failures", answer, one / machines, tolerance=0.01, hints={
        one: "that is one machine's; the job stops when any of its machines fails.",
        one * machines: "more machines fail more often, not less: divide."},
        otherwise="with failures at random, the rates add up: one machine's hours divided by the machines.")
