# distlab: two commands.
#   make lab        create .venv, install everything, open JupyterLab on the first lesson
#                   (HEADLESS=1 make lab prints the URL instead of opening a browser)
#   make test       create .venv if needed, install everything, run the whole test suite
# and four for the people who change the course:
#   make notebooks  sync each lesson's (and solution's) .ipynb with its text twin (notebooks_text/,
#                   course/solutions_text/), then re-execute them all, in order, in one sitting
#   make nbval      run every lesson and solution under nbval here, without Binder's limits
#                   (make test runs them under nbval once, inside the simulated Binder: tests/test_binder.py)
#   make bench      run every benchmark in bench/ (each prints its GOAL lines)
#   make lint       ruff, as make test runs it
PY := .venv/bin/python
PORT ?= 8888
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
LINTED := distlab tests bench tools notebooks_text course

.PHONY: lab test setup setup-test notebooks nbval bench lint clean

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
	$(PY) -m ruff check $(LINTED)
	$(PY) -m pytest tests -v -rs --durations=40

lint: setup-test
	$(PY) -m ruff check $(LINTED)

LESSONS := notebooks/*.ipynb course/solutions/*.ipynb

notebooks: setup-test
	$(PY) tools/run_course.py     # the lessons in order, then the solutions, in one sitting
	$(PY) tools/course_time.py >/dev/null   # course/README.md: reading and run times from these runs

nbval: setup-test
	$(PY) -m pytest $(LESSONS) $(NBVAL) -v

bench: setup-test
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf .venv .pytest_cache artifacts
