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

from tests.helpers import run_cli, versions, write_config  # noqa: E402


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
    run = PushedRun(folder, config_path, result.stdout, folder / "serving" / "penguins")
    assert versions(run.model_base_path), result.stdout
    return run
