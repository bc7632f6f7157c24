#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + Gloo, no MPI) once into a wheel cache, then install it.
# Usage: tools/install_horovod.sh PYTHON
# Two fixes are needed with torch 2.13 and CMake 4 (see ../shared/notes/platform.md):
#   CMAKE_POLICY_VERSION_MINIMUM=3.5   (bundled Gloo asks for an old cmake policy)
#   CXX=tools/cxx17                    (turns -std=c++14 into -std=c++17)
set -euo pipefail
PY=${1:-.venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${DISTLAB_WHEEL_CACHE:-$HOME/.cache/distlab/wheels}
mkdir -p "$CACHE"
if "$PY" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod: already installed"; exit 0
fi
TORCH_VER=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
WHEEL_DIR="$CACHE/horovod-0.28.1-torch$TORCH_VER"
if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  echo "building Horovod 0.28.1 against torch $TORCH_VER, about 10 minutes (once; cached in $WHEEL_DIR)"
  # the versions Binder pins (binder/requirements.txt), so that a build here is the build there
  PINS=$(mktemp)
  grep -E '^[A-Za-z0-9_.-]+==' "$HERE/../binder/requirements.txt" | grep -v '^torch==' > "$PINS" || true
  "$PY" -m pip install -q -c "$PINS" cmake cloudpickle psutil pyyaml packaging wheel setuptools
  rm -f "$PINS"
  mkdir -p "$WHEEL_DIR.tmp"
  start=$(date +%s)
  PATH="$(dirname "$PY"):$PATH" \
  CXX="$HERE/cxx17" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  MAKEFLAGS="-j$(nproc)" \
    "$PY" -m pip wheel --no-build-isolation --no-deps -w "$WHEEL_DIR.tmp" horovod==0.28.1 \
    > "$CACHE/horovod-build.log" 2>&1 || {
      echo "ERROR: the Horovod build failed; the last lines of $CACHE/horovod-build.log:" >&2
      tail -n 30 "$CACHE/horovod-build.log" >&2
      echo "Every lesson except the Horovod one still works without it." >&2
      exit 1; }
  rm -rf "$WHEEL_DIR"; mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
  echo "horovod: built in $(( $(date +%s) - start )) s"
fi
"$PY" -m pip install -q "$WHEEL_DIR"/horovod-*.whl
"$PY" -m pip install -q cloudpickle psutil pyyaml packaging
echo "horovod: installed from $WHEEL_DIR"
