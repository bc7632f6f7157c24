"""``torchrun`` for one machine, listening on 127.0.0.1 only: ``python -m distlab.processes.torchrun_local ...``.

Lesson 10 (and every single-node run: ``distlab run``, and ``distlab.launch``'s launcher, which
calls ``listen_on_loopback`` itself).  torchrun's agent hosts the job's *store*: a key-value
server with no password through which the ranks find each other (each writes its address, and
reads the others').  PyTorch's ``TCPStore`` server listens on every network interface whatever
host name it is given, so that ranks on other nodes can reach it.  On one machine nobody else
needs to: a learner's laptop on a café's Wi-Fi should not let a stranger write into its job's
store.  ``TCPStore`` accepts a socket that is already listening (``master_listen_fd``), so the
store gets one bound to 127.0.0.1.  Multi-node runs keep torchrun's own choice (other nodes
must reach the first one): ``run.torchrun_command`` starts plain torchrun for them.
"""
from __future__ import annotations

import socket
import sys

LOOPBACK_ADDRESS = "127.0.0.1"


def listen_on_loopback() -> None:
    """Make the store that torchrun's (static) rendezvous starts in this process listen on 127.0.0.1."""
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous as static

    torchs_store = static.TCPStore

    def store_on_loopback(host, port, world_size, is_master, timeout, **kwargs):
        if is_master:
            listener = socket.create_server((LOOPBACK_ADDRESS, port))
            kwargs["master_listen_fd"] = listener.detach()      # the store owns the socket from now on
        return torchs_store(host, port, world_size, is_master, timeout, **kwargs)

    static.TCPStore = store_on_loopback


def main() -> int:
    """torchrun's own command line, its store on 127.0.0.1."""
    listen_on_loopback()
    from torch.distributed.run import main as torchrun

    sys.argv[0] = "torchrun"
    torchrun()
    return 0


if __name__ == "__main__":
    sys.exit(main())
