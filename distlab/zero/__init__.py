"""Sharding what the data replicas would each copy: ZeRO (lesson 08).

- ``zero``             ZeRO stages 0-2 by hand: each rank keeps its shard of the optimizer state (and gradients)
- ``fsdp``             ZeRO-3 with PyTorch's FSDP2 (``fully_shard``)
- ``deepspeed_zero``   ZeRO 0-3 with DeepSpeed itself; ``deepspeed_state`` its checkpoints, ``deepspeed_setup``
                       its accelerator and compiled op

(The bytes a rank really holds are counted by ``train.memory_held``: lesson 14's precisions count with it too.)
"""
