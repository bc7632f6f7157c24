"""Fitting more (lesson 14, being built: issue 38): the memory levers, each one module plugged into the
one micro-step.

``mixed``: bf16 and fp16 compute with fp32 master weights, and the dynamic loss scaler fp16 needs.
"""
