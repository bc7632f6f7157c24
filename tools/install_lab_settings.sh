#!/usr/bin/env bash
# JupyterLab as the learner meets it (issue 26): install the project's defaults for JupyterLab's
# settings, binder/overrides.json, where JupyterLab reads them: overrides.json in its application
# settings folder (<app dir>/settings, the app dir being <prefix>/share/jupyter/lab unless
# JUPYTERLAB_DIR says otherwise).  They are defaults: a learner's own settings still win.
#   - fetchNews "false": no "Would you like to get notified about official Jupyter news?" toast on a
#     fresh start, and no request to jupyter.org (Binder and classrooms may be offline);
#   - checkForUpdates false: no "a newer version is available" toast for the pinned JupyterLab.
# Used by tools/setup.sh (make lab, make test) and binder/postBuild.  Usage: install_lab_settings.sh PYTHON
set -euo pipefail
PY=${1:-python}
cd "$(dirname "$0")/.."
DEST=$("$PY" -c "import os; from jupyterlab.commands import get_app_dir; print(os.path.join(get_app_dir(), 'settings'))")
mkdir -p "$DEST"
cp binder/overrides.json "$DEST/overrides.json"
echo "JupyterLab settings: $DEST/overrides.json"
