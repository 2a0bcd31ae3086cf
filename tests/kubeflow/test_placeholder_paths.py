"""The local KFP backend (devtools/kfp_backend) refuses a run whose paths still hold the template's
placeholders (gs://YOUR_BUCKET/...) before any step, naming the config key to set, where a cluster
would fail in the first step that opens one; the local runner keeps taking the template config."""
from __future__ import annotations

import json

import pytest

from devtools.kfp_backend import Runner, SpecError
from devtools.kfp_backend.cli import main
from devtools.kfp_backend.spec import placeholder_paths
from tests.helpers import dump_yaml
from tests.kubeflow.test_conformance import literal_spec

DATA = "gs://YOUR_BUCKET/data/shop"
SERVING = "gs://YOUR_BUCKET/serving/shop"


def spec_with(parameters: dict, default_root: str = "gs://YOUR_BUCKET/tfx/shop") -> dict:
    """literal_spec with the Stats task given these constants (as the compiler hands a path to
    a step: text, or JSON text such as a push destination or the report's config)."""
    spec = literal_spec()
    spec["defaultPipelineRoot"] = default_root
    stats = spec["root"]["dag"]["tasks"]["Stats"]["inputs"]["parameters"]
    definitions = spec["components"]["Stats"]["inputDefinitions"]["parameters"]
    for key, value in parameters.items():
        stats[key] = {"runtimeValue": {"constant": value}}
        definitions[key] = {"parameterType": "STRING"}
    return spec


PLACEHOLDERS = {
    "input_base": DATA,
    "push_destination": json.dumps({"filesystem": {"base_directory": SERVING}}, indent=2),
    "config": json.dumps({"data": {"input_base": DATA},
                          "runner": {"output_dir": "gs://YOUR_BUCKET/tfx/shop"},
                          "features": {"numeric": ["YOUR_SCORE"]}})}


def test_placeholder_paths_are_found_with_the_config_key_that_sets_them():
    found = placeholder_paths(spec_with(PLACEHOLDERS), "/tmp/root")
    assert found == {
        "kubeflow.pipeline_root": {"gs://YOUR_BUCKET/tfx/shop": [
            "the spec's defaultPipelineRoot", "task Stats"]},
        "kubeflow.input_base": {DATA: ["task Stats"]},
        "kubeflow.serving_dir": {SERVING: ["task Stats"]}}
    # A run root of placeholders is the run's option (or kfp-launcher's), not the spec's.
    assert list(placeholder_paths(literal_spec(), "gs://YOUR_BUCKET/root")) == [
        "--pipeline-root (or the kfp-launcher ConfigMap's defaultPipelineRoot)"]


def test_a_value_that_is_no_path_or_a_real_bucket_is_no_placeholder():
    assert placeholder_paths(literal_spec(), "/tmp/root") == {}
    spec = spec_with({"config": json.dumps({"features": {"numeric": ["YOUR_SCORE"]}}),
                      "input_base": "gs://acme-ml/data/shop"}, default_root="gs://acme-ml/tfx")
    assert placeholder_paths(spec, "/tmp/root") == {}


def test_the_run_is_refused_before_any_step_naming_each_key(tmp_path):
    with pytest.raises(SpecError) as refused:
        Runner(spec_with(PLACEHOLDERS), str(tmp_path / "root"), tmp_path / "state")
    message = str(refused.value)
    assert "nothing was run" in message
    for line in (f"kubeflow.input_base: {DATA} (in task Stats)",
                 f"kubeflow.serving_dir: {SERVING} (in task Stats)",
                 "kubeflow.pipeline_root: gs://YOUR_BUCKET/tfx/shop (in the spec's "
                 "defaultPipelineRoot, task Stats)"):
        assert f"\n  {line}" in message
    assert not (tmp_path / "state").exists() and not (tmp_path / "root").exists()


def test_the_cli_refuses_it_with_exit_status_2(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(dump_yaml(spec_with({"input_base": DATA})))
    assert main([str(path), "--pipeline-root", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err
    assert f"kubeflow.input_base: {DATA}" in err and "kubeflow.pipeline_root" in err
    assert not (tmp_path / "root").exists()


def test_the_local_runner_still_takes_the_template_config_as_it_ships():
    from core.config import DEFAULT_CONFIG, load_config

    config = load_config(DEFAULT_CONFIG)
    assert "YOUR_" in config.kubeflow.pipeline_root  # the refusal is the local backend's only
