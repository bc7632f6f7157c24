"""The course on Binder: built from ``binder/`` alone, every lesson run within Binder's limits.

The last tests read a fresh environment built only from the ``binder/`` files (tools/binder_sim.py
says how close that is to repo2docker) and every lesson and solutions notebook run in it under nbval,
through ``binder/start``, in a cgroup with Binder's 2 GiB memory limit and a one-CPU quota: the
suite's one nbval run of the course, started in the background when the session began
(tests/binder_course.py).  A lesson added later is picked up by the glob.  What was enforced, and
what had to be substituted, is printed in the "binder simulation" section at the end of the test
run; per-lesson times and peaks are written to artifacts/binder/.
"""
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import binder_course  # noqa: E402
import binder_sim  # noqa: E402

REPORT = binder_course.REPORT   # lines for the "binder simulation" section of the terminal summary (conftest.py)
MB = 1024**2
BUILD_ONLY = {"cmake"}          # pinned for Binder's postBuild, absent here when Horovod was not rebuilt


def pins():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, flags=re.M))


def test_binder_pins_every_requirement_to_the_version_the_tests_use():
    found = pins()
    assert {"torch", "numpy", "scikit-learn", "ipywidgets", "jupyterlab", "ipykernel"} <= set(found)
    for name, version in found.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            # only Binder's Horovod build needs cmake; here Horovod may come from the wheel cache
            assert name in BUILD_ONLY, f"binder/requirements.txt pins {name}, which the tests do not have"
            continue
        if name == "torch":              # Binder takes the CPU build; a GPU machine's tests may not
            assert installed.split("+")[0] == version.split("+")[0], (name, installed, version)
        else:
            assert installed == version, f"binder/requirements.txt pins {name}=={version}, the tests use {installed}"


# ---- issue 36: the links into the namespaces shadow none of the host's networks (no Binder build needed) ----
HOME = [{"dst": "default", "gateway": "192.168.1.1", "dev": "wlan0"},          # ip -4 -j route show table all
        {"dst": "192.168.1.0/24", "dev": "wlan0", "scope": "link"},
        {"type": "local", "dst": "127.0.0.0/8", "dev": "lo", "table": "local"},
        {"type": "local", "dst": "192.168.1.20", "dev": "wlan0", "table": "local"}]
HOME_ADDRESSES = [{"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
                  {"ifname": "wlan0", "addr_info": [{"family": "inet", "local": "192.168.1.20", "prefixlen": 24}]}]


def test_a_namespaces_link_takes_a_30_of_the_benchmarking_range_clear_of_the_hosts_routes():
    import ipaddress
    import random

    net = ipaddress.ip_network
    taken = binder_sim.host_networks(HOME, HOME_ADDRESSES)
    assert set(taken) == {net("192.168.1.0/24"), net("127.0.0.0/8"), net("192.168.1.20/32")}    # not the default
    assert binder_sim.free_link(taken) == net("198.18.0.0/30")
    assert binder_sim.free_link(taken, start=5) == net("198.18.0.20/30")
    # a lab network inside the range, a local address in it, a link being made (its address, no route yet)
    lab = HOME + [{"dst": "198.18.0.0/24", "dev": "eth1"}, {"type": "local", "dst": "198.18.1.1", "table": "local"}]
    making = [{"ifname": "dlv1h0", "addr_info": [{"family": "inet", "local": "198.18.1.6", "prefixlen": 30}]}]
    assert binder_sim.free_link(binder_sim.host_networks(lab, making)) == net("198.18.1.8/30")
    # from the last /30 on, it wraps round to the first free one
    last = [{"dst": "198.19.255.252/30"}, {"dst": "198.18.0.0/30"}]
    assert binder_sim.free_link(binder_sim.host_networks(last, []), start=binder_sim.LINKS - 1) == net("198.18.0.4/30")
    # IPv6 and unreadable destinations are not IPv4 networks in use
    assert binder_sim.host_networks([{"dst": "fd00::/64"}, {"dst": "nonsense"}, {"type": "blackhole"}], []) == []
    # a VPN that routes the whole range (or more): no /30 is free, and the error says why
    for covering in ("198.18.0.0/15", "198.0.0.0/8"):
        with pytest.raises(RuntimeError, match=r"no free /30 in 198\.18\.0\.0/15 .*cover all of it: "
                                               + covering.replace(".", r"\.")):
            binder_sim.free_link(binder_sim.host_networks(HOME + [{"dst": covering, "dev": "tun0"}], []))
    # whatever the host uses, the chosen /30 is inside the range and overlaps none of it
    rng = random.Random(36)
    for _ in range(200):
        used = [net((int(binder_sim.LINK_RANGE.network_address) + rng.randrange(2**17), rng.randint(17, 32)),
                    strict=False) for _ in range(rng.randint(1, 20))]
        try:
            link = binder_sim.free_link(used, start=rng.randrange(binder_sim.LINKS))
        except RuntimeError:             # only where they could cover the range
            assert sum(u.num_addresses for u in used) >= binder_sim.LINK_RANGE.num_addresses, used
            continue
        assert link.prefixlen == 30 and link.subnet_of(binder_sim.LINK_RANGE)
        assert not any(link.overlaps(u) for u in used), (link, used)


def test_the_link_chosen_on_this_host_overlaps_none_of_its_networks():
    """The same, read from this machine's own tables (``ip``: read only)."""
    import shutil

    if shutil.which("ip") is None:
        pytest.skip("no ip command here")
    taken = binder_sim.host_networks(binder_sim._ip_json("route", "show", "table", "all"),
                                     binder_sim._ip_json("addr", "show"))
    assert taken, "a host has a route at least to its loopback"
    link = binder_sim.free_link(taken)
    assert link.subnet_of(binder_sim.LINK_RANGE) and not any(link.overlaps(t) for t in taken)


def test_binder_files_are_what_repo2docker_runs():
    binder = ROOT / "binder"
    for script in ("postBuild", "start"):
        path = binder / script
        assert os.access(path, os.X_OK), f"binder/{script} must be executable (repo2docker runs it directly)"
        assert path.read_text().startswith("#!/usr/bin/env bash")
    assert 'exec "$@"' in (binder / "start").read_text()          # start must hand over to the server
    assert re.fullmatch(r"python-3\.\d+", (binder / "runtime.txt").read_text().strip())
    assert binder_sim.apt_packages(ROOT) == ["build-essential"]
    post = (binder / "postBuild").read_text()
    assert "tools/install_horovod.sh" in post and "tools/install_deepspeed.sh" in post


def test_without_the_cpu_index_only_its_line_is_dropped():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    same, note = binder_sim.requirements_for_here(text, reachable=True)
    assert same == text and note is None
    changed, note = binder_sim.requirements_for_here(text, reachable=False)
    assert binder_sim.CPU_INDEX not in changed and "torch==2.13.0+cpu" in changed
    assert [line for line in text.splitlines() if binder_sim.CPU_INDEX not in line] == changed.splitlines()
    assert "cannot be reached" in note


def test_the_binder_processes_inherit_nothing_from_the_test_process(monkeypatch, tmp_path):
    """A fresh container has none of what the test process picked up: a test that called
    deepspeed_zero.available() set TORCH_EXTENSIONS_DIR to *this* environment's folder, and the Binder
    kernel that inherited it compiled DeepSpeed's op there again, inside Binder's memory limit (CI run of
    24e4d42: lesson 08 killed by the OOM killer mid-compile, and the lock it left hung `make lab`)."""
    ours = os.path.join(sys.prefix, "bin")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "5")
    monkeypatch.setenv("PATH", ours + os.pathsep + "/usr/bin")
    env = binder_sim.BinderEnv(repo=tmp_path / "repo", venv=tmp_path / "env").environ()
    assert not {"TORCH_EXTENSIONS_DIR", "DS_ACCELERATOR", "HOROVOD_GLOO_TIMEOUT_SECONDS"} & set(env)
    assert env["PATH"].split(os.pathsep) == [str(tmp_path / "env" / "bin"), "/usr/bin"]


def test_the_course_is_every_lesson_and_solution():
    names = [p.relative_to(ROOT).as_posix() for p in binder_sim.lessons()]
    assert names[0] == "notebooks/00_welcome.ipynb"
    assert len(names) == len(list(ROOT.glob("notebooks/*.ipynb"))) + len(list(ROOT.glob("course/solutions/*.ipynb")))
    # the solutions run here under nbval; the lessons in the browser, in the same simulated Binder
    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    from browser_lab import notebook_dir

    in_browser = {f"notebooks/{p.name}" for p in notebook_dir().glob("*.ipynb")}
    assert set(SOLUTIONS) | in_browser == set(names) and not set(SOLUTIONS) & in_browser


def run_python(code, limits, **kw):
    return binder_sim.measure([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, limits=limits, **kw)


def test_a_run_past_the_memory_limit_is_stopped():
    m = run_python("""
        import numpy as np
        blocks = [np.ones(64 * 1024**2 // 8) for _ in range(12)]     # 768 MiB, in 64 MiB steps
        print("still alive")
        """, binder_sim.Limits(memory_bytes=256 * MB, cpus=None))
    REPORT.append(f"memory limit check: {m.enforced}")
    assert m.returncode != 0 and "still alive" not in m.output
    assert m.oom_kills >= 1 or m.watchdog_killed
    assert m.peak_rss_bytes <= 300 * MB


def test_the_peak_sums_every_process_of_the_run():
    m = run_python("""
        import subprocess, sys, time
        hold = "import numpy as np, time; a = np.ones(150 * 1024**2 // 8); time.sleep(1.5)"
        children = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(2)]
        for c in children:
            c.wait()
        """, binder_sim.Limits(memory_bytes=1024 * MB, cpus=None))
    assert m.returncode == 0, m.output
    assert m.peak_rss_bytes >= 300 * MB and m.peak_processes >= 3
    assert 300 * MB <= m.peak_pss_bytes <= m.peak_rss_bytes
    assert m.left_behind == []


def test_an_orphan_left_running_is_found_and_stopped():
    m = run_python("""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        """, binder_sim.BINDER, grace=1.0)
    assert m.returncode == 0
    assert m.enforced.startswith("cgroup"), "this machine lets us make cgroups: the orphan must be found"
    assert len(m.left_behind) == 1 and "time.sleep(60)" in m.left_behind[0]
    pid = int(m.left_behind[0].split()[0])
    time.sleep(0.5)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_cpu_quota_holds_busy_processes_back():
    m = run_python("""
        import os, subprocess, sys
        spin = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"
        print("cores", len(os.sched_getaffinity(0)))
        children = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
        for c in children:
            c.wait()
        """, binder_sim.Limits(memory_bytes=None, cpus=0.5))
    assert m.returncode == 0, m.output
    REPORT.append(f"cpu quota check: {m.enforced}; throttled in {m.throttled_periods} periods of 100 ms")
    if m.throttled_periods is not None:     # a cgroup: 2 CPU-seconds of work in 0.5 CPU must be throttled
        assert m.throttled_periods > 0
        assert m.wall_s > 2.0 / 0.5 * 0.8   # CPU time per wall time: what a quota means
    else:                                   # no cgroup: one core by affinity
        assert "cores 1" in m.output


def test_without_a_cgroup_a_watchdog_and_one_core_stand_in():
    limits = binder_sim.Limits(memory_bytes=256 * MB, cpus=1.0)
    m = run_python("""
        import os, numpy as np, time
        print("cores", len(os.sched_getaffinity(0)), flush=True)
        blocks = []
        for _ in range(12):
            blocks.append(np.ones(64 * 1024**2 // 8))
            time.sleep(0.3)
        print("still alive")
        """, limits, cgroup=False)
    assert m.enforced.startswith("no cgroup could be made here") and "watchdog" in m.enforced
    assert "cores 1" in m.output and "still alive" not in m.output
    assert m.watchdog_killed and m.returncode != 0


def test_each_run_has_a_network_of_its_own():
    """Two lessons side by side may both take a fixed port (lessons 09 and 10 do), as two Binder pods may."""
    from concurrent.futures import ThreadPoolExecutor

    code = ("import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', 29500))\ns.listen()\n"
            "print('bound 29500', flush=True)\ntime.sleep(3)")
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: binder_sim.measure([sys.executable, "-c", code], cwd=ROOT,
                                                          limits=binder_sim.NONE, network=True), range(2)))
    for m in runs:
        assert m.returncode == 0 and "bound 29500" in m.output, m.output
        assert m.enforced.endswith("network: a network namespace of its own (loopback only)"), m.enforced
    names = {m.command[3] for m in runs}                 # ip netns exec NAME ...: one each
    assert len(names) == 2 and all(name.startswith(f"dlbinder-{os.getpid()}-") for name in names), names
    # (the lessons of the background course have namespaces of their own meanwhile: only these two must go)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not names & set(listed), "the namespaces must be removed"


def test_distlab_sees_the_quota_of_the_group_it_runs_in():
    """Ranks are not bound to cores under a quota (cores.bind_to_cores): distlab must see it here too."""
    m = run_python("from distlab.processes.cores import cpu_quota; print('quota', cpu_quota())", binder_sim.BINDER)
    assert m.returncode == 0, m.output
    assert "quota 1.0" in m.output


# ---------------------------------------------------------------- the simulated launch

@pytest.fixture(scope="module")
def binder_env(binder_course_run):
    """The simulated Binder, built in the background since the session began (tests/binder_course.py:
    conftest.py starts it once the tests are collected, and deletes it, 1.7 GB, when they end)."""
    env = binder_course_run.env()
    with binder_sim.Confinement(binder_sim.BINDER) as box:
        REPORT.append(f"limits: {box.describe()}; the lessons run in the browser one at a time, the solutions "
                      f"one at a time beside them once the other tests are done, up to "
                      f"{binder_course_run.side_by_side} side by side, each in its own group")
    return env


# the lessons run in the browser inside the simulated Binder (tests/browser/browser_course.py)
SOLUTIONS = [p.relative_to(ROOT).as_posix() for p in binder_sim.lessons() if p.parent.name == "solutions"]


@pytest.mark.binder
@pytest.mark.timeout(3600)              # the wait includes the environment's build
@pytest.mark.parametrize("lesson", SOLUTIONS)
def test_lesson_runs_on_binder(binder_env, lesson):
    """Every solutions notebook under nbval within Binder's limits: its one run in the suite (each
    lesson's one run is in the browser, in the same simulated Binder: tests/browser/)."""
    m = binder_course.current().result(lesson)
    REPORT.append(f"{lesson}: {'passed' if m.returncode == 0 else 'FAILED'} in {m.wall_s:.1f} s, peak "
                  f"{m.peak_pss_gb:.2f} GB summed PSS, {m.peak_gb:.2f} GB summed RSS ({m.peak_processes} processes)"
                  + (f", cgroup peak {m.group_peak_bytes / 1e9:.2f} GB" if m.group_peak_bytes else ""))
    out = ROOT / "artifacts" / "binder" / "test"
    out.mkdir(parents=True, exist_ok=True)
    (out / (Path(lesson).stem + ("-solution" if "solutions" in lesson else "") + ".json")).write_text(
        json.dumps({"lesson": lesson, "wall_s": m.wall_s, "peak_gb": m.peak_gb, "peak_pss_gb": m.peak_pss_gb,
                    "processes": m.peak_processes,
                    "group_peak_bytes": m.group_peak_bytes, "returncode": m.returncode, "enforced": m.enforced}))
    assert m.oom_kills == 0 and not m.watchdog_killed, f"{lesson} went past Binder's memory limit\n{m.output[-3000:]}"
    assert m.returncode == 0, f"{lesson} failed on the simulated Binder:\n{m.output[-6000:]}"
    assert m.left_behind == [], f"{lesson} left processes running: {m.left_behind}"


# What lesson 03 starts, with fewer cores than ranks: 4 ranks trace the four all-reduces, 2 time
# them, 3 train with the ring (the lesson's own calls, without re-running the whole notebook).
MORE_RANKS_THAN_CORES = """
import distlab
from distlab.comm import collective_runs, measure_costs
from distlab.data_parallel.data_parallel import train, train_single

traces = collective_runs.merge_traces(distlab.launch(collective_runs.trace, world_size=4, numel=8, progress="none"))
assert all(t["results"] == t["dist_results"] for t in traces.values()), traces
measured = distlab.launch(measure_costs.measure, world_size=2, sizes=(1_000, 100_000), repeats=2,
                          ping_pong_bytes=(8, 8_000), ping_pong_repeats=2, progress="none")[0]
assert measured["ping_pong"] and measured["add"]
ring = distlab.launch(train, world_size=3, method="by_hand", collective="ring", model="mlp", width=64,
                      batch_size=16, steps=10, lr=0.2, seed=0, progress="none")
single = train_single(world_size=3, model="mlp", width=64, batch_size=16, steps=10, lr=0.2, seed=0)
assert max(distlab.max_param_difference(r.params, single.params) for r in ring) < 1e-5
print("4, 2 and 3 ranks ran")
"""


@pytest.mark.binder
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("where", ["one core, no cgroup", "half a CPU"])
def test_more_ranks_than_cores_still_train(binder_env, where):
    """The CPU fallback copes with one core or less: lesson 03's launches of 4, 2 and 3 ranks."""
    cgroup = where != "one core, no cgroup"
    limits = binder_sim.Limits(binder_sim.BINDER_MEMORY_BYTES, 1.0 if not cgroup else 0.5)
    m = binder_sim.measure(["./binder/start", str(binder_env.python), "-c", MORE_RANKS_THAN_CORES],
                           cwd=binder_env.repo, env=binder_env.environ(), limits=limits, timeout=900, cgroup=cgroup)
    REPORT.append(f"lesson 03's launches on {where} ({m.enforced}): {'passed' if m.returncode == 0 else 'FAILED'} "
                  f"in {m.wall_s:.1f} s")
    assert m.returncode == 0 and "4, 2 and 3 ranks ran" in m.output, (
        f"lesson 03's launches failed on {where}:\n{m.output[-6000:]}")
    assert m.left_behind == [], m.left_behind


README_URL = "https://mybinder.org/v2/gh/OWNER/REPO/HEAD?urlpath=lab/tree/notebooks/00_welcome.ipynb"


def test_the_readme_says_how_to_launch_it():
    assert README_URL in (ROOT / "README.md").read_text()
    assert (ROOT / "notebooks" / "00_welcome.ipynb").exists()


@pytest.mark.binder
@pytest.mark.timeout(1200)
def test_jupyterlab_opens_on_the_first_lesson(binder_env):
    """What Binder runs at launch: binder/start, then JupyterLab; the README's URL path must open."""
    import socket
    import subprocess
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = README_URL.split("urlpath=")[1]
    with binder_sim.Confinement(binder_sim.BINDER) as box:
        server = subprocess.Popen(
            ["./binder/start", str(binder_env.venv / "bin" / "jupyter"), "lab", "--no-browser", "--allow-root",
             f"--port={port}", "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password="],
            cwd=binder_env.repo, env=binder_env.environ(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            preexec_fn=box.preexec)
        try:
            deadline, page, lesson = time.monotonic() + 60, None, None
            while time.monotonic() < deadline and page is None:
                try:
                    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5).read().decode()
                    lesson = json.loads(urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/contents/notebooks/00_welcome.ipynb", timeout=5).read())
                except OSError:
                    time.sleep(0.5)
            assert page is not None, "JupyterLab did not answer within 60 s"
            assert "JupyterLab" in page
            assert lesson["type"] == "notebook" and lesson["content"]["cells"]
        finally:
            server.terminate()
            server.wait(timeout=30)
