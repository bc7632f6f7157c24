"""Widgets: the pictures of lessons 00 to 15, each drawn only from records of real runs.

``display`` (lesson 01) holds what every picture shares: the palette, the sizes, figure to
PNG, and ``LiveFigure`` (controls above a picture).  Then one module per lesson's pictures:
``data_parallel`` (00, 01), ``backends`` (02), ``collectives`` and ``costs`` (03),
``timeline`` (04), ``speedup`` and ``more_data`` (05), ``pipeline`` (06), ``mesh`` (07), ``memory`` (08),
``launches`` (09: one run launched three ways),
``monitor`` (10: a running job's loss curves and each rank's progress, read from the metrics
files its ranks write), ``horovod`` (10: Horovod's own timeline, drawn from its trace),
``course`` (11: the learner's own measurements across the course), ``long_lines`` (12: the ring of
K/V blocks, the causal mask by rank, activations against the line's length, what each rank holds) and
``experts`` (13: the load on each expert with its dropped requests, the all-to-all's rank-to-rank
matrix, the router's choice for each patch, one MoE layer's forward on every rank) and ``fitting`` (14:
bytes per precision policy, gradient exponents against fp16's range, the loss scale, and the memory
calculator with precision, recomputation and offload); ``traces`` (15: one traced step, each rank's
compute and communication as the profiler saw them) and ``time_levers`` (15: the roofline with each run on it,
the buckets of gradients against backward, the exposed communication of each way).
The memory calculator draws the memory model (``predict.memory``), itself no record
but a formula.  Widgets read records and never train: a "measure" button calls a function the
lesson hands it, and the monitor and the timeline only read files.
"""
