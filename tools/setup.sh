#!/usr/bin/env bash
# Create .venv and install everything distlab needs.
#   tools/setup.sh lab    what a learner needs (JupyterLab, the library, Horovod if it builds)
#   tools/setup.sh test   the above plus pytest, nbval, Playwright and Debian's chromium
# Safe to run again: each step is skipped when already done.
set -euo pipefail
WHAT=${1:-lab}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python
LOG=.venv/setup.log
quiet() {  # run a step with its output in .venv/setup.log; show the end of it if it fails
  if ! "$@" >>"$LOG" 2>&1; then echo "setup: FAILED: $*  (end of $LOG:)" >&2; tail -n 40 "$LOG" >&2; exit 1; fi
}
quiet "$PY" -m pip install --upgrade pip
if ! "$PY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: GPU found, installing the default (CUDA) torch build"
    quiet "$PY" -m pip install "torch>=2.3"
  else
    # CPU machine: pin the CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
    echo "setup: no GPU, installing torch==2.13.0 (CPU)"
    quiet "$PY" -m pip install torch==2.13.0
  fi
fi
if [ "$WHAT" = test ]; then EXTRAS="lab,test"; else EXTRAS="lab"; fi
echo "setup: installing distlab[$EXTRAS] and its dependencies"
# The versions Binder installs (binder/requirements.txt) are the ones tested: use them as constraints
# (torch left out: it was chosen above, CPU or CUDA).
PINS=$(mktemp)
grep -E '^[A-Za-z0-9_.-]+==' binder/requirements.txt | grep -v '^torch==' > "$PINS"
quiet "$PY" -m pip install -e ".[$EXTRAS]" -c "$PINS"
rm -f "$PINS"
quiet "$PY" -m ipykernel install --sys-prefix --name python3
# JupyterLab's defaults for this course (no news toast, no update check): binder/overrides.json
quiet tools/install_lab_settings.sh "$PY"
# Horovod: required in this repository's own set-up and CI; optional for a learner.
if [ "$WHAT" = test ]; then
  tools/install_horovod.sh "$PY"
else
  tools/install_horovod.sh "$PY" || echo "setup: Horovod is not available; every other lesson works without it."
fi
# DeepSpeed (lesson 08): required here too, optional for a learner (the lesson says what is missing).
if [ "$WHAT" = test ]; then
  quiet tools/install_deepspeed.sh "$PY"
else
  tools/install_deepspeed.sh "$PY" >>"$LOG" 2>&1 || echo "setup: DeepSpeed is not available; lesson 08 says so and runs the rest."
fi
if [ "$WHAT" = test ]; then
  # Debian's chromium for the browser tests; sshd for the multi-node Horovod test (horovodrun
  # reaches the second "node" over ssh); iproute2 for the network namespaces those tests make
  NEED=""
  [ -x /usr/bin/chromium ] || NEED="$NEED chromium"
  [ -x /usr/sbin/sshd ] || NEED="$NEED openssh-server"
  command -v ip >/dev/null 2>&1 || NEED="$NEED iproute2"
  if [ -n "$NEED" ]; then
    echo "setup: installing$NEED (apt-get)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $NEED >/dev/null
  fi
fi
echo "setup: done ($WHAT)"
