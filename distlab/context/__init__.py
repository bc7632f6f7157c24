"""The context axis: each line cut into pieces across ranks, attention reaching the others' keys (lesson 12).

- ``context_parallel``          K and V all-gathered, or passed round a ring with the online-softmax merge (forward
                                and backward by hand), in contiguous or zig-zag pieces; the axis's transform
- ``pytorch_context_parallel``  PyTorch's own ``context_parallel``, run for real: its result, or its exact error
- ``ring_overlap``              lesson 15: the ring's hops serial or hidden behind the compute, timed on real
                                ranks, and predicted (alpha-beta transfer against the block's FLOPs)
"""
