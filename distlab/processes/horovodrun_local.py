"""``horovodrun`` for one machine, listening on 127.0.0.1 only: ``python .../horovodrun_local.py -np 2 ...``.

Lesson 09 (``distlab run`` with ``launch.backend: horovod`` on one node), and lesson 02's driver
(``horovod_driver.py`` calls ``listen_on_loopback`` before ``horovod.run``).

Why: Horovod's launcher opens servers of its own, with no password: the Gloo rendezvous (the
ranks find each other through it) and, for ``horovod.run``, a key-value store that hands each
rank the pickled function and takes back its pickled result, which the driver unpickles.
Horovod opens them on every network interface (``0.0.0.0``), so that ranks on other nodes can
reach them.  On one machine nobody else needs to: a learner's laptop on a café's Wi-Fi should
not let a stranger join its rendezvous, or post a "result" that the driver unpickles (that is,
run code on the laptop).  So for runs on one machine these servers listen on 127.0.0.1.

How: Horovod picks the address and port of every one of its servers in one function,
``horovod.runner.util.network.find_port``, which tries ``('', port)`` (``''``: every interface)
for port after port.  ``listen_on_loopback`` keeps that search and changes only the address.
The modules that use ``find_port`` imported it by name, so it is replaced in each of them.
Multi-node runs keep Horovod's own choice (``run.horovodrun_command`` starts plain horovodrun).

Only the standard library is imported at the top: the file is run by its path (importing
``distlab`` would import PyTorch, seconds that horovodrun never needs), and Horovod's helper
processes (multiprocessing's "spawn") run this file's top level again.
"""
import sys

LOOPBACK_ADDRESS = "127.0.0.1"


def listen_on_loopback() -> None:
    """Make every server Horovod starts in this process listen on 127.0.0.1 instead of 0.0.0.0."""
    from horovod.runner.common.util import network as services   # driver and task services (BasicService)
    from horovod.runner.http import http_server                  # Gloo rendezvous, key-value store
    from horovod.runner.util import network

    horovods_find_port = network.find_port

    def find_port_on_loopback(server_factory):
        """Horovod's search for a free port, with the loopback address in place of every interface."""
        return horovods_find_port(lambda address: server_factory((LOOPBACK_ADDRESS, address[1])))

    for module in (network, http_server, services):
        module.find_port = find_port_on_loopback


def main() -> int:
    """Run horovodrun's own command line (the ``horovodrun`` program), listening on 127.0.0.1."""
    listen_on_loopback()
    from horovod.runner.launch import run_commandline

    sys.argv[0] = "horovodrun"          # its usage and error messages say "horovodrun"
    return run_commandline()


if __name__ == "__main__":
    sys.exit(main())
