"""The data axis: every rank a full copy of the model, each training on its own share of the batch.

- ``data_parallel``   ``train`` on N ranks, and ``train_single``, the one-process reference (lesson 01)
- ``gradient_sync``   making the gradients agree: by hand, fused (the one reducer's ways, ``train.reduce``),
                      or the backend's own, DDP / ``hvd.DistributedOptimizer`` (lessons 01-03)
- ``local_sgd``       gradient accumulation and local SGD: talking every k steps (lesson 04)
- ``async_sgd``       asynchronous SGD with a parameter server, and staleness (lesson 04)
- ``horovod_elastic`` Horovod's elastic mode: the survivors carry on without a restart (lesson 10)
"""
