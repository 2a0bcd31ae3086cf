"""Fixtures for the training tests: the pipeline's own ExampleGen and Transform outputs (from the
session's one pipeline run, `pushed_run`), and the Trainer exec-properties for a config."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.models.workers import PipelineArtifacts


@pytest.fixture(scope="session")
def artifacts(pushed_run) -> PipelineArtifacts:
    root = pushed_run.folder / "outputs" / "pipeline"

    def newest(folder: Path) -> Path:
        return max(folder.iterdir(), key=lambda p: int(p.name))

    return PipelineArtifacts(
        config_path=pushed_run.config_path,
        examples=newest(root / "CsvExampleGen" / "examples"),
        transform_graph=newest(root / "Transform" / "transform_graph"),
        single_device_model=pushed_run.version_dir)


@pytest.fixture(scope="session")
def exec_properties(artifacts, tmp_path_factory):
    """Writes the Trainer exec-properties for the test config plus `overrides` (training__x=1
    for training.x); returns the file's path."""
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from core.config import load_config

    folder = tmp_path_factory.mktemp("exec_properties")

    def write(name: str = "trainer.json", **overrides) -> Path:
        config = load_config(artifacts.config_path,
                             {k.replace("__", "."): v for k, v in overrides.items()})
        path = folder / name
        path.write_text(json.dumps(trainer_exec_properties(config)))
        return path

    return write


@pytest.fixture(scope="session")
def transformed(tmp_path_factory):
    """(transformed rows, TFTransformOutput) of tests/models/transform_rows.ROWS through real TFT:
    one analysis per session, read by the preprocessing and the export tests."""
    from tests.models.transform_rows import analyze_and_transform

    return analyze_and_transform(tmp_path_factory.mktemp("tft"))
