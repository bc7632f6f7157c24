"""Long jobs (lesson 10, failure is normal at scale): write down, watch, save, fail on purpose.

- ``metrics``           what every rank writes down each step (JSON lines, and TensorBoard when asked)
- ``monitor``           watching those files from outside while the job runs: stalls, deaths, restarts
- ``diagnosis``         who broke a job and how: the one diagnosis for launch, ``distlab run`` and the monitor
- ``checkpoint``        every rank's whole state, saved now and then and resumed bit for bit
- ``faults``            making one rank die, raise or hang at a chosen step
- ``horovod_timeline``  Horovod's own record of what its background thread did with every tensor
"""
