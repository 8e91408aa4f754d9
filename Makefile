# Set-up and entry points. `make demo` and `make test` do all set-up on a fresh machine.
VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
PYTHON    ?= python3

.PHONY: setup image demo test test-unit lint bench nightly sim-nightly clean

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

# The nightly CI: the long end-to-end tests `make test` leaves out (marked `nightly`, about 20 minutes), the
# simulator's sweep of fresh seeds (sim-nightly, below),
# then the campaign campaigns/nightly.toml (the default broker and each historic flaw under kill, pause,
# partition and lossy-crash, within a 60-minute budget). Writes junit.xml and index.html under
# store/campaigns/nightly/latest/; exit: the tests' when they fail, else the campaign's (0 all valid,
# 1 any invalid, 2 any unknown).
nightly: setup sim-nightly
	@if docker info >/dev/null 2>&1; then $(PY) -m kafkaesque_harness.clusters.image; fi
	$(VENV)/bin/pytest -q -m nightly tests
	$(VENV)/bin/kafkaesque campaign campaigns/nightly.toml --no-panel

# The nightly sweep of fresh seeds in the deterministic simulator (issue 42 item 5): the default broker under
# single faults (row default), the protocol nemesis's moves (default-protocol) and seeds that draw their own
# settings (default-swarm), each row SIM_NIGHTLY_BUDGET wall seconds (about 14 minutes in all), its seeds starting
# at today's date (YYYYMMDD000: new seeds every night, the same on a re-run of the day). Fails (exit 1) on any
# anomaly or harness failure, printing each seed's `kafkaesque sim` replay command; the failing runs are kept
# under store/, the page and ledger under store/sim-nightly/.
SIM_NIGHTLY_BUDGET ?= 280
SIM_NIGHTLY_START ?= $(shell date -u +%Y%m%d)000
sim-nightly: setup
	$(VENV)/bin/kafkaesque sim-sweep --row default --row default-protocol --row default-swarm \
	    --start-seed $(SIM_NIGHTLY_START) --seeds 1000 --failures 1 --budget $(SIM_NIGHTLY_BUDGET) --workers 2 \
	    --out store/sim-nightly/SIMULATION.md --ledger store/sim-nightly/runs.jsonl --fail-on-anomaly

clean:
	rm -rf $(VENV) build *.egg-info
