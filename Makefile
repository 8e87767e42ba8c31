# make demo / make test work on a fresh machine: they create .venv and install berds first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines take the light torch build (on this image it lies on local disk); override on GPU hosts.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= all,dev
# Test files are shared out between this many pytest-xdist workers (a file's tests stay together in one).
TEST_WORKERS ?= 2

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tests/plugin_pkg/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e tests/plugin_pkg
	touch $@

demo: setup
	$(VENV)/bin/berds demo

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
