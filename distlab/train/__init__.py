"""The engine every training in distlab runs on, whatever it splits (lessons 01, 06, 08, 12 and 13).

- ``spec``     ``TrainSpec``: one settings object for a run, the run config's four sections (lesson 12)
- ``step``     the one micro-step: forward, the model's own loss (plus its layers' extra losses), backward;
               the precision slot; every optimizer (lesson 01)
- ``flops``    the FLOPs of a real step, counted as PyTorch runs it (lesson 05)
- ``reduce``   the one gradient reducer: each gradient summed over the ranks that hold partial sums of it
               (its purpose group of the mesh) and divided by the batch's shares; by hand, fused, or bucketed
               (lessons 01, 12, 13)
"""
