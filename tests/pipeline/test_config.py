"""Config loading: the bundled config is valid, and each kind of mistake names the key and file."""
from __future__ import annotations

import pytest

from pipeline.config import ConfigError, load_config
from tests.helpers import DEFAULT_CONFIG, write_config


def test_bundled_config_loads_with_paths_relative_to_the_file():
    config = load_config(DEFAULT_CONFIG)
    assert config.features.label == "species"
    assert config.data.input_base == DEFAULT_CONFIG.parent.parent / "data" / "penguins"
    assert config.model_base_path == config.serving.serving_dir / "penguins"
    # Every output lands under the one output folder by default.
    for path in (config.pipeline_root, config.metadata_path, config.log_dir):
        assert config.runner.output_dir in path.parents


@pytest.mark.parametrize("changes, key, words", [
    ({"training.epochs": 3}, "training.epochs", "unknown key"),
    ({"training.batch_size": "many"}, "training.batch_size", "integer"),
    ({"training.distribution_strategy": "horovod"}, "training.distribution_strategy",
     "one_device"),
    ({"training.precision": "float8"}, "training.precision", "mixed_bfloat16"),
    ({"features.numeric": ["bill_length_mm", "species"]}, "features", "label"),
    ({"features.categorical": ["island", "bill_length_mm"]}, "features", "both"),
    ({"serving": None}, "serving", "required key is missing"),
    ({"evaluation.thresholds": {}}, "evaluation.thresholds", "no model will ever be blessed"),
    ({"evaluation.thresholds": {"SparseCategoricalAccuracy": {"max_decrease": 0.1,
                                                               "max_increase": 0.1}}},
     "evaluation.thresholds.SparseCategoricalAccuracy", "not both"),
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


def test_unknown_metric_name_fails_before_any_component(tmp_path):
    from pipeline.evaluation import build_eval_config

    config = load_config(write_config(
        tmp_path, {"evaluation.thresholds": {"accuracy_of_doom": {"lower_bound": 0.5}}}))
    with pytest.raises(ConfigError, match="'accuracy_of_doom' is not a TFMA or Keras metric"):
        build_eval_config(config)


def test_thresholds_become_value_and_change_thresholds(tmp_path):
    from pipeline.evaluation import build_eval_config

    eval_config = build_eval_config(load_config(DEFAULT_CONFIG))
    [metric] = [m for m in eval_config.metrics_specs[0].metrics
                if m.class_name == "SparseCategoricalAccuracy"]
    assert metric.threshold.value_threshold.lower_bound.value == pytest.approx(0.9)
    assert metric.threshold.change_threshold.absolute.value == pytest.approx(-0.01)
    assert [s.is_baseline for s in eval_config.model_specs] == [False, True]
