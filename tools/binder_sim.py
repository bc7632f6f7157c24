"""A simulated Binder launch: the course built only from ``binder/`` and run within Binder's limits.

Why: Binder is one of the three ways the course is used, and nothing in the rest of the test suite
says whether the image builds or whether the lessons fit in a Binder session (about 2 GB of memory
and one CPU's worth of time, shared by JupyterLab, the kernel and every rank a lesson starts).
This does, as closely as a machine without Docker's daemon allows:

1. **Build** (``build``): the repository's files copied into a fresh folder (repo2docker copies the
   repository into the image), a fresh virtual environment made with the Python of
   ``binder/runtime.txt``, ``pip install -r binder/requirements.txt``, the packages of
   ``binder/apt.txt`` checked (installed with apt-get if missing and we are root), then
   ``binder/postBuild`` run from the copy's root with the environment first on PATH, as repo2docker
   runs it.  Where PyTorch's CPU wheel index cannot be reached, the same torch version is taken
   from the default index, and the output says so.
2. **Run** (``run_lesson``): each lesson under nbval (pytest, nbval and pytest-timeout are added
   to the environment for this: they are the test harness, not part of the image), started through
   ``binder/start`` as repo2docker starts the server, inside a ``Confinement``.
3. **Confine** (``Confinement``): a cgroup with a 2 GB memory limit and a CPU quota of one CPU
   (cgroup v2, or v1's memory and cpu controllers) where the machine lets us make one; otherwise a
   watchdog that stops the lesson when its processes' summed RSS passes the limit, and one core
   by CPU affinity.  ``describe()`` says which was enforced.  Each lesson also gets a network
   namespace of its own (``own_network``), as each Binder session's pod has its own network.
4. **Measure** (``measure``): wall time, and the peak of the summed RSS of every process of the
   lesson (pytest standing in for the Jupyter server, the kernel, and all its ranks), sampled
   every 0.1 s; with a cgroup, also the kernel's own peak charge for the group and whether its
   OOM killer fired.

Run it: ``python tools/binder_sim.py --help``; ``tests/test_binder.py`` runs the course under the
limits in ``make test``; ``bench/binder.py`` measures it with and without them.
"""
from __future__ import annotations

import argparse
import glob
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9
BINDER_MEMORY_BYTES = 2 * 1024**3      # mybinder.org: a user pod's memory limit, 2 GiB
BINDER_CPUS = 1.0                      # mybinder.org: at most one CPU's time per user pod
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
HARNESS = ["pytest>=8", "pytest-timeout", "nbval>=0.11"]
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg"]


def lessons(root: Path = ROOT) -> list[Path]:
    """Every lesson and every solutions notebook, in course order (later lessons join by themselves)."""
    return sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "course" / "solutions").glob("*.ipynb"))


# ---------------------------------------------------------------- confining a run to Binder's limits

@dataclass
class Limits:
    memory_bytes: int | None = BINDER_MEMORY_BYTES
    cpus: float | None = BINDER_CPUS

    def __str__(self):
        if self.memory_bytes is None and self.cpus is None:
            return "no limits"
        return f"{self.memory_bytes / 1024**3:g} GiB, {self.cpus:g} CPU"


BINDER = Limits()
NONE = Limits(None, None)


class Confinement:
    """Where the processes of one run live: a fresh cgroup when the machine allows, else a watchdog.

    Use as a context manager; pass ``preexec`` to ``subprocess.Popen(preexec_fn=...)`` so that the
    child joins the group before it runs anything, and read ``pids()`` to see every process of the
    run, including any that were orphaned (a cgroup keeps them; a process tree would lose them).
    """

    PERIOD_US = 100_000

    def __init__(self, limits: Limits = BINDER, name: str | None = None, cgroup: bool = True):
        self.limits = limits
        self.cgroup = cgroup
        self.name = name or f"distlab-binder-{os.getpid()}-{time.monotonic_ns()}"
        self.kind = "none"
        self.dirs: list[Path] = []       # the cgroup folders (v2: one; v1: memory and cpu)
        self.adopted: set[int] = set()   # watchdog only: processes moved in with ``adopt``

    # -- set-up
    def __enter__(self):
        if self.limits.memory_bytes is None and self.limits.cpus is None:
            return self
        _remove_stale_groups()
        try:
            if not self.cgroup:
                raise OSError("cgroups not used (cgroup=False)")
            self._cgroup_v2() if Path("/sys/fs/cgroup/cgroup.controllers").exists() else self._cgroup_v1()
        except OSError as e:
            self._remove()
            self.kind, self.why_not = "watchdog", f"no cgroup could be made here ({e})"
        return self

    def _cgroup_v2(self):
        base = Path("/sys/fs/cgroup")
        d = base / self.name
        (base / "cgroup.subtree_control").write_text("+memory +cpu")
        d.mkdir()
        self.dirs = [d]
        if self.limits.memory_bytes is not None:
            (d / "memory.max").write_text(str(self.limits.memory_bytes))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
        if self.limits.cpus is not None:
            (d / "cpu.max").write_text(f"{int(self.limits.cpus * self.PERIOD_US)} {self.PERIOD_US}")
        self.kind = "cgroup v2"

    def _cgroup_v1(self):
        mem, cpu = Path("/sys/fs/cgroup/memory") / self.name, Path("/sys/fs/cgroup/cpu") / self.name
        mem.mkdir()
        self.dirs.append(mem)
        cpu.mkdir()
        self.dirs.append(cpu)
        if self.limits.memory_bytes is not None:
            (mem / "memory.limit_in_bytes").write_text(str(self.limits.memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():   # no swapping past the limit either
                (mem / "memory.memsw.limit_in_bytes").write_text(str(self.limits.memory_bytes))
        if self.limits.cpus is not None:
            (cpu / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(int(self.limits.cpus * self.PERIOD_US)))
        self.kind = "cgroup v1"

    def __exit__(self, *exc):
        self.kill_all()
        self._remove()

    def _remove(self):
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        self.dirs = []

    # -- what the child runs before exec
    def preexec(self):
        os.setsid()                      # its own process group, so that a timeout can stop all of it
        self.adopt(os.getpid())

    # -- a process that is already running (the browser's JupyterLab and its kernel: issue 25)
    def adopt(self, pid: int) -> None:
        """Move ``pid`` (all its threads) into the group; what it starts from now on is born inside.

        The memory it already holds stays charged to its old group (recent kernels no longer move
        charges), so a caller that wants the whole process counted lowers the limit by its RSS:
        ``set_memory_limit``."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))
        if self.kind == "watchdog" and self.limits.cpus is not None and self.limits.cpus <= 1:
            core = sorted(os.sched_getaffinity(0))[0]
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), {core})
            self.adopted.add(pid)
        elif self.kind == "watchdog":
            self.adopted.add(pid)

    def set_memory_limit(self, nbytes: int) -> None:
        """Change the group's memory limit (the watchdog reads ``limits`` too)."""
        self.limits = Limits(nbytes, self.limits.cpus)
        if self.kind == "cgroup v1":
            (self.dirs[0] / "memory.limit_in_bytes").write_text(str(nbytes))
        elif self.kind == "cgroup v2":
            (self.dirs[0] / "memory.max").write_text(str(nbytes))

    def release(self, pid: int) -> None:
        """Move ``pid`` back out of the group, to the group it came from (the machine's root group)."""
        for d in self.dirs:
            (d.parent / "cgroup.procs").write_text(str(pid))
        if self.kind == "watchdog":
            self.adopted.discard(pid)
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), os.sched_getaffinity(0))

    # -- reading it
    def describe(self) -> str:
        if self.kind == "none":
            return "no limits (the machine's cores and memory)"
        mem, cpus = self.limits.memory_bytes, self.limits.cpus
        if self.kind == "watchdog":
            parts = [f"a watchdog that stops the run when its processes' summed PSS passes {mem / 1024**3:g} GiB"
                     if mem is not None else "",
                     "one core by CPU affinity (not a quota)" if cpus is not None else ""]
            return f"{self.why_not}: " + ", ".join(p for p in parts if p)
        parts = [f"a memory limit of {mem / 1024**3:g} GiB (no swap)" if mem is not None else "",
                 f"a CPU quota of {cpus:g} CPU ({int(cpus * self.PERIOD_US / 1000)} ms every "
                 f"{self.PERIOD_US // 1000} ms) on {os.cpu_count()} cores" if cpus is not None else ""]
        return f"{self.kind}: " + " and ".join(p for p in parts if p)

    def pids(self, root_pid: int) -> set[int]:
        """Every process of the run: the cgroup's members, or the root's process tree."""
        if self.dirs:
            return {int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()}
        found = set()
        for pid in {root_pid} | self.adopted:
            try:
                found |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass
        return found

    def group_peak_bytes(self) -> int | None:
        """The kernel's own peak charge for the group (RSS + page cache it counts), if a cgroup."""
        if self.kind == "cgroup v1":
            return int((self.dirs[0] / "memory.max_usage_in_bytes").read_text())
        if self.kind == "cgroup v2" and (self.dirs[0] / "memory.peak").exists():
            return int((self.dirs[0] / "memory.peak").read_text())
        return None

    def oom_kills(self) -> int:
        if self.kind == "cgroup v1":
            text = (self.dirs[0] / "memory.oom_control").read_text()
        elif self.kind == "cgroup v2":
            text = (self.dirs[0] / "memory.events").read_text()
        else:
            return 0
        m = re.search(r"oom_kill (\d+)", text)
        return int(m.group(1)) if m else 0

    def throttled_periods(self) -> int | None:
        """How many 100 ms periods the quota stopped the group in (proof that the quota bites)."""
        d = self.dirs[-1] if self.dirs else None
        if d is None or not (d / "cpu.stat").exists():
            return None
        m = re.search(r"nr_throttled (\d+)", (d / "cpu.stat").read_text())
        return int(m.group(1)) if m else None

    def kill_all(self):
        for pid in self.pids(-1) if self.dirs else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _remove_stale_groups():
    """Empty groups left by a run that was killed before it could remove them (its pid is gone)."""
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"):
        for d in Path(base).glob("distlab-binder-*"):
            owner = d.name.split("-")[2]
            if owner.isdigit() and not psutil.pid_exists(int(owner)):
                try:
                    d.rmdir()                     # refused (and left) while a process is inside
                except OSError:
                    pass


# ---------------------------------------------------------------- measuring one run

@dataclass
class Measured:
    command: list
    returncode: int
    wall_s: float
    peak_rss_bytes: int              # the largest sum of RSS over the run's processes, sampled
    peak_pss_bytes: int              # the largest sum of PSS (shared pages counted once), sampled
    peak_processes: int              # how many processes there were at that moment
    group_peak_bytes: int | None     # the cgroup's own peak charge (None without a cgroup)
    oom_kills: int
    watchdog_killed: bool
    throttled_periods: int | None
    left_behind: list                # processes still in the group 10 s after the command exited
    enforced: str
    at_peak: list = field(default_factory=list)     # each process's PSS at the PSS peak, largest first
    output: str = field(repr=False, default="")

    @property
    def peak_gb(self) -> float:
        return self.peak_rss_bytes / GB

    @property
    def peak_pss_gb(self) -> float:
        return self.peak_pss_bytes / GB


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes, from /proc/PID/smaps_rollup (one cheap read).

    RSS counts every page the process can touch, shared or not; PSS divides each shared page
    among the processes that share it.  Ranks forked from torchrun's process share most of
    PyTorch's pages with it and with each other, so summed RSS counts those pages once per rank
    while summed PSS counts them once: the first is an upper bound, the second what they use.
    """
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    rss = re.search(r"^Rss:\s+(\d+) kB", text, re.M)
    pss = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    return int(rss.group(1)) * 1024, int(pss.group(1)) * 1024


def _sum_memory(pids) -> tuple[int, int, int, dict]:
    """Summed RSS, summed PSS, the number of processes that could be read, and PSS by pid."""
    rss = pss = n = 0
    each = {}
    for pid in pids:
        try:
            r, p = _memory(pid)
        except (OSError, AttributeError):         # gone meanwhile, or a zombie with no maps
            continue
        rss, pss, n = rss + r, pss + p, n + 1
        each[pid] = p
    return rss, pss, n, each


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _who(each: dict) -> list[str]:
    """The processes at the peak, largest first: "PSS MB  command" (what to lighten, if anything)."""
    return [f"{pss / 1e6:6.0f} MB  {cmd[:120]}" for cmd, pss in sorted(each.values(), key=lambda v: -v[1])]


def left_behind(box: Confinement, root_pid: int, grace: float = 10.0) -> list[str]:
    """What is still running in the group, besides ``root_pid``, ``grace`` seconds after the run ended
    (a cgroup only: orphans leave a process tree).  A kernel or rank still shutting down gets the grace
    to finish.  ``measure`` asks it after its command exits; the browser's runs after each lesson,
    with the JupyterLab server (which stays for the next lesson) as the root."""
    if not box.dirs:
        return []
    deadline = time.monotonic() + grace
    while True:
        pids = box.pids(root_pid) - {root_pid}
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return [f"{pid} {_command(pid)[:160]}" for pid in sorted(pids) if os.path.exists(f"/proc/{pid}")]


class Watch:
    """The memory of a confinement's processes, sampled in a thread, for a run started elsewhere.

    Issue 25: a lesson run in the browser is started by JupyterLab, not by ``measure``; its
    server and kernel are moved into the group (``Confinement.adopt``) and watched here with
    the same peaks and watchdog as ``measure``.  Use as a context manager around the run.
    """

    def __init__(self, box: Confinement, interval: float = 0.1):
        self.box, self.interval = box, interval
        self.peak = self.peak_n = self.peak_pss = 0
        self.at_peak: dict = {}
        self.watchdog = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="binder-watch", daemon=True)

    def __enter__(self):
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self.wall_s = time.perf_counter() - self.t0

    def _loop(self):
        limit = self.box.limits.memory_bytes
        while not self._stop.is_set():
            rss, pss, n, each = _sum_memory(self.box.pids(-1))
            if rss > self.peak:
                self.peak, self.peak_n = rss, n
            if pss > self.peak_pss:
                self.peak_pss, self.at_peak = pss, {pid: (_command(pid), p) for pid, p in each.items()}
            if self.box.kind == "watchdog" and limit is not None and pss > limit:
                self.watchdog = True
                for pid in each:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self._stop.wait(self.interval)

    def measured(self, command: list, returncode: int, left_behind: list, output: str = "") -> Measured:
        return Measured(command=[str(c) for c in command], returncode=returncode, wall_s=self.wall_s,
                        peak_rss_bytes=self.peak, peak_pss_bytes=self.peak_pss, peak_processes=self.peak_n,
                        group_peak_bytes=self.box.group_peak_bytes(), oom_kills=self.box.oom_kills(),
                        watchdog_killed=self.watchdog, throttled_periods=self.box.throttled_periods(),
                        left_behind=left_behind, enforced=self.box.describe(), at_peak=_who(self.at_peak),
                        output=output)


_networks = itertools.count()
_linking = threading.Lock()     # a link's /30 is chosen and given to the host's end under it: no two links share one

# The links into the namespaces take their addresses from the range RFC 2544 sets aside for benchmarking and
# test networks, never from the private ranges a learner's own network (home, office, VPN) may be using.
LINK_RANGE = ipaddress.ip_network("198.18.0.0/15")
LINKS = LINK_RANGE.num_addresses // 4                   # its /30s: 32768


def host_networks(routes: list[dict], addresses: list[dict]) -> list:
    """The IPv4 networks this host already uses: every route's destination, in every table (the default route
    aside: it covers every address, and is only where what no other route takes goes), and the network of every
    address it holds.  ``routes`` as ``ip -4 -j route show table all`` writes them, ``addresses`` as
    ``ip -4 -j addr show``."""
    taken = []
    for route in routes:
        dst = route.get("dst")
        try:
            net = ipaddress.ip_network(dst, strict=False) if dst and dst != "default" else None
        except ValueError:
            continue
        if net is not None and net.version == 4 and net.prefixlen > 0:
            taken.append(net)
    for link in addresses:
        for a in link.get("addr_info", ()):
            if a.get("family") == "inet" and a.get("local"):
                taken.append(ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}").network)
    return taken


def free_link(taken: list, start: int = 0):
    """The first /30 of LINK_RANGE, from the ``start``-th on (wrapping round), that overlaps none of ``taken``
    (``host_networks``): a link's two ends, the host's and the namespace's, then shadow no network the host
    reaches, and no other link.  RuntimeError, naming what covers the range, when none is free."""
    near = [net for net in taken if net.overlaps(LINK_RANGE)]
    first, i = int(LINK_RANGE.network_address), 0
    while i < LINKS:
        index = (start + i) % LINKS
        link = ipaddress.ip_network((first + 4 * index, 30))
        blocking = next((net for net in near if link.overlaps(net)), None)
        if blocking is None:
            return link
        # every /30 up to the end of what blocks this one is blocked too (but the range wraps round at its end)
        i += min(max(1, (int(blocking.broadcast_address) - int(link.network_address)) // 4 + 1), LINKS - index)
    raise RuntimeError(f"no free /30 in {LINK_RANGE} (RFC 2544's range for benchmarking networks, the only one the "
                       "simulated Binder gives its links, so as never to shadow a network of this machine) for a link "
                       "into a network namespace: this host's routes and addresses cover all of it: "
                       + ", ".join(sorted({str(net) for net in near})))


def _ip_json(*args) -> list:
    out = subprocess.run(["ip", "-4", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


@contextmanager
def own_network(reachable: bool = False):
    """Yield (command prefix, what it is, address): a network namespace of the run's own.

    Binder gives every session a pod, and every pod its own network: two learners' lessons may
    both start torchrun's store on port 29500.  Two lessons run side by side here must not meet
    either (lessons 09 and 10 use fixed ports), so each gets a namespace like a pod's.  Without
    root or ``ip``, the host's network is used, and ``enforced`` says so.

    ``reachable``: the namespace also gets a link to the host (a veth pair on a /30 of its own,
    as a pod has its address: from 198.18.0.0/15, clear of every route and address of the host,
    ``free_link``), so that a browser on the host can reach a server inside it;
    ``address`` is the namespace's end ("127.0.0.1" when there is no namespace, or no link).
    """
    for old in glob.glob("/run/netns/dlbinder-*"):          # left by a run that was killed
        owner = Path(old).name.split("-")[1]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            subprocess.run(["ip", "netns", "del", Path(old).name], capture_output=True)
    name = f"dlbinder-{os.getpid()}-{next(_networks)}"
    if os.geteuid() != 0 or shutil.which("ip") is None:
        yield [], "the host's network (no namespace of its own: not root, or no ip)", "127.0.0.1"
        return
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode:
        yield [], f"the host's network (ip netns add failed: {made.stderr.strip()})", "127.0.0.1"
        return
    host_end = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
        where, address = "a network namespace of its own (loopback only)", "127.0.0.1"
        if reachable:
            k = next(_networks)
            host_end, inner = f"dlv{os.getpid() % 100000}h{k}", f"dlv{os.getpid() % 100000}n{k}"
            with _linking:         # a /30 of 198.18.0.0/15 that no route or address of the host overlaps
                link = free_link(host_networks(_ip_json("route", "show", "table", "all"), _ip_json("addr", "show")),
                                 start=(os.getpid() * 64 + k) % LINKS)
                host_address, address = (str(a) for a in link.hosts())
                for cmd in (["ip", "link", "add", host_end, "type", "veth", "peer", "name", inner],
                            ["ip", "link", "set", inner, "netns", name],
                            ["ip", "addr", "add", f"{host_address}/30", "dev", host_end],
                            ["ip", "link", "set", host_end, "up"],
                            ["ip", "-n", name, "addr", "add", f"{address}/30", "dev", inner],
                            ["ip", "-n", name, "link", "set", inner, "up"]):
                    subprocess.run(cmd, check=True, capture_output=True)
            where = f"a network namespace of its own (loopback, and {address} on a link to the host)"
        yield ["ip", "netns", "exec", name], where, address
    finally:
        if host_end:
            subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def measure(command, *, cwd, env=None, limits: Limits = BINDER, timeout: float = 900,
            interval: float = 0.1, cgroup: bool = True, grace: float = 10.0,
            stop: threading.Event | None = None, network: bool = False) -> Measured:
    """Run ``command`` confined to ``limits``; sample the summed RSS of all its processes.

    ``stop``: when set (by another thread: the test session ending), the run is killed at once.
    ``network``: the run gets a network namespace of its own (``own_network``), as a Binder pod does."""
    with own_network() if network else nullcontext(([], "", "127.0.0.1")) as (prefix, where, _):
        m = _measure([*prefix, *command], cwd=cwd, env=env, limits=limits, timeout=timeout, interval=interval,
                     cgroup=cgroup, grace=grace, stop=stop)
    if where:
        m.enforced += f"; network: {where}"
    return m


def _measure(command, *, cwd, env, limits: Limits, timeout: float, interval: float, cgroup: bool, grace: float,
             stop: threading.Event | None) -> Measured:
    with Confinement(limits, cgroup=cgroup) as box:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=box.preexec)
        chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read(65536), b"")),
                                  daemon=True)
        reader.start()
        peak = peak_n = peak_pss = 0
        at_peak: dict = {}
        watchdog = stopped = False
        while proc.poll() is None:
            rss, pss, n, each = _sum_memory(box.pids(proc.pid))
            if rss > peak:
                peak, peak_n = rss, n
            if pss > peak_pss:
                peak_pss, at_peak = pss, {pid: (_command(pid), p) for pid, p in each.items()}
            if box.kind == "watchdog" and pss > limits.memory_bytes:     # PSS: what the kernel would charge
                watchdog = True
                os.killpg(proc.pid, signal.SIGKILL)
            if not stopped and (time.perf_counter() - t0 > timeout or (stop is not None and stop.is_set())):
                stopped = True
                os.killpg(proc.pid, signal.SIGKILL)
                chunks.append(f"\n[binder_sim: stopped after {time.perf_counter() - t0:.0f} s"
                              f"{'' if stop is None or not stop.is_set() else ': the session ended'}]\n".encode())
            time.sleep(interval)
        wall = time.perf_counter() - t0
        reader.join(timeout=10)
        left = left_behind(box, proc.pid, grace)
        return Measured(command=[str(c) for c in command], returncode=proc.returncode, wall_s=wall,
                        peak_rss_bytes=peak, peak_pss_bytes=peak_pss, peak_processes=peak_n,
                        group_peak_bytes=box.group_peak_bytes(),
                        oom_kills=box.oom_kills(), watchdog_killed=watchdog,
                        throttled_periods=box.throttled_periods(), left_behind=left, enforced=box.describe(),
                        at_peak=_who(at_peak),
                        output=b"".join(chunks).decode(errors="replace"))


# ---------------------------------------------------------------- building the environment from binder/

@dataclass
class BinderEnv:
    """A built simulation: the repository copy, its environment, and what the build had to change."""
    repo: Path
    venv: Path
    notes: list = field(default_factory=list)
    build_s: float = 0.0

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def environ(self) -> dict:
        """What repo2docker's image gives a process: the environment first on PATH, home at the repository.

        Nothing the calling process picked up on the way comes along: its own environment's folder on
        PATH, or what distlab, torch and the launchers set in it (a test that called
        ``deepspeed_zero.available()`` has ``TORCH_EXTENSIONS_DIR`` pointing into *its* environment; a
        Binder kernel that inherited it compiled DeepSpeed's op there again, inside Binder's memory limit,
        and the compiler was killed halfway, leaving torch's build lock behind).
        """
        env = {k: v for k, v in os.environ.items()
               if k not in INHERITED_NOT and not k.startswith(INHERITED_NOT_PREFIXES)}
        ours = os.path.join(sys.prefix, "bin")
        path = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != ours]
        env.update(PATH=os.pathsep.join([str(self.venv / "bin"), *path]), VIRTUAL_ENV=str(self.venv),
                   REPO_DIR=str(self.repo), PYTHONNOUSERSITE="1")
        return env


# what a fresh container would not have: the caller's environment and what distributed runs set in it
INHERITED_NOT = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "GROUP_RANK"}
INHERITED_NOT_PREFIXES = ("TORCH_", "TORCHELASTIC_", "DS_", "HOROVOD_", "MASTER_", "OMP_", "MKL_",
                          "NCCL_", "GLOO_", "PYTEST_")


def _run(cmd, log, **kw):
    """Run a build step; its output goes to the build log; a failure shows the end of the log."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kw).returncode
    if rc:
        tail = Path(log).read_text()[-4000:]
        raise RuntimeError(f"binder build step failed (exit {rc}): {' '.join(map(str, cmd))}\n{tail}")


def index_reachable(url: str = CPU_INDEX, timeout: float = 5.0) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url + "/torch/", method="HEAD"), timeout=timeout)
        return True
    except Exception:
        return False


def requirements_for_here(text: str, reachable: bool) -> tuple[str, str | None]:
    """binder/requirements.txt as it can be installed here, and a note if it had to change.

    The only change ever made: without PyTorch's CPU index, its ``--extra-index-url`` line is
    dropped and ``torch==X+cpu`` stays as it is (the default index, or a local wheel, serves the
    same CPU build of the same version where it has one).
    """
    if reachable:
        return text, None
    kept = [line for line in text.splitlines() if CPU_INDEX not in line]
    return "\n".join(kept) + "\n", (f"PyTorch's CPU wheel index ({CPU_INDEX}) cannot be reached from here: "
                                    "its --extra-index-url line was dropped and the same torch version was "
                                    "taken from the default index instead")


def repository_files(root: Path = ROOT) -> list[str]:
    """The files repo2docker would copy: tracked ones, and new ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def apt_packages(repo: Path) -> list[str]:
    path = repo / "binder" / "apt.txt"
    if not path.exists():
        return []
    return [w for line in path.read_text().splitlines() for w in [line.split("#")[0].strip()] if w]


def build(dest: Path, root: Path = ROOT, log=print) -> BinderEnv:
    """Build the simulated image in ``dest``: a copy of the repository, a fresh environment, postBuild."""
    t0 = time.perf_counter()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    repo, venv, build_log = dest / "repo", dest / "env", dest / "build.log"
    env = BinderEnv(repo=repo, venv=venv)
    log(f"binder: copying the repository into {repo}")
    if repo.exists():
        shutil.rmtree(repo)
    for rel in repository_files(root):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, repo / rel)

    wanted = (repo / "binder" / "runtime.txt").read_text().strip()          # e.g. python-3.11
    have = f"python-{sys.version_info.major}.{sys.version_info.minor}"
    if wanted != have:
        env.notes.append(f"binder/runtime.txt asks for {wanted}; this machine's Python is {have}, used instead")
    base = getattr(sys, "_base_executable", sys.executable)
    log(f"binder: fresh environment with {base} ({have}; runtime.txt says {wanted})")
    if venv.exists():
        shutil.rmtree(venv)
    _run([base, "-m", "venv", venv], build_log)
    _run([env.python, "-m", "pip", "install", "-q", "--upgrade", "pip"], build_log)

    missing = [p for p in apt_packages(repo)
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                 text=True).stdout.strip() != "install ok installed"]
    if missing:
        if os.geteuid() != 0:
            raise RuntimeError(f"binder/apt.txt needs {missing}, not installed here, and we are not root")
        log(f"binder: apt-get install {' '.join(missing)} (from binder/apt.txt)")
        _run(["apt-get", "update", "-qq"], build_log)
        _run(["apt-get", "install", "-y", "-qq", *missing], build_log,
             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    env.notes.append(f"binder/apt.txt: {', '.join(apt_packages(repo)) or 'none'} "
                     f"({'installed with apt-get: ' + ', '.join(missing) if missing else 'all already installed'})")

    text, note = requirements_for_here((repo / "binder" / "requirements.txt").read_text(),
                                       index_reachable())
    if note:
        env.notes.append(note)
        log(f"binder: {note}")
    reqs = dest / "requirements-here.txt"
    reqs.write_text(text)
    log("binder: pip install -r binder/requirements.txt")
    _run([env.python, "-m", "pip", "install", "-q", "-r", reqs], build_log, cwd=repo, env=env.environ())
    log("binder: running binder/postBuild (Horovod from the wheel cache if it was built before)")
    t_post = time.perf_counter()
    _run(["./binder/postBuild"], build_log, cwd=repo, env=env.environ())
    env.notes.append(f"binder/postBuild ran in {time.perf_counter() - t_post:.0f} s")
    _run([env.python, "-m", "pip", "install", "-q", *HARNESS], build_log, cwd=repo, env=env.environ())
    env.build_s = time.perf_counter() - t0
    (dest / "notes.json").write_text(json.dumps({"notes": env.notes, "build_s": env.build_s}))
    log(f"binder: built in {env.build_s:.0f} s")
    return env


def reuse(dest: Path) -> BinderEnv:
    """A build made earlier in ``dest`` (its repository copy refreshed: the code may have changed)."""
    dest = Path(dest)
    saved = json.loads((dest / "notes.json").read_text())
    env = BinderEnv(repo=dest / "repo", venv=dest / "env", notes=saved["notes"] + ["environment reused"],
                    build_s=saved["build_s"])
    for rel in repository_files(ROOT):
        (env.repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, env.repo / rel)
    return env


# ---------------------------------------------------------------- running the course in it

def run_lesson(env: BinderEnv, lesson: Path, limits: Limits = BINDER, timeout: float = 900,
               cgroup: bool = True, stop: threading.Event | None = None) -> Measured:
    """One lesson under nbval in the built environment, started through binder/start, confined
    (``cgroup=False``: by the watchdog and one core, as on a machine where no cgroup can be made)."""
    rel = lesson.relative_to(ROOT) if lesson.is_absolute() and lesson.is_relative_to(ROOT) else lesson
    command = ["./binder/start", str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--timeout={int(timeout)}", str(rel), *NBVAL]
    return measure(command, cwd=env.repo, env=env.environ(), limits=limits, timeout=timeout, cgroup=cgroup,
                   stop=stop, network=True)


def table(rows: list[dict]) -> str:
    """A markdown table of per-lesson results: {"lesson", and per setting a Measured as a dict}."""
    settings = [k for k in rows[0] if k != "lesson"]
    head = "| lesson | " + " | ".join(f"{s}: time (s) | {s}: peak PSS / RSS sum (GB) | {s}: cgroup peak (GB)"
                                      for s in settings) + " |"
    lines = [head, "|---|" + "---:|---:|---:|" * len(settings)]

    def group(m):
        return f"{m['group_peak_bytes'] / GB:.2f}" if m["group_peak_bytes"] else "-"

    for r in rows:
        cells = []
        for s in settings:
            m = r[s]
            cells += [f"{m['wall_s']:.1f}" + ("" if m["returncode"] == 0 else " FAILED"),
                      f"{m['peak_pss_gb']:.2f} / {m['peak_gb']:.2f}", group(m)]
        lines.append(f"| {r['lesson']} | " + " | ".join(cells) + " |")
    total = []
    for s in settings:
        total += [f"{sum(r[s]['wall_s'] for r in rows) / 60:.2f} min",
                  f"max {max(r[s]['peak_pss_gb'] for r in rows):.2f} / {max(r[s]['peak_gb'] for r in rows):.2f}",
                  ""]
    lines.append("| whole course | " + " | ".join(total) + " |")
    return "\n".join(lines)


def run_course(env: BinderEnv, settings: dict, which=None, log=print) -> list[dict]:
    """Every lesson under each setting ({"name": Limits}); a row per lesson."""
    rows = []
    for lesson in which or lessons(env.repo):
        rel = lesson.relative_to(env.repo)
        row = {"lesson": str(rel)}
        for name, limits in settings.items():
            m = run_lesson(env, rel, limits)
            d = asdict(m)
            d.pop("output")
            d["peak_gb"], d["peak_pss_gb"] = m.peak_gb, m.peak_pss_gb
            row[name] = d
            log(f"{rel} [{name}]: {'passed' if m.returncode == 0 else 'FAILED'} in {m.wall_s:.1f} s, "
                f"peak {m.peak_pss_gb:.2f} GB summed PSS, {m.peak_gb:.2f} GB summed RSS over "
                f"{m.peak_processes} processes"
                + (f", cgroup peak {m.group_peak_bytes / GB:.2f} GB" if m.group_peak_bytes else "")
                + (f", OOM kills {m.oom_kills}" if m.oom_kills else ""))
            if m.returncode:
                log(m.output[-6000:])
        rows.append(row)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", default=str(ROOT / "artifacts" / "binder"), help="where to build (default %(default)s)")
    p.add_argument("--reuse", action="store_true", help="reuse an environment built before in --dest")
    p.add_argument("--limits", choices=["binder", "none", "both"], default="binder")
    p.add_argument("lessons", nargs="*", help="lessons to run (default: all)")
    a = p.parse_args(argv)
    dest = Path(a.dest)
    env = reuse(dest) if a.reuse and (dest / "notes.json").exists() else build(dest)
    settings = {"binder": BINDER, "none": NONE}
    if a.limits != "both":
        settings = {a.limits: settings[a.limits]}
    which = [env.repo / x for x in a.lessons] or None
    rows = run_course(env, settings, which)
    (dest / "results.json").write_text(json.dumps({"notes": env.notes, "rows": rows}, indent=1))
    print("\n".join(f"note: {n}" for n in env.notes))
    with Confinement(BINDER) as box:
        print(f"limits: {box.describe()}")
    print(table(rows))
    return 0 if all(r[s]["returncode"] == 0 for r in rows for s in settings) else 1


if __name__ == "__main__":
    sys.exit(main())
