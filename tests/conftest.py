"""Shared fixtures. `pushed_run` runs the real pipeline once per test session on the bundled data;
tests that need a trained, pushed model use it instead of training their own."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

# Same rule as every entry point: Keras 2 before TensorFlow loads.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tests.helpers import example_config, run_cli, versions, write_config  # noqa: E402


# Fixtures that run a real entry point (`python -m pipeline.run ...`, a whole pipeline or a
# compile): a test that needs one is end to end, whatever its own body does, and stays out of
# `make test-fast` (pytest -m "not e2e").
END_TO_END_FIXTURES = {"pushed_run", "compiled", "published", "step_image"}
# The longest modules first: `make test` runs two workers (pytest-xdist, one module at a time
# each), so the Kubeflow nights start at once on one core while the rest shares the other. In
# `make test-fast` the longest unit is the TFT and training group (SAME_WORKER): it starts at once
# on one worker, which alone loads TensorFlow for it, while the other takes the rest.
LONGEST_FIRST = ("tests/kubeflow/test_s3_night.py", "tests/pipeline/test_spans.py",
                 "tests/models/test_preprocessing.py", "tests/models/test_model_and_export.py",
                 "tests/models/test_tasks.py")
# Modules that share a costly session fixture run on one worker, which builds it once
# (`transformed`: a real TFT analysis).
SAME_WORKER = {"tests/models/test_preprocessing.py": "transformed",
               "tests/models/test_model_and_export.py": "transformed",
               "tests/models/test_tasks.py": "transformed"}


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
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))  # stable


@dataclasses.dataclass
class PushedRun:
    folder: Path
    config_path: Path
    output: str
    model_base_path: Path

    @property
    def version_dir(self) -> Path:
        return self.model_base_path / versions(self.model_base_path)[-1]


@pytest.fixture(scope="session")
def pushed_run(tmp_path_factory) -> PushedRun:
    folder = tmp_path_factory.mktemp("pushed_run")
    config_path = write_config(folder)
    result = run_cli("pipeline.run", "--runner", "local", "--config", str(config_path))
    assert result.returncode == 0, result.stdout + result.stderr
    run = PushedRun(folder, config_path, result.stdout,
                    folder / "serving" / example_config().serving.model_name)
    assert versions(run.model_base_path), result.stdout
    return run


@pytest.fixture(scope="session")
def step_image(tmp_path_factory) -> Path:
    """The Kubeflow step image, emulated once per session from deploy/kubeflow/Dockerfile (a
    wheel build and a venv), for every conformance run that needs it."""
    from pipeline.kubeflow.local_image import build

    return build(tmp_path_factory.mktemp("step_image") / "image")
