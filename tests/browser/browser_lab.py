"""The real-browser suite's JupyterLab server: started, driven through its REST API, stopped.

Why a real browser: nbval checks what a kernel prints, but a learner sees what JupyterLab draws.
Widgets only exist in the browser (a missing widget manager shows "Loading widget..." or a text
repr like ``VBox(children=...)``), so the only honest check is to open each lesson the way a
learner does, press Run All, and look.

The server serves a temporary copy of ``notebooks/`` (autosave never writes outputs back into the
repository), with its own settings, workspaces, runtime and config folders (no news toast, no
restored tabs from an earlier run). Every test gets a fresh copy of its notebook with the outputs
cleared, so whatever the page shows was produced in this run.

``DISTLAB_BROWSER_NOTEBOOKS=/some/folder`` points the suite at another folder of notebooks
(used to check that the suite itself fails on broken notebooks).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import psutil

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]

# JupyterLab user settings written into the server's private settings folder
# (no news toast setting here: the project's own binder/overrides.json must keep the "Would you like
# to get notified about official Jupyter news?" toast away, as a learner meets JupyterLab)
LAB_SETTINGS = {
    # attach every cell to the page, so every output is in the DOM and in the screenshots
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def notebook_dir() -> Path:
    return Path(os.environ.get("DISTLAB_BROWSER_NOTEBOOKS", REPO / "notebooks")).resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running ``jupyter lab`` and the few REST calls the tests need.

    ``binder``: a simulated Binder (tools/binder_sim.BinderEnv): the server is that environment's
    JupyterLab, started through its ``binder/start`` as repo2docker starts it, so the kernel and
    every rank run with the packages built from ``binder/`` alone.  ``prefix`` and ``host``: a
    command prefix that puts the server in a network namespace of its own and the address it
    listens on there (binder_sim.own_network(reachable=True)).
    """

    def __init__(self, base: Path, source: Path, binder=None, prefix=(), host: str = "127.0.0.1"):
        self.source = source
        self.root = base / "root"
        self.log_path = base / "jupyter.log"
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.url = f"http://{host}:{self.port}"
        shutil.copytree(source, self.root,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        settings = base / "user-settings"
        for rel, values in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        for d in ("workspaces", "config", "data", "runtime"):
            (base / d).mkdir()

        env = {k: v for k, v in (binder.environ() if binder else os.environ).items() if not k.startswith("PYTEST_")}
        # ipykernel forwards the output of worker processes only when PYTEST_CURRENT_TEST is unset
        python, start = (binder.python, [str(binder.repo / "binder" / "start")]) if binder else (sys.executable, [])
        env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        env["JUPYTER_CONFIG_DIR"] = str(base / "config")   # no ~/.jupyter config
        env["JUPYTER_DATA_DIR"] = str(base / "data")       # no user-level kernels or workspaces
        env["JUPYTER_RUNTIME_DIR"] = str(base / "runtime")
        cmd = [
            *prefix, *start, str(python), "-m", "jupyter", "lab", "--no-browser",
            f"--ServerApp.ip={host}", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--ServerApp.allow_remote_access={host != '127.0.0.1'}",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--ServerApp.open_browser=False",
            f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}",
        ]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.root, start_new_session=True)
        self._wait_until_up(timeout=120)

    # -- REST -------------------------------------------------------------------------------
    def api(self, method: str, path: str):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kernel_processes(self) -> list[psutil.Process]:
        """Everything the server started: kernels and the workers they launched."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def shut_down_kernels(self, timeout: float = 30) -> list[str]:
        """Delete every session (shuts its kernel down); return processes that did not exit."""
        procs = self.kernel_processes()
        for s in self.api("GET", "/api/sessions"):
            try:
                self.api("DELETE", f"/api/sessions/{s['id']}")
            except urllib.error.HTTPError:
                pass
        _, alive = psutil.wait_procs(procs, timeout=timeout)
        left = []
        for p in alive:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
            except psutil.NoSuchProcess:
                pass
        return left

    def fresh_copy(self, name: str) -> nbformat.NotebookNode:
        """Copy ``name`` from the source folder with outputs, counts and widget state cleared."""
        nb = nbformat.read(self.source / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, self.root / name)
        return nb

    def stop(self) -> None:
        procs = self.kernel_processes()
        if self.proc.poll() is None:
            try:
                self.shut_down_kernels(timeout=20)
            except (urllib.error.URLError, OSError):
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        # whatever the server started and left behind, by pid
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self._log.close()
