"""Editing the user's code re-runs what depends on it, and only that (README: Caching;
core/fingerprint.py): models/model.py -> the Trainer onwards, models/preprocessing.py ->
Transform onwards; the data steps stay cached.

The runs use a copy of the code (the CLI started from that folder imports it first), so the
checkout is never edited, and a copy of the session run's metadata store, so that only the edit
can make a step new work.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import REPO, run_cli, write_config
from tests.test_pipeline_e2e import summary_list

pytestmark = pytest.mark.e2e
DATA_STEPS = {"CsvExampleGen", "StatisticsGen", "ExampleValidator", "AnomalyGate"}


def run_from(code, config) -> subprocess.CompletedProcess:
    result = run_cli("pipeline.run", "--config", str(config), cwd=code)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def edit(path) -> None:
    """A change to the file's bytes that changes nothing it does."""
    path.write_text(path.read_text() + "\n# edited by tests/test_code_edits.py\n")


def test_editing_the_model_reruns_the_trainer_and_editing_preprocessing_reruns_transform(
        pushed_run, tmp_path):
    code = tmp_path / "code"
    for package in ("pipeline", "components", "models"):
        shutil.copytree(REPO / package, code / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    pushed_run.copy_metadata(tmp_path / "outputs")
    config = write_config(tmp_path)

    edit(code / "models" / "model.py")
    model_edit = run_from(code, config)
    ran, cached = set(summary_list(model_edit.stdout, "ran")), set(
        summary_list(model_edit.stdout, "from cache"))
    assert {"Trainer", "Evaluator"} <= ran, model_edit.stdout
    assert DATA_STEPS | {"Transform"} <= cached, model_edit.stdout

    edit(code / "models" / "preprocessing.py")
    preprocessing_edit = run_from(code, config)
    ran, cached = set(summary_list(preprocessing_edit.stdout, "ran")), set(
        summary_list(preprocessing_edit.stdout, "from cache"))
    assert {"Transform", "Trainer", "Evaluator"} <= ran, preprocessing_edit.stdout
    assert DATA_STEPS <= cached, preprocessing_edit.stdout
