"""build_pipeline: the components, their wiring, and cache keys that see code changes."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

from core.config import load_config, with_changes
from core.fingerprint import code_fingerprint
from tests.helpers import example_config, write_config


# The code each step runs that TFX cannot see: whole folders (a package: every .py file in it),
# and the user's Transform code (an edit to models/model.py re-runs the Trainer, not Transform).
FINGERPRINTED = {
    "CsvExampleGen": ("components.example_gen", "core.csv_cells"),
    "AnomalyGate": ("components.anomaly_gate",),
    "DriftCheck": ("components.drift_gate", "components.span_statistics", "components.example_gen",
                   "core.csv_cells"),
    "SkewCheck": ("components.skew_gate", "components.span_statistics", "components.example_gen",
                  "core.csv_cells"),
    "Transform": ("models.features", "models.preprocessing", "components.transform",
                  "components.heads", "core.tasks"),
    # The user's code, the template's runtime, and the task kinds' heads and facts.
    "Trainer": ("models", "components.trainer", "components.heads", "core.tasks"),
    # The Evaluator's code too: TFX keys the Evaluator by its class path only.
    "ServingBaseline": ("components.serving_baseline", "components.evaluator"),
    # TFX's Pusher with its copy made atomic, and the version names it shares with TF Serving.
    "Pusher": ("components.pusher", "core.storage"),
}


def _components(tmp_path, changes=None):
    from pipeline.builder import build_pipeline

    config = load_config(write_config(tmp_path, changes))
    return config, {c.id: c for c in build_pipeline(config).components}


def test_components_in_order_with_the_gates_before_transform(tmp_path):
    config, components = _components(tmp_path)
    assert list(components) == [
        "CsvExampleGen", "ImportSchemaGen", "DriftCheck", "SkewCheck", "StatisticsGen",
        "ExampleValidator", "AnomalyGate", "DriftGate", "SkewGate", "Transform", "Trainer",
        "ServingBaseline", "Evaluator", "Pusher"]
    assert {"AnomalyGate", "DriftGate", "SkewGate"} <= {
        n.id for n in components["Transform"].upstream_nodes}
    # A run a data gate stops has been through the anomaly gate: its report has the data.
    assert "AnomalyGate" in {n.id for n in components["DriftGate"].upstream_nodes}
    assert "AnomalyGate" in {n.id for n in components["SkewGate"].upstream_nodes}
    skew = json.loads(components["SkewCheck"].exec_properties["settings"])
    assert skew["thresholds"] == config.skew_thresholds() and skew["not_served"] == []
    assert components["SkewCheck"].exec_properties["serving_base"] == str(
        config.runner.output_dir / "requests")
    assert components["SkewGate"].exec_properties["on_skew"] == "warn"
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
    # TFX's Pusher with the atomic copy (components/pusher/executor.py).
    assert components["Pusher"].executor_spec.executor_class.__module__ == \
        "components.pusher.executor"


def test_without_a_schema_file_the_schema_is_inferred(tmp_path):
    _, components = _components(tmp_path, {"schema_file": None})
    assert "SchemaGen" in components and "ImportSchemaGen" not in components


def _fingerprints(components):
    """Each step's code fingerprint as the builder wrote it into its properties."""
    def custom(step):
        return json.loads(components[step].exec_properties["custom_config"])

    # ExampleGen's: the reader settings' JSON in a StringValue (components/example_gen).
    reader = json.loads(custom("CsvExampleGen")["custom_config"]["value"])
    return {"CsvExampleGen": reader["code_fingerprint"],
            "AnomalyGate": components["AnomalyGate"].exec_properties["code_fingerprint"],
            "DriftCheck": json.loads(components["DriftCheck"].exec_properties["settings"])[
                "code_fingerprint"],
            "SkewCheck": json.loads(components["SkewCheck"].exec_properties["settings"])[
                "code_fingerprint"],
            "Transform": custom("Transform")["code_fingerprint"],
            "Trainer": custom("Trainer")["code_fingerprint"],
            "ServingBaseline": components["ServingBaseline"].exec_properties["code_fingerprint"],
            "Pusher": custom("Pusher")["code_fingerprint"]}


def test_code_and_config_reach_the_cache_key(tmp_path):
    from pipeline.builder import build_pipeline

    config, components = _components(tmp_path)
    trainer = json.loads(components["Trainer"].exec_properties["custom_config"])
    assert _fingerprints(components) == {
        step: code_fingerprint(*modules) for step, modules in FINGERPRINTED.items()}
    assert trainer["training"]["train_steps"] == config.training.train_steps
    changed = with_changes(config, training__train_steps=7)
    trainer_changed = json.loads({c.id: c for c in build_pipeline(changed).components}[
        "Trainer"].exec_properties["custom_config"])
    assert trainer_changed["training"]["train_steps"] == 7


def test_canary_release_adds_the_release_step_and_leaves_direct_as_it_was(tmp_path):
    _, direct = _components(tmp_path / "direct")
    from core.rollout import rollout_name

    config, canary = _components(tmp_path / "canary", {"serving.release": "canary",
                                                       "serving.namespace": "serving"})
    assert "Release" not in direct
    assert sorted(direct["ServingBaseline"].exec_properties) == ["code_fingerprint",
                                                                 "model_base_path"]
    assert list(canary)[-2:] == ["Pusher", "Release"]
    rollout = f"serving/{rollout_name(config.serving.model_name)}"
    assert canary["ServingBaseline"].exec_properties["rollout"] == rollout
    assert canary["Release"].exec_properties["rollout"] == rollout
    # The Rollout client is in both canary steps' keys; the direct baseline's stays as it was.
    assert canary["ServingBaseline"].exec_properties["code_fingerprint"] == code_fingerprint(
        *FINGERPRINTED["ServingBaseline"], "core.rollout")
    assert canary["Release"].exec_properties["code_fingerprint"] == code_fingerprint(
        "components.release", "core.rollout")
    assert canary["Release"].inputs["pushed_model"].producer_component_id == "Pusher"


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


def test_an_edit_to_any_file_of_a_fingerprinted_folder_changes_its_key(tmp_path, monkeypatch):
    """Every package the steps' keys name, copied: the copy has the package's fingerprint, and
    an edit to any one of its files, or a new file, changes it."""
    packages = sorted({m for modules in FINGERPRINTED.values() for m in modules
                       if importlib.util.find_spec(m).submodule_search_locations})
    assert "components.evaluator" in packages and "components.example_gen" in packages
    copies = {}
    for i, package in enumerate(packages):
        folder = Path(importlib.util.find_spec(package).origin).parent
        copies[package] = tmp_path / f"fp_copy_{i}"
        shutil.copytree(folder, copies[package], ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    for package, copy in copies.items():
        name = copy.name
        key = code_fingerprint(name)
        assert key == code_fingerprint(package), package
        files = sorted(copy.rglob("*.py"))
        assert len(files) >= 2, package  # __init__.py and the component
        for path in files:
            text = path.read_text()
            path.write_text(text + "\n# an edit\n")
            assert code_fingerprint(name) != key, path.relative_to(tmp_path)
            path.write_text(text)
        assert code_fingerprint(name) == key
        (copy / "helpers.py").write_text("X = 1\n")
        assert code_fingerprint(name) != key, f"{package}: a new file"


def test_on_a_clusters_job_service_each_beam_steps_job_is_named_after_it(tmp_path):
    def job_names(beam_args):
        config, components = _components(tmp_path, {"runner.beam_args": beam_args})
        ours = f"--job_name={config.pipeline_name}"
        return {c_id: [a for a in getattr(c.executor_spec, "beam_pipeline_args", [])
                       if a.startswith(ours)] for c_id, c in components.items()
                if getattr(c.executor_spec, "beam_pipeline_args", None) is not None}

    named = job_names(["--runner=PortableRunner", "--job_endpoint=127.0.0.1:8099"])
    assert {c_id: names for c_id, names in named.items() if names} == {
        step: [f"--job_name={example_config().pipeline_name}-{step.lower()}"]
        for step in ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")}
    # In memory, embedded, or named by the user: Beam's own naming, as before.
    assert not any(job_names([]).values())
    assert not any(job_names(["--runner=PortableRunner", "--job_endpoint=embed"]).values())
    assert not any(job_names(["--job_endpoint=127.0.0.1:8099", "--job_name=mine"]).values())
