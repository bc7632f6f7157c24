"""The tensor axis: each layer's matrices split across ranks (lessons 07 and 12).

- ``tensor_parallel``    Megatron's f and g by hand, the MLP's block split column- then row-wise, and the same
                         with ``parallelize_module`` (lesson 07); ``Traffic``, the bytes the split collectives carry
- ``heads_split``        a transformer block split: attention by heads, the MLP by hidden units, by hand and with
                         ``parallelize_module``; the tensor axis's transform of the one model (lesson 12)
- ``sequence_parallel``  the all-reduce cut into an all-gather and a reduce-scatter, the line in pieces between the
                         split regions (Korthikanti et al. 2022), and which tokens a rank holds (``LinePiece``)
"""
