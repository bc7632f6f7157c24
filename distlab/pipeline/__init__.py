"""The pipeline axis: the model cut into stages, one a rank, micro-batches flowing through (lessons 06-07, 15).

- ``stages``          cutting any model's run of pieces into balanced stages (the cut itself: ``predict.stage_cut``)
- ``schedules``       GPipe, 1F1B, interleaved and (lesson 15) ZB-H1 schedules as plain data, and their timelines
- ``pipeline_stage``  what one rank runs: its passes (the halves of the one micro-step) and messages, recorded
- ``pipeline``        the schedules run on real ranks; ``stage_of`` cuts lesson 12's transformer too
- ``torch_pipeline``  the same cut through ``torch.distributed.pipelining``, its zero-bubble schedules too
- ``zero_bubble``     lesson 15: where the time goes: the bubble measured, and predicted with the message cost
"""
