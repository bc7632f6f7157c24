#!/usr/bin/env bash
# Install DeepSpeed (lesson 08) against the torch that is already installed.
# Usage: tools/install_deepspeed.sh PYTHON
# Why not a plain dependency: DeepSpeed's setup imports torch, so pip's isolated build
# environment would fetch a torch of its own (a multi-GB CUDA build on a CPU machine).
# --no-build-isolation builds it against ours, and the constraint keeps ours installed.
# No ops are compiled by pip (DS_BUILD_OPS=0).  The one DeepSpeed needs on CPU (shared-memory
# communication) it would compile the first time a job starts, about a minute; it is compiled
# here instead, into the environment's own folder (distlab points TORCH_EXTENSIONS_DIR there,
# so two environments on one machine do not rebuild each other's copy).
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.19.8
if ! "$PY" -c "import deepspeed" 2>/dev/null; then
  TORCH_VER=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
  CONSTRAINTS=$(mktemp)
  trap 'rm -f "$CONSTRAINTS"' EXIT
  echo "torch==$TORCH_VER" > "$CONSTRAINTS"
  echo "installing DeepSpeed $VERSION against torch $TORCH_VER"
  DS_BUILD_OPS=0 "$PY" -m pip install -q --no-build-isolation -c "$CONSTRAINTS" "deepspeed==$VERSION"
fi
"$PY" - <<'PYTHON'
import time
from distlab.zero import deepspeed_zero

reason = deepspeed_zero.available()          # sets DS_ACCELERATOR and TORCH_EXTENSIONS_DIR
if reason:
    raise SystemExit(reason)
t0 = time.time()
print("deepspeed:", deepspeed_zero.prebuild(), f"({time.time() - t0:.0f} s)")
PYTHON
