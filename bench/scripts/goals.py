"""How every benchmark ends: one GOAL line per goal, from the median of its rounds.

A figure measured once on a shared machine says little: the next run may differ by more than
the goal's margin.  So each benchmark measures its figure in several rounds (alternating what
it compares, so that a busy moment hits both sides), and ``goal`` prints the rounds' median,
their range and half-range as a fraction of the median (the spread), then the GOAL line:
``GOAL <name> <median> <op> <target> PASS|MISS``, then ``note`` if one is given (what the
target was derived from, e.g. the machine's probe ceiling).
"""
import statistics


def goal(name: str, rounds, op: str, target, note: str = "") -> bool:
    """Print the spread of ``rounds`` and the GOAL line for their median; return PASS."""
    rounds = list(rounds)
    value = statistics.median(rounds)
    if op == "<=":
        ok, shown = value <= target, f"{target}"
    elif op == ">=":
        ok, shown = value >= target, f"{target}"
    elif op == ">":
        ok, shown = value > target, f"{target}"
    else:                                    # "within": target = (low, high)
        ok, shown = target[0] <= value <= target[1], f"{target[0]}..{target[1]}"
    spread = (max(rounds) - min(rounds)) / 2 / abs(value) if value else float("nan")
    print(f"{name}: median of {len(rounds)} rounds {value:.4g}, rounds {min(rounds):.4g} to "
          f"{max(rounds):.4g} (spread ±{spread:.1%})")
    print(f"GOAL {name} {value:.4g} {op} {shown} {'PASS' if ok else 'MISS'}" + (f" ({note})" if note else ""))
    return ok
