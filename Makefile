# Two commands do all the set-up: `make run` and `make test` create .venv on first use.
PYTHON := .venv/bin/python
CONFIG ?= configs/pipeline.yaml
# make doctor RUNNER=kubeflow (make itself would take `--runner` as one of its own options).
RUNNER ?= local
# Test workers (pytest-xdist), one test module at a time each, in the order conftest.py sets.
TEST_WORKERS ?= 2
# Tests write the project's own bytecode (__pycache__/, ignored by git) even where
# PYTHONDONTWRITEBYTECODE is set: otherwise each of the suite's hundreds of interpreters compiles
# the project's modules again and pytest rewrites every test module (collection 5.3 -> 2.3 s a
# worker). The venv's packages have theirs already (scripts/compile_bytecode.py).
PYTEST := env -u PYTHONDONTWRITEBYTECODE \
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.DEFAULT_GOAL := run
.PHONY: help run test test-fast lint venv lock tools schema doctor deploy-names report clean docs \
	service-up service-burst service-down service-status flink-up flink-run flink-down flink-status

help:  ## this list: each target with the comment after its name
	@grep -E '^[a-z][a-z-]*:.*## ' $(firstword $(MAKEFILE_LIST)) | \
		sed -E 's/^([a-z-]+):.*## (.*)/\1\t\2/' | expand -t 16

run: venv  ## run the pipeline locally on the bundled data
	$(PYTHON) -m pipeline.run --runner local --config $(CONFIG)

test: venv tools lint  ## every test, end to end included (and the lint)
	$(PYTEST)

test-fast: venv  ## the unit tests that do no TensorFlow, TFT, TFMA or Beam work and drive no browser, JVM or server
	$(PYTEST) -m "not e2e and not slow"

lint: venv  ## ruff, with the rules in pyproject.toml
	$(PYTHON) -m ruff check .

docs: venv  ## build the documentation site (mkdocs.yml: the READMEs; --strict: a broken link or anchor fails) into build/site
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

venv:  ## (re)build .venv from requirements.lock when the lock changed
	@bash scripts/setup_env.sh

lock:  ## re-resolve requirements.lock (development), requirements-image.lock (its runtime part), requirements-service.lock (the service image's) and deploy/serving/sync/requirements.lock (the model sync image's)
	.venv/bin/uv pip compile pyproject.toml --extra dev --extra service --python-version 3.10 --generate-hashes -o requirements.lock
	.venv/bin/uv pip compile pyproject.toml --python-version 3.10 -c requirements.lock --generate-hashes -o requirements-image.lock
	.venv/bin/uv pip compile deploy/service/requirements.in --python-version 3.10 -c requirements.lock --generate-hashes -o requirements-service.lock
	.venv/bin/uv pip compile deploy/serving/sync/requirements.in --python-version 3.10 -c requirements.lock --generate-hashes -o deploy/serving/sync/requirements.lock

tools: venv  ## Debian packages the tests use (promtool, docker-compose, chromium, redis-server, java, mvn, ip), then the Kafka, Flink and Beam job server jars and the Trainer's CRDs
	@bash scripts/install_test_tools.sh
	@bash scripts/fetch_jars.sh deploy/kafka/pom.xml deploy/kafka/jars.sha256 .cache/kafka
	@bash scripts/fetch_jars.sh deploy/flink/job-server-pom.xml deploy/flink/job-server-jars.sha256 .cache/flink-job-server
	@bash scripts/fetch_flink.sh
	@bash scripts/fetch_crds.sh

schema: venv  ## write the schema inferred from the data to configs/ for review
	$(PYTHON) -m pipeline.schema --config $(CONFIG)

doctor: venv  ## what this machine can run, against what the config asks for (exit 1: the fix); RUNNER=kubeflow: also the cluster kubectl reaches
	$(PYTHON) -m pipeline.doctor --runner $(RUNNER) --config $(CONFIG)

deploy-names: venv  ## put the config's serving.model_name in every file of deploy/serving
	$(PYTHON) deploy/serving/rename.py --config $(CONFIG)

report: venv  ## print the newest run report's path (OPEN=1: open it in the browser)
	$(PYTHON) -m pipeline.report --config $(CONFIG) $(if $(OPEN),--open)

service-up: venv tools  ## the recommender service here: Kafka, Redis, TF Serving, the history updater and the recommend endpoint (devtools/service_up.py)
	$(PYTHON) -m devtools.service_up up

# make service-burst BURST="--shift hour=3 --history-cut 1": planted skew for the night's check.
service-burst: venv  ## recommend requests drawn from the click log's newest span to the running service, shifted as BURST says (devtools/request_burst.py)
	$(PYTHON) -m devtools.request_burst $(BURST)

service-down:  ## stop what service-up started
	$(PYTHON) -m devtools.service_up down

service-status:  ## what service-up started, up or down, and its logs
	$(PYTHON) -m devtools.service_up status

flink-up: venv tools  ## a Flink 1.16.3 session cluster here: a JobManager, two TaskManagers each with its own Beam worker pool, Beam's job server (devtools/flink_cluster.py; README: Flink)
	$(PYTHON) -m devtools.flink_cluster up

flink-run: venv  ## the pipeline with its Beam stages on the cluster of make flink-up
	$(PYTHON) -m pipeline.run --runner local --config $(CONFIG) --beam-args outputs/flink/beam_args.json

flink-down:  ## stop what flink-up started
	$(PYTHON) -m devtools.flink_cluster down

flink-status:  ## what flink-up started, up or down, and its logs
	$(PYTHON) -m devtools.flink_cluster status

clean:  ## remove every output of local runs (pipeline root, metadata, serving dir, logs)
	rm -rf outputs
