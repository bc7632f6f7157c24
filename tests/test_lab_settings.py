"""JupyterLab as the learner meets it (issue 26): no "Jupyter news" toast on a fresh start.

JupyterLab 4 asks every new user "Would you like to get notified about official Jupyter news?"
while its notification setting ``fetchNews`` is "none" (ask).  The project ships its own default,
binder/overrides.json, and tools/install_lab_settings.sh installs it where JupyterLab reads
defaults (``<app dir>/settings/overrides.json``) for `make lab` (tools/setup.sh) and Binder
(binder/postBuild).  Checked here: the file against JupyterLab's own schema, the install step into
a fresh JupyterLab folder, and the setting a real JupyterLab server (the environment's, as
`make lab` starts it, with no user settings) serves to the page.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from jupyterlab.commands import get_app_dir
from jupyterlab_server.settings_utils import get_settings

from helpers import ROOT
from distlab.processes.arguments import free_port

SHIPPED = Path(ROOT) / "binder" / "overrides.json"
PLUGIN = "@jupyterlab/apputils-extension:notification"
INSTALL = Path(ROOT) / "tools" / "install_lab_settings.sh"


def schemas_dir() -> str:
    return os.path.join(get_app_dir(), "schemas")


def test_the_shipped_settings_turn_the_news_off_and_fit_jupyterlabs_schema():
    overrides = json.loads(SHIPPED.read_text())
    assert overrides[PLUGIN]["fetchNews"] == "false", "fetchNews must be the string 'false' (Never), not 'none' (Ask)"
    assert overrides[PLUGIN]["checkForUpdates"] is False
    schema = json.loads(Path(schemas_dir(), "@jupyterlab", "apputils-extension", "notification.json").read_text())
    jsonschema.validate(overrides[PLUGIN], schema)       # a misspelt key or value fails here, not silently in the lab


def test_the_install_step_puts_them_where_jupyterlab_reads_defaults(tmp_path):
    app_dir = tmp_path / "lab"
    done = subprocess.run(["bash", str(INSTALL), sys.executable], capture_output=True, text=True,
                          env=dict(os.environ, JUPYTERLAB_DIR=str(app_dir)))
    assert done.returncode == 0, done.stderr
    assert json.loads((app_dir / "settings" / "overrides.json").read_text()) == json.loads(SHIPPED.read_text())
    # what jupyterlab_server makes of it: the plugin's defaults, with no user settings at all
    (tmp_path / "user").mkdir()
    found, warnings = get_settings(str(app_dir / "settings"), schemas_dir(), str(tmp_path / "user"), PLUGIN)
    assert not any(warnings), warnings
    assert found["schema"]["properties"]["fetchNews"]["default"] == "false"
    assert found["settings"] == {}


@pytest.mark.parametrize("script", ["tools/setup.sh", "binder/postBuild"])
def test_make_lab_and_binder_install_them(script):
    assert "tools/install_lab_settings.sh" in (Path(ROOT) / script).read_text()


def test_a_fresh_jupyterlab_serves_no_news(tmp_path):
    """The environment's JupyterLab (set up by tools/setup.sh), started with empty user settings."""
    port, token = free_port(), "distlab-settings-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}"]
    if os.getuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/{PLUGIN}?token={token}"
        deadline, body = time.time() + 120, None
        while body is None:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    body = json.loads(r.read())
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (tmp_path / "lab.log").read_text()[-3000:]
                time.sleep(1)
        assert body["schema"]["properties"]["fetchNews"]["default"] == "false", (
            "this environment's JupyterLab asks about Jupyter news: run tools/install_lab_settings.sh (make lab does)")
        assert body["schema"]["properties"]["checkForUpdates"]["default"] is False
        assert body["settings"] == {}, "the server should have started with no user settings"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
