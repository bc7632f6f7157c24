"""Fitting more (lesson 14, being built: issue 38): the memory levers, each one module plugged into the
one micro-step.

``mixed``: bf16 and fp16 compute with fp32 master weights (autocast, or the parameters themselves stored
in bf16 beside an fp32 master copy), and the dynamic loss scaler fp16 needs.
``fp8``: 8-bit floats (E4M3, E5M2) with per-tensor, row, 1x128-tile and 128x128-block scales, and the
error each leaves in a matrix product, measured against bf16's (numerics only: FP8's speed needs a GPU);
``fp8_lab`` what it is measured on (outlier activations, a real model's operands) and whether the device is fast.
"""
