"""The engine every training in distlab runs on, whatever it splits (lessons 01, 06, 07, 08, 10, 12 and 13).

- ``spec``     ``TrainSpec``: one settings object for a run, the run config's four sections (lesson 12)
- ``mesh``     the ranks as a grid with named axes; a group per axis and per purpose (lessons 07 and 12)
- ``loop``     the one training loop and its ``Strategy`` interface (lesson 01)
- ``logbook``  what the loop does besides training: metrics, checkpoints, resuming (lesson 10)
- ``step``     the one micro-step: forward, the model's own loss (plus its layers' extra losses), backward;
               the precision slot; every optimizer (lesson 01)
- ``flops``    the FLOPs of a real step, counted as PyTorch runs it (lesson 05)
- ``memory_held``  the bytes a rank really holds, by category, counted on its tensors (lessons 08 and 14)
- ``recompute``    activation recomputation as one model transform: none, full or selective (lesson 14)
- ``reduce``   the one gradient reducer: each gradient summed over the ranks that hold parts of it (its
               purpose group of the mesh) and divided by the batch's shares; by hand or fused (lessons 01, 12, 13)
- ``overlap``  the same reducer's gradients sent during backward, from hooks: one a tensor, in buckets, or
               reduce-scattered then all-gathered (lesson 15)
"""
