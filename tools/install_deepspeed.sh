#!/usr/bin/env bash
# Install DeepSpeed (lesson 08) against the torch that is already installed.
# Usage: tools/install_deepspeed.sh PYTHON
# Why not a plain dependency: DeepSpeed's setup imports torch, so pip's isolated build
# environment would fetch a torch of its own (a multi-GB CUDA build on a CPU machine).
# --no-build-isolation builds it against ours, and the constraint keeps ours installed.
# No ops are compiled now (DS_BUILD_OPS=0); the one it needs on CPU (shared-memory
# communication) is compiled by DeepSpeed the first time it runs, once per machine.
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.19.8
if "$PY" -c "import deepspeed" 2>/dev/null; then
  echo "deepspeed: already installed"; exit 0
fi
TORCH_VER=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==$TORCH_VER" > "$CONSTRAINTS"
echo "installing DeepSpeed $VERSION against torch $TORCH_VER"
DS_BUILD_OPS=0 "$PY" -m pip install -q --no-build-isolation -c "$CONSTRAINTS" "deepspeed==$VERSION"
DS_ACCELERATOR=cpu "$PY" -c "import deepspeed; print('deepspeed', deepspeed.__version__, 'installed')"
