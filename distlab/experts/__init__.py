"""Mixtures of experts (lesson 13, experts: a bigger model for the same compute).

- ``moe``  the layer on one process: a router, top-k, a capacity with dropped tokens counted, and the
  balancing losses (Switch Transformer's auxiliary loss, ST-MoE's router z-loss)
- ``expert_parallel``  the experts spread over ranks: counts, then tokens, dispatched to their experts'
  ranks and combined back (send/recv by hand, or one all-to-all with split sizes), forward and backward
  (``add_experts``: lesson 12's line reader with experts in every block; training it on any mesh:
  ``parallelize.trainer``)
- ``measure``  what the ranks' records tell: bytes against the all-to-all formula, the busiest expert
  against the mean, dropped requests, each rank's expert work and forward timeline, and the ranks'
  experts under one process's names (``as_one_process``); the all-to-alls' seconds against the experts'
  (``exchange_vs_experts``, lesson 15)
"""
