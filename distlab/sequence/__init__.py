"""Sequences across ranks (lesson 12, long lines: splitting the heads and the sequence).

- ``lines``        lines of handwritten digits with a check digit, made on each rank from the real digits
- ``transformer``  the small transformer that reads them (pre-norm blocks, attention written out)
- ``tensor_parallel``  its blocks split across ranks by hand: attention by heads, the MLP by hidden units
- ``sequence_parallel``  tensor parallelism's all-reduce cut into a reduce-scatter and an all-gather, the
  line between the split regions in pieces (Korthikanti et al. 2022)
- ``context_parallel``  the line split along the sequence: K/V all-gathered, or passed round a ring
  (online softmax, forward and backward by hand), in contiguous or zig-zag pieces
- ``pytorch_context_parallel``  PyTorch's own context_parallel, run for real: its result, or its exact error
- ``memory``       the activations a rank keeps for backward, counted with PyTorch's saved-tensor hooks
  (training it, on one process or split five ways: ``parallelize.trainer``)
"""
