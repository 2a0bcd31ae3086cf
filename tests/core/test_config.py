"""Config loading: the bundled config is valid, and each kind of mistake names the key and file."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from tests.helpers import DEFAULT_CONFIG, example_config, load_yaml, write_config

FEATURES = example_config().features
LABEL, NUMERIC, CATEGORICAL = FEATURES.label, FEATURES.numeric[0], FEATURES.categorical[0]
# The example's first numeric column as a regression's label.
REGRESSION = {"task.kind": "regression", "features.label": NUMERIC,
              "features.numeric": FEATURES.numeric[1:],
              "features.categorical": [*FEATURES.categorical, LABEL],
              "evaluation.thresholds": {"MeanAbsoluteError": {"upper_bound": 500}}}


def test_bundled_config_loads_with_paths_relative_to_the_file():
    config = load_config(DEFAULT_CONFIG)
    raw = load_yaml(DEFAULT_CONFIG.read_text())
    assert config.features.label == raw["features"]["label"]
    assert config.data.input_base == (DEFAULT_CONFIG.parent / raw["data"]["input_base"]).resolve()
    assert config.model_base_path == config.serving.serving_dir / raw["serving"]["model_name"]
    # Every output lands under the one output folder by default.
    for path in (config.pipeline_root, config.metadata_path, config.log_dir):
        assert config.runner.output_dir in path.parents


def test_the_tf_serving_version_defaults_to_the_deploys_and_takes_2_20_0(tmp_path):
    assert load_config(DEFAULT_CONFIG).serving.tf_serving_version == "2.16.1"
    path = write_config(tmp_path, {"serving.tf_serving_version": "2.20.0"})
    assert load_config(path).serving.tf_serving_version == "2.20.0"


@pytest.mark.parametrize("changes, key, words", [
    ({"training.epochs": 3}, "training.epochs", "unknown key"),
    ({"notify.webhook_url": "https://hooks.example/x"}, "notify.webhook_url", "unknown key"),
    ({"notify.webhook_env": "PIPELINE WEBHOOK"}, "notify.webhook_env", "match pattern"),
    ({"notify.timeout_s": 0}, "notify.timeout_s", "greater than 0"),
    ({"notify.kubeflow_secret": "Night_Webhook"}, "notify.kubeflow_secret", "match pattern"),
    ({"training.batch_size": "many"}, "training.batch_size", "integer"),
    ({"training.distribution_strategy": "horovod"}, "training.distribution_strategy",
     "one_device"),
    ({"training.precision": "float8"}, "training.precision", "mixed_bfloat16"),
    ({"features.numeric": [NUMERIC, LABEL]}, "features", "label"),
    ({"features.categorical": [CATEGORICAL, NUMERIC]}, "features", "both"),
    ({"serving": None}, "serving", "required key is missing"),
    ({"evaluation.thresholds": {}}, "evaluation.thresholds", "no model will ever be blessed"),
    ({"evaluation.thresholds": {"SparseCategoricalAccuracy": {"max_decrease": 0.1,
                                                               "max_increase": 0.1}}},
     "evaluation.thresholds.SparseCategoricalAccuracy", "not both"),
    ({"evaluation.thresholds": {"accuracy_of_doom": {"lower_bound": 0.5}}},
     "evaluation.thresholds", "'accuracy_of_doom' is not a TFMA or Keras metric class name"),
    ({"evaluation.threshold_slices": "big_slices"}, "evaluation.threshold_slices",
     "'every_slice'"),
    ({"drift.on_drift": "ignore"}, "drift.on_drift", "'stop' or 'warn'"),
    ({"drift.numeric_threshold": 1.5}, "drift.numeric_threshold", "less than or equal to 1"),
    ({"drift.thresholds": {CATEGORICAL: 0}}, "drift.thresholds", "must be in (0, 1]"),
    ({"skew.thresholds": {CATEGORICAL: 1.5}}, "skew.thresholds", "must be in (0, 1]"),
    ({"task.kind": "binary"}, "task", "kind binary needs positive_class"),
    ({"task.kind": "ordinal"}, "task.kind", "'multiclass', 'binary' or 'regression'"),
    ({"task.positive_class": "yes"}, "task", "positive_class applies to kind binary only"),
    ({"task.decision_threshold": 0.3, "task.kind": "regression",
      "evaluation.thresholds": {"MeanAbsoluteError": {"upper_bound": 500}}},
     "task", "decision_threshold applies to kind binary only"),
    ({"task": {"kind": "binary", "positive_class": 1}}, "task.positive_class",
     'quote the label value, e.g. positive_class: "1"'),
    ({"task": {"kind": "binary", "positive_class": "yes", "decision_threshold": 1.0}},
     "task.decision_threshold", "less than 1"),
    ({"task.kind": "regression"}, "evaluation",
     "thresholds.SparseCategoricalAccuracy does not fit task.kind 'regression'. The metrics that "
     "fit: MeanAbsoluteError, RootMeanSquaredError"),
    ({"task.kind": "regression", "evaluation.thresholds": {"AUC": {"lower_bound": 0.7}}},
     "evaluation", "thresholds.AUC does not fit task.kind 'regression'"),
    ({"task": {"kind": "binary", "positive_class": "yes"}}, "evaluation",
     "thresholds.SparseCategoricalAccuracy does not fit task.kind 'binary'. The metrics that "
     "fit: AUC, Precision, Recall, BinaryAccuracy"),
    ({"drift.thresholds": {"beak_colour": 0.2}}, "(top level)",
     "drift.thresholds names ['beak_colour'], which are not the label or a model input"),
    ({"kubeflow.backend_version": "2.9.0"}, "kubeflow.backend_version",
     "'2.9.0' is not a KFP backend release this template supports: 2.4.1 to 2.17.x"),
    ({"kubeflow.backend_version": "2.4.0"}, "kubeflow.backend_version", "2.4.1 to 2.17.x"),
    ({"kubeflow.backend_version": "2.18.0"}, "kubeflow.backend_version", "2.4.1 to 2.17.x"),
    ({"kubeflow.backend_version": 2.17}, "kubeflow.backend_version",
     'quote the release, e.g. backend_version: "2.17.0"'),
    ({"kubeflow.multi_user": True}, "kubeflow", "multi_user needs namespace"),
    ({"kubeflow.namespace": "Team_A"}, "kubeflow.namespace", "should match pattern"),
    ({"serving.tf_serving_version": "2.17.0"}, "serving.tf_serving_version",
     "'2.16.1' or '2.20.0'"),
    # Issue 25: a model_name of `..` pushed into serving_dir's parent (exit 0).
    ({"serving.model_name": ".."}, "serving.model_name", "should match pattern"),
    ({"serving.model_name": ".hidden"}, "serving.model_name", "should match pattern"),
    # Issue 25: credentials in beam_args reach the compiled spec and command lines.
    ({"runner.beam_args": ["--s3_secret_access_key=abc"]}, "runner.beam_args",
     "--s3_secret_access_key carries a credential"),
    ({"runner.beam_args": ["--direct_num_workers=2", "--s3_access_key_id", "AKIA"]},
     "runner.beam_args", "--s3_access_key_id carries a credential"),
    ({"kubeflow.beam_args": ["--aws_session_token=x"]}, "kubeflow.beam_args",
     "--aws_session_token carries a credential"),
    ({"kubeflow.beam_args": ["--db_password=x"]}, "kubeflow.beam_args", "carries a credential"),
])
def test_bad_values_name_the_key_and_the_file(tmp_path, changes, key, words):
    path = write_config(tmp_path, changes)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message
    assert f"  {key}:" in message
    assert words in message


def test_missing_data_folder_is_reported(tmp_path):
    path = write_config(tmp_path, {"data.input_base": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match=r"data\.input_base: folder .*nowhere does not exist"):
        load_config(path)


def test_missing_schema_file_is_reported(tmp_path):
    path = write_config(tmp_path, {"schema_file": str(tmp_path / "schema.pbtxt")})
    with pytest.raises(ConfigError, match="schema_file: .* does not exist"):
        load_config(path)


def test_missing_config_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


@pytest.mark.parametrize("runner", ["local", "kubeflow"])
def test_unknown_metric_exits_2_naming_key_and_file_under_both_runners(tmp_path, capsys, runner):
    # Through the CLI: a check made only while the pipeline is built would exit 1 (local) or end
    # in a traceback (kubeflow compiles the pipeline after the config has loaded).
    from pipeline.run import main

    path = write_config(
        tmp_path, {"evaluation.thresholds": {"accuracy_of_doom": {"lower_bound": 0.5}}})
    assert main(["--runner", runner, "--config", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ")
    assert str(path) in error
    assert "evaluation.thresholds: 'accuracy_of_doom' is not a TFMA or Keras metric" in error
    assert "Traceback" not in error
    assert not (tmp_path / "outputs").exists()  # nothing ran, nothing compiled


def test_thresholds_become_value_and_change_thresholds(tmp_path):
    from components.evaluator.eval_config import build_eval_config

    eval_config = build_eval_config(load_config(write_config(tmp_path, {
        "evaluation.thresholds": {"SparseCategoricalAccuracy": {"lower_bound": 0.9,
                                                                "max_decrease": 0.01}},
        "evaluation.threshold_slices": "overall"})))
    [metric] = [m for m in eval_config.metrics_specs[0].metrics
                if m.class_name == "SparseCategoricalAccuracy"]
    [threshold] = metric.per_slice_thresholds  # overall only, the default threshold_slices
    assert threshold.threshold.value_threshold.lower_bound.value == pytest.approx(0.9)
    assert threshold.threshold.change_threshold.absolute.value == pytest.approx(-0.01)
    assert [s.is_baseline for s in eval_config.model_specs] == [False, True]


@pytest.mark.parametrize("slices, overall_only", [("overall", True), ("every_slice", False)])
def test_threshold_slices_choose_where_thresholds_apply(tmp_path, slices, overall_only):
    from tensorflow_model_analysis.metrics import metric_specs
    from tensorflow_model_analysis.slicer import slicer_lib

    from components.evaluator.eval_config import build_eval_config

    eval_config = build_eval_config(load_config(
        write_config(tmp_path, {"evaluation.threshold_slices": slices})))
    thresholds = metric_specs.metric_thresholds_from_metrics_specs(
        eval_config.metrics_specs, eval_config)
    [(key, per_slice)] = [(k, v) for k, v in thresholds.items()
                          if k.name == "sparse_categorical_accuracy" and not k.is_diff]
    [(slice_spec, _)] = per_slice
    # TFMA's validator applies a threshold without a slice spec to every slice, and one with an
    # empty SlicingSpec to the overall slice only (metrics_validator, slicer_lib).
    one_value = ((CATEGORICAL, "some-value"),)
    applies = (lambda key: True) if slice_spec is None else (
        slicer_lib.SingleSliceSpec(spec=slice_spec).is_slice_applicable)
    assert applies(())
    assert applies(one_value) is not overall_only


def test_a_binary_and_a_regression_task_load_and_type_the_label(tmp_path):
    binary = load_config(write_config(tmp_path / "b", {
        "task": {"kind": "binary", "positive_class": "yes"},
        "evaluation.thresholds": {"AUC": {"lower_bound": 0.7, "max_decrease": 0.02}}}))
    assert binary.task.settings == {"positive_class": "yes", "decision_threshold": 0.5}
    assert binary.reader_features["label_kind"] == "text"  # a class name, "0" and "1" too
    regression = load_config(write_config(tmp_path / "r", REGRESSION))
    assert regression.reader_features["label_kind"] == "number"
    # The label drifts as a number does (Jensen-Shannon, the numeric threshold).
    assert regression.drift_thresholds()[NUMERIC] == regression.drift.numeric_threshold


# Multi-user KFP 2.15.0 to 2.17.0: the key the profile controller gives each namespace may use
# only mlpipeline/{artifacts,private-artifacts/<ns>,private/<ns>,shared}/* (manifests/kustomize/
# base/installs/multi-user/pipelines-profile-controller/sync.py, iam.put_user_policy).
MULTI_USER = {"kubeflow.multi_user": True, "kubeflow.namespace": "team-a",
              "kubeflow.pipeline_root": "s3://mlpipeline/private-artifacts/team-a/tfx/nightly",
              "kubeflow.input_base": "s3://mlpipeline/shared/data/nightly",
              "kubeflow.serving_dir": "s3://mlpipeline/private/team-a/serving"}


def test_multi_user_paths_under_the_namespaces_prefixes_load(tmp_path):
    kubeflow = load_config(write_config(tmp_path, MULTI_USER)).kubeflow
    assert (kubeflow.multi_user, kubeflow.namespace) == (True, "team-a")


@pytest.mark.parametrize("key, uri, why", [
    ("pipeline_root", "s3://mlpipeline/tfx/nightly", "outside those prefixes"),
    ("input_base", "s3://mlpipeline/data/nightly", "outside those prefixes"),
    ("serving_dir", "s3://mlpipeline/private/team-b/serving", "outside those prefixes"),
    ("input_base", "s3://acme-data/nightly", "bucket acme-data, not mlpipeline")])
def test_multi_user_paths_outside_the_namespaces_key_are_refused(tmp_path, key, uri, why):
    path = write_config(tmp_path, {**MULTI_USER, f"kubeflow.{key}": uri})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message and "  kubeflow: on multi-user KFP 2.17.0" in message
    assert "Secret mlpipeline-minio-artifact in team-a" in message
    assert f"{key} {uri} ({why})" in message
    assert ("s3://mlpipeline/artifacts/, s3://mlpipeline/private-artifacts/team-a/, "
            "s3://mlpipeline/private/team-a/, s3://mlpipeline/shared/") in message


@pytest.mark.parametrize("changes", [
    {"kubeflow.multi_user": False},  # single-user: the store's one key, any prefix
    {"kubeflow.backend_version": "2.14.4"},  # the controller copied the one MinIO key then
    {"kubeflow.object_store.secret": "team-a-s3"},  # a key of the team's own
    {"kubeflow.pipeline_root": "gs://acme/tfx/nightly"}])  # not the object store
def test_the_prefix_check_holds_only_for_the_controllers_scoped_key(tmp_path, changes):
    load_config(write_config(tmp_path, {**MULTI_USER, "kubeflow.pipeline_root":
                                        "s3://mlpipeline/tfx/nightly", **changes}))
