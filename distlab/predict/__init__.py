"""Every formula of the course in one place: what a run will cost, predicted before anything runs.

The lessons, their widgets, the benchmarks (and a planner) read their formulas from here; each
function names its source (a paper, its section or equation) and the lesson that introduces it.
This package depends only on the core (``distlab.models``, plain torch and math): the packages
that train, measure and draw import it, never the other way round, so a formula is written once.

- ``alpha_beta``   the alpha-beta cost of the collectives (naive, parameter server, ring, tree),
                   message by message, and the ring's bytes (lesson 03)
- ``speedup``      Amdahl's law and a step's time at N ranks: the speedup predicted (lesson 05)
- ``flops``        multiply-adds and FLOPs per training step: the MLP, the CNN, the line
                   transformer (lessons 05, 06, 12)
- ``stage_cut``    the balanced cut of a model's layers into pipeline stages (lesson 06)
- ``bubbles``      a pipeline's idle share and the micro-batches each stage holds, per schedule (lesson 06)
- ``traffic``      bytes per step by axis: data, tensor, sequence, context, expert (lessons 05, 07, 12, 13)
- ``memory``       bytes per rank by category for every axis and ZeRO stage, and ZeRO's traffic (lesson 08)
- ``activations``  the activations a rank keeps for backward: the MLP's, and the transformer's under
                   every split (lessons 08, 12)
- ``overlap_conditions`` when communication can hide behind compute: DP, ZeRO-3, TP, and where (lesson 15)
"""
