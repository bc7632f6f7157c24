"""Two "nodes" on one machine: network namespaces joined by a virtual cable (lesson 09).

Why: a multi-node run differs from a one-node run in what crosses the network: the
rendezvous, and every collective between ranks on different nodes.  Two network namespaces
are two network stacks with their own interfaces and addresses; a veth pair is a cable
between them.  A process started in one (``ip netns exec``) can reach the other only over
that cable, at the other's address, exactly as on two machines, while both share this
machine's files and Python.  It needs root and ``ip`` (iproute2); ``available()`` says why not.

``with two_nodes() as nodes:`` creates them, and removes them on the way out, also after an
error or an interrupt.  Traffic stays on the addresses given here (a private /24), inside
the namespaces this creates.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass


INTERFACE = "dlnet0"           # each node's end of the cable has this name inside its namespace


@dataclass
class Nodes:
    names: list[str]           # the namespaces
    addresses: list[str]       # each node's address on the cable
    interface: str = INTERFACE

    def command(self, node: int, argv: list[str]) -> list[str]:
        """``argv`` run on node ``node``."""
        return ["ip", "netns", "exec", self.names[node], *argv]


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"distlab-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args, check=True):
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


@contextmanager
def two_nodes(tag: str | None = None, subnet: str = "10.213.77"):
    """Lesson 09: two namespaces, ``SUBNET.1`` and ``SUBNET.2``, joined by a veth pair."""
    reason = available()
    if reason:
        raise RuntimeError(f"two_nodes: {reason}")
    tag = tag or str(os.getpid())
    names = [f"dl{tag}n0", f"dl{tag}n1"]
    ends = [f"dl{tag}a"[:15], f"dl{tag}b"[:15]]        # interface names: 15 characters at most
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    try:
        for name in names:
            _ip("netns", "add", name)
        _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for name, end, address in zip(names, ends, addresses):
            _ip("link", "set", end, "netns", name)
            _ip("-n", name, "link", "set", end, "name", INTERFACE)   # one name on every node, as
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", INTERFACE)   # Horovod wants
            _ip("-n", name, "link", "set", INTERFACE, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            # `ip netns exec` shows /etc/netns/NAME/hosts as /etc/hosts: there this machine's name
            # is the node's address (gloo, left alone, resolves it and would find 127.0.0.1)
            os.makedirs(f"/etc/netns/{name}", exist_ok=True)
            with open(f"/etc/netns/{name}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")
        yield Nodes(names, addresses)
    finally:
        for name in names:                 # deleting a namespace deletes its end of the cable too
            _ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


@contextmanager
def ssh_server(nodes: Nodes, node: int, folder: str, port: int = 2222):
    """An ssh server on node ``node`` that lets in the holder of a fresh key, for horovodrun.

    horovodrun starts the ranks of other nodes over ssh, as on a real cluster.  The server runs
    in the node's namespace with its own host key, accepts only the key made here (written to
    ``folder``), and is stopped on the way out.  Yields the client's ``ssh`` options file and key.
    """
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        raise RuntimeError("ssh_server needs sshd (Debian: apt-get install openssh-server)")
    os.makedirs(folder, exist_ok=True)
    key, host_key = os.path.join(folder, "id_ed25519"), os.path.join(folder, "host_ed25519")
    for path in (key, host_key):
        if not os.path.exists(path):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
    authorized = os.path.join(folder, "authorized_keys")
    shutil.copy(key + ".pub", authorized)
    os.chmod(authorized, 0o600)
    os.makedirs("/run/sshd", exist_ok=True)                 # sshd's privilege-separation folder
    server = subprocess.Popen(nodes.command(node, [sshd, "-D", "-e", "-p", str(port), "-h", host_key,
                                                   "-o", f"AuthorizedKeysFile={authorized}",
                                                   "-o", "PermitRootLogin=prohibit-password",
                                                   "-o", "StrictModes=no", "-o", "UsePAM=no",
                                                   "-o", f"ListenAddress={nodes.addresses[node]}"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        if server.poll() is not None:
            raise RuntimeError(f"sshd did not start: {server.stderr.read()[-2000:]}")
        yield key
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_config(nodes: Nodes, config, folder: str, timeout: float = 300) -> tuple[list, list[str]]:
    """Lesson 09: a run on both nodes at once: on each, the torchrun line ``distlab run`` would start.

    Each node gets its own copy of ``config`` (the nodes' addresses as ``launch.hosts``, its own
    run folder: nothing shared but the files this machine has anyway) and runs torchrun in its
    namespace, as a scheduler would (``distlab run --node-rank N`` runs the same line; the tests
    run that).  Returns every rank's record, in rank order, and each node's torchrun output.
    """
    import io

    from .config import RunConfig
    from .run import _report, command, prepare, records, run_dir

    data = config.model_dump()
    data["launch"].update(nodes=2, hosts=list(nodes.addresses))
    configs, runs, started = [], [], time.time()     # both nodes timed from their start
    for node in range(2):
        data["logging"]["dir"] = os.path.join(folder, f"node{node}")
        mine = RunConfig.parse(data)
        cmd, env = command(mine, node)
        prepare(mine)
        env["GLOO_SOCKET_IFNAME"] = nodes.interface          # gloo's connections go over the cable
        configs.append(mine)
        runs.append(subprocess.Popen(nodes.command(node, ["env", *[f"{k}={v}" for k, v in env.items()], *cmd]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in runs]
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
    seconds = time.time() - started    # once: node 0's report must not add to node 1's time
    for node, (p, mine) in enumerate(zip(runs, configs)):
        log = os.path.join(folder, f"node{node}.log")
        with open(log, "w") as f:
            f.write(outputs[node])
        said = io.StringIO()
        if _report(mine, run_dir(mine), p.returncode, seconds, log, said):
            raise RuntimeError(f"node {node} failed:\n{said.getvalue()[-3000:]}")
        outputs[node] = said.getvalue()
    found = [r for c in configs for r in records(c)]
    return sorted(found, key=lambda r: r.rank), outputs
