"""Starting ranks, and the backends they talk through (lessons 00, 01 and 02).

- ``launcher``        ``launch()``: start N ranks from a notebook cell, show progress, collect records
- ``pool``            warm ranks that stay up between launches (lesson 00)
- ``arguments``       everything checked before a process starts (arguments against the signature), and a
                      job's arguments typed in a terminal (``key=value``, lesson 02)
- ``jobs``            a running job: poll it, read who failed, stop it with nothing left behind
- ``rank``            the program each rank runs (joins once, then runs job after job)
- ``worker``          the ``Worker`` interface every training function receives; ``devices`` which device
                      is a rank's (lesson 00)
- ``torch_backend``   torchrun: starting its ranks (lesson 01); ``torch_worker`` torch.distributed's
                      collectives behind ``Worker`` (async too, lesson 08)
- ``horovod_backend`` Horovod behind the same interface (lesson 02); ``horovod_driver`` starts it
- ``progress``        a progress bar per rank (widgets in a notebook, lines in a terminal)
- ``cores``           a core of its own for each CPU rank, and when not to (lesson 02)
- ``horovod_worker``  Horovod's collectives behind ``Worker``, in groups (process sets) (lesson 07)
- ``torchrun_local``, ``horovodrun_local``   the two launchers, listening on 127.0.0.1 only
"""
