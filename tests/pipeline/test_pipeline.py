"""build_pipeline: the components, their wiring, and cache keys that see code changes."""
from __future__ import annotations

import json
import sys

from core.config import load_config, with_changes
from core.fingerprint import code_fingerprint
from tests.helpers import write_config


def _components(tmp_path, changes=None):
    from pipeline.builder import build_pipeline

    config = load_config(write_config(tmp_path, changes))
    return config, {c.id: c for c in build_pipeline(config).components}


def test_components_in_order_with_the_gates_before_transform(tmp_path):
    config, components = _components(tmp_path)
    assert list(components) == [
        "CsvExampleGen", "ImportSchemaGen", "DriftCheck", "StatisticsGen", "ExampleValidator",
        "AnomalyGate", "DriftGate", "Transform", "Trainer", "ServingBaseline", "Evaluator",
        "Pusher"]
    assert {"AnomalyGate", "DriftGate"} <= {n.id for n in components["Transform"].upstream_nodes}
    # A run the drift gate stops has been through the anomaly gate: its report has the data.
    assert "AnomalyGate" in {n.id for n in components["DriftGate"].upstream_nodes}
    drift = json.loads(components["DriftCheck"].exec_properties["settings"])
    features = config.features
    assert drift["thresholds"] == {
        **{name: config.drift.numeric_threshold for name in features.numeric},
        **{name: config.drift.categorical_threshold
           for name in (features.label, *features.categorical)},
        **config.drift.thresholds}
    assert components["DriftGate"].exec_properties["on_drift"] == "stop"
    push = components["Pusher"].exec_properties["push_destination"]
    assert json.loads(push)["filesystem"]["base_directory"] == str(config.model_base_path)


def test_without_a_schema_file_the_schema_is_inferred(tmp_path):
    _, components = _components(tmp_path, {"schema_file": None})
    assert "SchemaGen" in components and "ImportSchemaGen" not in components


def test_code_and_config_reach_the_cache_key(tmp_path):
    from pipeline.builder import build_pipeline

    config, components = _components(tmp_path)
    trainer = json.loads(components["Trainer"].exec_properties["custom_config"])
    transform = json.loads(components["Transform"].exec_properties["custom_config"])
    # The user's code, the template's runtime, and the task kinds' heads and facts.
    assert trainer["code_fingerprint"] == code_fingerprint(
        "models", "components.trainer", "components.heads", "core.tasks")
    assert transform["code_fingerprint"] == code_fingerprint(
        "models.features", "models.preprocessing", "components.transform", "components.heads",
        "core.tasks")
    reader = json.loads(components["CsvExampleGen"].exec_properties["custom_config"])
    assert reader["custom_config"]["value"]["code_fingerprint"] == code_fingerprint(
        "components.example_gen.component", "components.example_gen.csv_reader",
        "components.example_gen.tfrecord_batches", "core.csv_cells")
    assert components["AnomalyGate"].exec_properties["code_fingerprint"] == code_fingerprint(
        "components.anomaly_gate.component")
    assert components["ServingBaseline"].exec_properties["code_fingerprint"] == code_fingerprint(
        "components.serving_baseline.component", "components.evaluator.component",
        "components.evaluator.keras_metric_inputs",
        "components.evaluator.metric_stages")
    assert trainer["training"]["train_steps"] == config.training.train_steps
    changed = with_changes(config, training__train_steps=7)
    trainer_changed = json.loads({c.id: c for c in build_pipeline(changed).components}[
        "Trainer"].exec_properties["custom_config"])
    assert trainer_changed["training"]["train_steps"] == 7


def test_fingerprint_changes_when_the_code_does(tmp_path, monkeypatch):
    package = tmp_path / "fp_demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layer.py").write_text("UNITS = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_fingerprint("fp_demo")
    assert code_fingerprint("fp_demo") == before
    (package / "layer.py").write_text("UNITS = 16\n")
    assert code_fingerprint("fp_demo") != before
    sys.modules.pop("fp_demo", None)
