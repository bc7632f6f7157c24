"""Mixtures of experts (lesson 13, experts: a bigger model for the same compute).

- ``moe``  the layer on one process: a router, top-k, a capacity with dropped tokens counted, and the
  balancing losses (Switch Transformer's auxiliary loss, ST-MoE's router z-loss)
"""
