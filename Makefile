# Set-up and entry points. `make demo` and `make test` do all set-up on a fresh machine.
VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
PYTHON    ?= python3

.PHONY: setup image demo test test-unit lint bench nightly clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install-system-packages.sh
	scripts/install-system-packages.sh
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip uninstall -q -y kafkaesque 2>/dev/null || true  # the distribution's name before 0.1.0 was taken on PyPI
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

# The node image for the docker cluster (debootstrap + docker import + offline wheels); reused
# while its inputs are unchanged, rebuilt when they change.
image: setup
	$(PY) -m kafkaesque_harness.clusters.image

# A real test on the default cluster: queue workload, kill and pause faults, 60 s.
demo: setup
	@if docker info >/dev/null 2>&1; then $(PY) -m kafkaesque_harness.clusters.image; fi
	$(VENV)/bin/kafkaesque run --workload queue --nemesis kill,pause --time-limit 60

# The test suite (unit, property and integration), as CI runs it, within 30 minutes here: every test
# but the few long end-to-end runs marked `nightly`, which `make nightly` runs.
test: setup
	$(PY) scripts/import_graph.py --check
	$(PY) -m kafkaesque_harness.clusters.image
	$(VENV)/bin/pytest -q -m "not nightly" --durations=30 tests

test-unit: setup
	$(VENV)/bin/pytest -q tests/unit

lint: setup
	$(VENV)/bin/ruff check .

# The nightly CI: the long end-to-end tests `make test` leaves out (marked `nightly`, about 17 minutes),
# then the campaign campaigns/nightly.toml (the default broker and each historic flaw under kill, pause,
# partition and lossy-crash, within a 60-minute budget). Writes junit.xml and index.html under
# store/campaigns/nightly/latest/; exit: the tests' when they fail, else the campaign's (0 all valid,
# 1 any invalid, 2 any unknown).
nightly: setup
	@if docker info >/dev/null 2>&1; then $(PY) -m kafkaesque_harness.clusters.image; fi
	$(VENV)/bin/pytest -q -m nightly tests
	$(VENV)/bin/kafkaesque campaign campaigns/nightly.toml --no-panel

clean:
	rm -rf $(VENV) build *.egg-info
