"""Communication, and what it costs (lesson 03: combining gradients).

- ``collectives``     naive, parameter-server, ring and tree all-reduce, written on send/recv
- ``collective_runs`` worker functions that check them against dist.all_reduce and trace them
- ``cost_model``      the alpha-beta model fitted to this machine (the model: ``predict.alpha_beta``), and
                      readers of message logs
- ``measure_costs``   timing messages and all-reduces on real ranks, to fit and test the model
"""
