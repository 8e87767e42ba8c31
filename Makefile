# make demo / make test work on a fresh machine: they create .venv and install berds first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines take the light torch build (on this image it lies on local disk); override on GPU hosts.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= all,dev
# Test files are shared out between this many pytest-xdist workers (a file's tests stay together in one).
TEST_WORKERS ?= 2
# LOCKED=1 (the default) installs the versions the test suite passed with, from requirements/lock-pyX.Y.txt;
# LOCKED=0 lets pip take the newest versions pyproject.toml allows. `make lock` refreshes the lock.
LOCKED ?= 1
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
LOCK := requirements/lock-py$(PYVER).txt
ifeq ($(LOCKED),1)
PIN := -c $(LOCK)
STAMP_DEPS := $(LOCK)
else
PIN :=
STAMP_DEPS :=
endif

.PHONY: setup demo test bench lock clean

setup: $(VENV)/.installed-locked$(LOCKED)

$(LOCK):
	@echo "No lock of tested versions for Python $(PYVER) ($(LOCK)). Install unpinned with 'make ... LOCKED=0'," >&2
	@echo "or write one for this Python with 'make lock' (scripts/update_lock.sh)." >&2
	@exit 2

$(VENV)/.installed-locked$(LOCKED): pyproject.toml tests/plugin_pkg/pyproject.toml $(STAMP_DEPS)
	rm -f $(VENV)/.installed-locked*
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip $(PIN)
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(PIN)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]" "$(TORCH_SPEC)" $(PIN)
	$(PY) -m pip install -q -e tests/plugin_pkg $(PIN)
	touch $@

demo: setup
	$(VENV)/bin/berds demo

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

# A fresh venv with the newest allowed versions, the test suite on it, then its versions written to $(LOCK).
lock:
	PYTHON=$(PYTHON) TORCH_SPEC="$(TORCH_SPEC)" TEST_WORKERS=$(TEST_WORKERS) bash scripts/update_lock.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
