"""What the ranks do: one training loop, and the strategies that plug into it.

- ``loop``           the one training loop and the ``Strategy`` interface (lesson 01)
- ``gradient_sync``  making gradients agree: per parameter, fused, DDP / Horovod (lessons 01-03)
- ``data_parallel``  ``train`` on N ranks, and ``train_single``, the one-process reference (lesson 01)
- ``local_sgd``      gradient accumulation and local SGD: talking every k steps (lesson 04)
- ``async_sgd``      asynchronous SGD with a parameter server, and staleness (lesson 04)
- ``stages``         cutting the model into balanced stages, one per rank (lesson 06)
- ``schedules``      pipeline schedules as data (GPipe, 1F1B, interleaved) and their bubble (lesson 06)
- ``pipeline``       the schedules run on real ranks, every pass and message recorded (lesson 06)
- ``torch_pipeline`` the same cut through ``torch.distributed.pipelining`` (lesson 06)
- ``tensor_parallel`` one block's matrices split across ranks, by hand and with ``parallelize_module`` (lesson 07)
- ``mesh``           the ranks as a data x pipeline x tensor grid, its groups, two 2 x 2 meshes (lesson 07)
"""
