"""The two commands of the README, and the CPU-only promises of the set-up."""
import os
import re
import signal
import subprocess
import time
import urllib.request

from helpers import ROOT
from distlab.processes.arguments import free_port


def test_make_lab_headless_serves_the_course():
    port = free_port()
    proc = subprocess.Popen(["make", "lab", "HEADLESS=1", f"PORT={port}"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url, lines, deadline = None, [], time.time() + 300
        while time.time() < deadline and url is None:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line)
            m = re.search(rf"(http://127\.0\.0\.1:{port}/lab\S*\?token=(\w+))", line)
            url = m and m.group(1)
        assert url, "".join(lines[-30:])
        token = url.rsplit("token=", 1)[1]
        body, deadline = None, time.time() + 60
        while body is None:      # the URL is printed a moment before every handler is ready
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/notebooks?token={token}") as r:
                    body = r.read().decode()
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(1)
        assert "00_welcome.ipynb" in body and "01_data_parallelism.ipynb" in body
    finally:
        os.killpg(proc.pid, signal.SIGTERM)     # make and the server it started
        proc.wait(30)


def test_cpu_installs_pin_the_cpu_torch_build():
    setup = open(os.path.join(ROOT, "tools", "setup.sh")).read()
    assert "torch==2.13.0" in setup
    binder = open(os.path.join(ROOT, "binder", "requirements.txt")).read()
    assert "torch==2.13.0+cpu" in binder and "download.pytorch.org/whl/cpu" in binder
    import torch
    assert torch.__version__.startswith("2.13.0") and not torch.version.cuda


def test_doctor_reports_the_machine_and_horovod():
    out = subprocess.run([os.path.join(ROOT, ".venv", "bin", "distlab"), "doctor"], capture_output=True,
                         text=True, check=True).stdout
    assert f"CPU cores: {os.cpu_count()}" in out
    assert "torch.distributed: gloo yes" in out
    assert "Horovod 0.28.1: controllers gloo; tensor operations gloo" in out
