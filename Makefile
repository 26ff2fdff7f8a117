# Set-up and the two commands the README promises: `make demo` and `make test`.
# Both create or refresh .venv on a clean machine that has only Python >= 3.11 and make.

PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-full
WAREHOUSE ?= warehouse

.PHONY: venv venv-full demo test lint fmt browser bench accuracy clean conformance

# The runtime alone (what `make demo` needs), then the test and Spark extras on top.
$(BASE): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(BASE)

$(FULL): $(BASE)
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	touch $(FULL)

venv: $(BASE)
venv-full: $(FULL)

# Headless chromium for the report's browser tests (Debian package; needs root or sudo).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing chromium (Debian package) for the browser tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	    echo "could not install chromium: browser tests will be skipped"; }

lint: venv-full
	$(BIN)/ruff check pipeline tests bench
	$(BIN)/ruff format --check pipeline tests bench

fmt: venv-full
	$(BIN)/ruff format pipeline tests bench
	$(BIN)/ruff check --fix pipeline tests bench

test: venv-full browser lint
	$(BIN)/pipeline schemas --check
	$(BIN)/python -m pytest -q -p no:cacheprovider

demo: venv
	$(BIN)/pipeline ingest sample_traces/ --warehouse $(WAREHOUSE)
	$(BIN)/pipeline query latency_percentiles --warehouse $(WAREHOUSE) --format table
	$(BIN)/pipeline fit --warehouse $(WAREHOUSE)
	$(BIN)/pipeline query cost_mfu_mbu --warehouse $(WAREHOUSE) --format table
	$(BIN)/pipeline attribute --warehouse $(WAREHOUSE) \
	  --baseline "gpu = 'H100-SXM' AND model = 'meta-llama/Llama-3.1-8B'" \
	  --candidate "gpu = 'A100-80GB' AND model = 'meta-llama/Llama-3.1-8B'"
	$(BIN)/pipeline report --warehouse $(WAREHOUSE) --out-dir reports/

# The clients people install today (AIPerf, GuideLLM from PyPI, in .conformance/), run for real
# against bench/mock_openai_server.py, read back with `ingest --strict`, compared with their own
# summaries. Not in `make test`: the clients' installs (GuideLLM pulls torch) take longer than
# its budget. Results in docs/formats.md.
conformance: venv
	$(BIN)/python bench/conformance.py

bench: venv
	$(BIN)/python bench/bench_ingest.py

# Validate the model on the calibration set (../shared/real_traces/serving_runs) and rewrite
# docs/accuracy.md. tests/test_calibration.py runs the fast subset inside `make test`.
accuracy: venv
	$(BIN)/python bench/accuracy.py

clean:
	rm -rf $(VENV) $(WAREHOUSE) .pytest_cache
