"""What the ranks do: one training loop, and the strategies that plug into it.

- ``loop``           the one training loop and the ``Strategy`` interface (lesson 01)
- ``gradient_sync``  making gradients agree: per parameter, fused, DDP / Horovod (lessons 01-03)
- ``data_parallel``  ``train`` on N ranks, and ``train_single``, the one-process reference (lesson 01)
- ``local_sgd``      gradient accumulation and local SGD: talking every k steps (lesson 04)
- ``async_sgd``      asynchronous SGD with a parameter server, and staleness (lesson 04)
- ``stages``         cutting the model into balanced stages, one per rank (lesson 06)
- ``schedules``      pipeline schedules as data (GPipe, 1F1B, interleaved) and their bubble (lesson 06)
- ``pipeline``       the schedules run on real ranks (lesson 06); ``pipeline_stage`` one rank's passes and
                     messages, every one recorded
- ``torch_pipeline`` the same cut through ``torch.distributed.pipelining`` (lesson 06)
- ``tensor_parallel`` one block's matrices split across ranks, by hand and with ``parallelize_module`` (lesson 07)
- ``named_mesh``     one mesh with named axes (data, pipeline, tensor, context, expert): every group (lesson 07)
- ``mesh``           strategies composed over that mesh: data x pipeline x tensor, and its pictures (lesson 07)
- ``zero``           ZeRO stages 1 and 2 by hand: each rank keeps its shard of the optimizer state (lesson 08)
- ``fsdp``           ZeRO-3 with PyTorch's FSDP2 (``fully_shard``) (lesson 08)
- ``deepspeed_zero`` ZeRO 1-3 with DeepSpeed itself; ``deepspeed_state`` its checkpoints, ``deepspeed_setup``
                     its accelerator and compiled op (lesson 08)
- ``horovod_elastic`` Horovod's elastic mode: the survivors carry on without a restart (lesson 10)
- ``logbook``        what the loop does besides training: metrics, checkpoints, resuming (lesson 10)
- ``registry``       every strategy a run config can name, in one table (lesson 09)
"""
