"""Bytes that really crossed the wire, for the benchmarks that compare them with a formula.

On one machine the ranks talk over the loopback interface, whose transmit counter the kernel keeps
in /proc/net/dev: the bytes a run sent are the counter after it minus the counter before (anything
else on the machine that uses loopback meanwhile is counted too, so the benchmarks subtract a short
run from a long one and keep the machine otherwise quiet).
"""


def loopback_bytes() -> int:
    """Bytes sent over ``lo`` since boot (the transmit counter of /proc/net/dev)."""
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                return int(line.split(":", 1)[1].split()[8])
    raise RuntimeError("no loopback interface in /proc/net/dev")
