# distlab: two commands.
#   make lab    create .venv, install everything, open JupyterLab on the first lesson
#               (HEADLESS=1 make lab prints the URL instead of opening a browser)
#   make test   create .venv if needed, install everything, run the whole test suite
PY := .venv/bin/python
PORT ?= 8888
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test setup setup-test bench clean

setup:
	bash tools/setup.sh lab

setup-test:
	bash tools/setup.sh test

lab: setup
	$(PY) -m jupyter lab --ServerApp.root_dir=$(CURDIR) --ServerApp.port=$(PORT) \
	  $(if $(HEADLESS),--no-browser --ServerApp.ip=127.0.0.1,) \
	  $(if $(filter 0,$(shell id -u)),--allow-root,) \
	  notebooks/00_welcome.ipynb

test: setup-test
	$(PY) -m pytest tests notebooks $(NBVAL) -v -rs --durations=25

bench: setup-test
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf .venv .pytest_cache artifacts
