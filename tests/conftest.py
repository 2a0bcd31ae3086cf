"""Shared fixtures. `pushed_run` runs the real pipeline once per `pytest` command on the bundled
data, for all its xdist workers together; tests that need a trained, pushed model use it instead
of training their own."""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

# Same rule as every entry point: Keras 2 before TensorFlow loads.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tests.helpers import (REPO, example_config, run_cli, user_env, versions,  # noqa: E402
                           write_config)


# Fixtures that run a real entry point (`python -m pipeline.run ...`, a whole pipeline or a
# compile): a test that needs one is end to end, whatever its own body does, and stays out of
# `make test-fast` (pytest -m "not e2e and not slow").
END_TO_END_FIXTURES = {"pushed_run", "pushed_recommender", "compiled", "published", "step_image"}
# Fixtures that run real TFT analyses or start a JVM: a test that needs one is slow (out of
# `make test-fast`, pytest -m "not e2e and not slow"), like the tests marked so in their modules.
SLOW_FIXTURES = {"transformed", "every_label", "kafka_server"}
# The longest modules first (measured: `--durations=0`, summed per module), so that the end of a
# run is short modules on both workers rather than one long module on one. `make test` runs two
# workers (pytest-xdist, one module at a time each): the Kubeflow nights start at once on one
# core, building the session's image and pushed run, while the other takes test_init_e2e, which
# needs neither.
LONGEST_FIRST = ("tests/test_flink_nights.py", "tests/kubeflow/test_flink_night.py",
                 "tests/test_flink_cluster.py", "tests/kubeflow/test_s3_night.py",
                 "tests/test_init_e2e.py",
                 "tests/example/test_recommender_e2e.py", "tests/service/test_service_e2e.py",
                 "tests/kubeflow/test_conformance_run.py",
                 "tests/test_user_machine.py", "tests/test_worker_pool_night.py",
                 "tests/kubeflow/test_recommender_night.py", "tests/test_init_recommender_e2e.py",
                 "tests/test_code_edits.py",
                 "tests/test_pipeline_e2e.py", "tests/serving/test_predict_skew_e2e.py",
                 "tests/models/test_training.py",
                 "tests/components/test_pusher.py", "tests/service/test_updater.py",
                 "tests/models/test_multi_process.py", "tests/test_release_e2e.py",
                 "tests/models/test_preprocessing.py", "tests/models/test_model_and_export.py",
                 "tests/models/test_tasks.py", "tests/deploy/test_model_sync.py",
                 "tests/kubeflow/test_run_lease_s3.py",
                 "tests/kubeflow/test_publish.py",
                 "tests/kubeflow/test_beam_step.py",
                 "tests/test_bounded_failure_e2e.py", "tests/test_storage.py",
                 "tests/models/test_bad_cluster.py", "tests/components/test_keras2.py",
                 "tests/models/test_task_kinds.py", "tests/kubeflow/test_conformance.py",
                 "tests/test_report_e2e.py", "tests/components/test_evaluator.py",
                 "tests/deploy/test_serving_artifacts.py", "tests/pipeline/test_lazy_tfx.py",
                 "tests/pipeline/test_prefork.py", "tests/pipeline/test_report_browser.py",
                 "tests/kubeflow/test_step_imports.py", "tests/test_setup_env.py",
                 "tests/components/test_csv_example_gen.py",
                 "tests/components/test_tfma_patches.py",
                 "tests/components/test_keras_metric_inputs.py")
# Modules that share a costly session fixture run on one worker, which builds it once
# (`transformed`: a real TFT analysis); the Flink clusters' modules run one after another on
# one worker (`flink`): a cluster is 4 JVMs and 2 pools, two at once would fight for 2 cores.
SAME_WORKER = {"tests/models/test_preprocessing.py": "transformed",
               "tests/models/test_model_and_export.py": "transformed",
               "tests/models/test_tasks.py": "transformed",
               "tests/test_flink_nights.py": "flink",
               "tests/kubeflow/test_flink_night.py": "flink",
               "tests/test_flink_cluster.py": "flink"}


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with SAME_WORKER's modules as one unit of work."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(module, module)

    return ModulesAndGroups(config, log)


def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if END_TO_END_FIXTURES & fixtures:
            item.add_marker(pytest.mark.e2e)
        if SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
    rank = {module: index for index, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An advisory lock on path, held until the block ends (or its process does)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def once_per_command(tmp_path_factory, name: str, build: Callable[[Path], dict]) -> dict:
    """build(folder)'s record (JSON), made once for every xdist worker of this pytest command:
    the first worker to ask builds it in a folder beside the workers' own temporary folders
    (the pattern pytest-xdist documents, with fcntl's lock instead of the filelock package), the
    others wait for it and read the record.
    Without xdist it is built once per session, in the session's temporary folder. Users read
    what it built; a test that changes it works on a copy."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, the workers' common parent
    record = shared / f"{name}.json"
    with _exclusive(shared / f"{name}.lock"):
        if not record.is_file():
            folder = shared / name
            if folder.exists():  # a build that raised in another worker
                shutil.rmtree(folder)
            folder.mkdir()
            record.write_text(json.dumps(build(folder)))
        return json.loads(record.read_text())


@dataclasses.dataclass
class PushedRun:
    folder: Path
    config_path: Path
    output: str
    model_base_path: Path
    # The run's whole record: its stderr and pid, and the second run started during its Trainer.
    record: dict

    @property
    def version_dir(self) -> Path:
        return self.model_base_path / versions(self.model_base_path)[-1]

    def copy_metadata(self, outputs: Path) -> None:
        """A consistent copy of the run's metadata store into outputs/ (created): SQLite's
        online backup, since another worker's test may be running on the store meanwhile
        (tests/test_pipeline_e2e.py re-runs this config); a plain file copy taken during one
        of its commits would be torn. Python's backup retries while the store is locked."""
        outputs.mkdir(parents=True, exist_ok=True)
        source = sqlite3.connect(self.folder / "outputs" / "metadata.sqlite")
        copy = sqlite3.connect(outputs / "metadata.sqlite")
        try:
            with copy:
                source.backup(copy)
        finally:
            copy.close()
            source.close()


def _run_pipeline(folder: Path) -> dict:
    """The README's command as a user's shell starts it: a fresh interpreter (the other runs
    fork a preloaded one) with PATH, HOME and LANG only. While it trains the same command starts
    again, which the run lock must refuse (tests/test_user_machine.py reads both)."""
    config_path = write_config(folder)
    command = [sys.executable, "-m", "pipeline.run", "--runner", "local", "--config",
               str(config_path)]
    errors = folder / "stderr.txt"
    with errors.open("w") as stderr:
        first = subprocess.Popen(command, cwd=REPO, env=user_env(), stdout=subprocess.PIPE,
                                 stderr=stderr, text=True)
        lines, second = [], None
        try:
            for line in first.stdout:
                lines.append(line)
                if second is None and line.strip() == "> Trainer ...":
                    second = _second_run(command, first)
            first.wait(timeout=1500)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    return {"folder": str(folder), "config_path": str(config_path), "pid": first.pid,
            "returncode": first.returncode, "stdout": "".join(lines),
            "stderr": errors.read_text(), "second": second}


def _second_run(command: list, first: subprocess.Popen) -> dict:
    """The same command while the first runs: its exit, output, and whether the first still ran
    when it ended (None: it was not refused within 60 s and was stopped)."""
    try:
        second = subprocess.run(command, cwd=REPO, env=user_env(), capture_output=True,
                                text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "stdout": "", "stderr": "", "first_running": True}
    return {"returncode": second.returncode, "stdout": second.stdout, "stderr": second.stderr,
            "first_running": first.poll() is None}


@pytest.fixture(scope="session")
def pushed_run(tmp_path_factory) -> PushedRun:
    """The bundled config's first run, pushed: one per pytest command (once_per_command). Tests
    read it; tests/test_pipeline_e2e.py also re-runs its config in its folder, as a user would,
    which adds executions and reports but never a served version. A test that runs the pipeline
    on it otherwise copies what it needs first (copy_metadata, the serving folder)."""
    record = once_per_command(tmp_path_factory, "pushed_run", _run_pipeline)
    assert record["returncode"] == 0, record["stdout"] + record["stderr"]
    folder = Path(record["folder"])
    run = PushedRun(folder, Path(record["config_path"]), record["stdout"],
                    folder / "serving" / example_config().serving.model_name, record)
    assert versions(run.model_base_path), record["stdout"]
    return run


@dataclasses.dataclass
class PushedRecommender:
    output: str
    config_path: Path
    version_dir: Path

    @property
    def folder(self) -> Path:
        return self.config_path.parent

    # A night run again on its data copies its metadata store the same way.
    copy_metadata = PushedRun.copy_metadata


def _run_recommender(folder: Path) -> dict:
    from core.config import load_config

    config_path = write_config(folder, name="recommender.yaml",
                               source=REPO / "configs" / "recommender.yaml")
    result = run_cli("pipeline.run", "--config", str(config_path), fresh=True, timeout=1500)
    base = load_config(config_path).model_base_path
    return {"config_path": str(config_path), "returncode": result.returncode,
            "stdout": result.stdout, "stderr": result.stderr,
            "versions": [str(p) for p in sorted(base.iterdir())] if base.is_dir() else []}


@pytest.fixture(scope="session")
def pushed_recommender(tmp_path_factory) -> PushedRecommender:
    """configs/recommender.yaml's first run, pushed, once per pytest command: the recommender
    example's tests and the service's end-to-end test read it (a copy for anything that writes)."""
    record = once_per_command(tmp_path_factory, "pushed_recommender", _run_recommender)
    assert record["returncode"] == 0, record["stdout"][-3000:] + record["stderr"][-3000:]
    assert len(record["versions"]) == 1, "the first run pushes one version"
    return PushedRecommender(record["stdout"], Path(record["config_path"]),
                             Path(record["versions"][0]))


@pytest.fixture
def flink(tmp_path):
    """A fresh `make flink-up` cluster of two TaskManagers for the test (tests/flink_fixture.py)."""
    from tests.flink_fixture import fresh_cluster

    yield from fresh_cluster(tmp_path)


@pytest.fixture(scope="session")
def step_image(tmp_path_factory) -> Path:
    """The Kubeflow step image, emulated once per pytest command from deploy/kubeflow/Dockerfile
    (a wheel build and a venv), for every conformance run that needs it."""
    from devtools.local_image import build

    record = once_per_command(tmp_path_factory, "step_image",
                              lambda folder: {"image": str(build(folder / "image"))})
    return Path(record["image"])
