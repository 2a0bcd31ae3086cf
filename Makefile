# Two commands do all the set-up: `make run` and `make test` create .venv on first use.
PYTHON := .venv/bin/python
CONFIG ?= configs/pipeline.yaml

.PHONY: run test test-fast venv tools schema report clean

run: venv  ## run the pipeline locally on the bundled data
	$(PYTHON) -m pipeline.run --runner local --config $(CONFIG)

test: venv tools  ## every test, end to end included
	$(PYTHON) -m pytest

test-fast: venv  ## unit tests only
	$(PYTHON) -m pytest -m "not e2e"

venv:  ## (re)build .venv from requirements.lock when the lock changed
	@bash scripts/setup_env.sh

tools:  ## Debian packages the tests use (promtool, docker-compose, chromium)
	@bash scripts/install_test_tools.sh

schema: venv  ## write the schema inferred from the data to configs/ for review
	$(PYTHON) -m pipeline.schema --config $(CONFIG)

report: venv  ## print the newest run report's path (OPEN=1: open it in the browser)
	$(PYTHON) -m pipeline.report --config $(CONFIG) $(if $(OPEN),--open)

clean:  ## remove every output of local runs (pipeline root, metadata, serving dir, logs)
	rm -rf outputs
