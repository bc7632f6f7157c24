"""Lines of handwriting as sequences of tokens, and the transformer that reads them (lesson 12).

- ``lines``        lines of handwritten digits with a check digit, made on each rank from the real digits
- ``transformer``  the small transformer that reads them (pre-norm blocks, attention written out)
- ``memory``       the activations a rank keeps for backward, counted with PyTorch's saved-tensor hooks
(split by heads: ``tensor.heads_split``; by the line: ``context.context_parallel``; trained on one process or
split five ways: ``parallelize.trainer``)
"""
