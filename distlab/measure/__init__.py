"""Measuring whether distributing pays (lesson 05).

- ``scaling``      measuring samples per second on 1, 2, ... real ranks, and where a step's time goes
- ``speedup``      reading the measurements: speedups, and fitting Amdahl's law and alpha-beta to them
- ``large_batch``  what a larger global batch does to accuracy, and the learning-rate rules
- ``ceiling``      how much faster N ranks compute at all here, with no communication (lesson 06)
- ``more_data``    more data, more accuracy: the company's question, answered on real ranks (lesson 05)
- ``roofline``     this machine's measured peak FLOP/s and memory bandwidth, the roofline, MFU, and published
                   GPU figures to read a run against (lesson 15, issue 39)
- ``exposed``      the ways to send gradients timed side by side: the communication left after backward, and
                   each bucket against backward (lesson 15)
- ``traces``       one step traced with torch.profiler on every rank, read back as compute and communication,
                   and its exposed communication (lesson 15); ``data_parallel.train`` or FSDP2's
                   ``fsdp.train`` with its prefetch switched
"""
