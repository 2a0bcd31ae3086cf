"""The config's id and list feature kinds, model_module and retrieval: what loads, what is refused
(naming the key), and that a loaded config validates again from its own dump (the Kubeflow run
report rebuilds the config from the JSON the compiler wrote)."""
from __future__ import annotations

import json

import pytest

from core.config import ConfigError, PipelineConfig, load_config
from tests.helpers import REPO

RECOMMENDER = REPO / "configs" / "recommender.yaml"


def test_the_recommender_config_loads_and_validates_again_from_its_dump():
    config = load_config(RECOMMENDER)
    assert config.model_module == "two_tower" and config.retrieval.k == 10
    assert config.features.lists["user_click_history"].vocabulary == "item_id"
    again = PipelineConfig.model_validate(json.loads(config.model_dump_json()))
    assert again == config
    assert config.reader_features["list_separator"] == "|"


def test_the_reader_gets_every_kind_of_feature_even_without_ids_or_lists():
    """One shape: the reader reads every key (none with a default of its own), so a config
    without ids or lists still sends them, empty (tests/components/test_one_config_shape.py)."""
    config = load_config()
    settings = config.reader_features
    assert (settings["ids"], settings["lists"]) == ({}, {})
    assert settings["list_separator"] == config.data.list_separator


@pytest.mark.parametrize("changes, words", [
    ({"features.lists.user_click_history.vocabulary": "device"},
     "lists.user_click_history.vocabulary is 'device', which is not an id column"),
    ({"features.lists.user_click_history.padding": 1.0}, "padding applies to numeric lists"),
    ({"features.lists.user_click_history.ids": {"top_k": 5}},
     "takes its ids settings from there; remove `ids`"),
    ({"features.lists.user_click_history": {"element": "numeric", "length": 3,
                                            "vocabulary": "item_id"}},
     "vocabulary applies to categorical lists only"),
    ({"features.lists.user_click_history.length": 0}, "greater than or equal to 1"),
    ({"features.ids.item_id": {"hash_buckets": 100, "top_k": 10}},
     "set either hash_buckets, or top_k and oov_buckets"),
    ({"retrieval.candidate": "device"}, "candidate 'device' is not an id column"),
    ({"features.ids.item_id": {"hash_buckets": 100}}, "candidate 'item_id' is hashed"),
    ({"task": {"kind": "multiclass"}, "evaluation.thresholds": {}},
     "task.kind must be binary"),
    ({"model_module": "no_such_model"}, "there is no models/no_such_model.py"),
    ({"model.hidden_units": [8]}, "'hidden_units' is not a hyper-parameter of build_model "
                                  "(models/two_tower.py"),
    ({"data.list_separator": ","}, "',' is CSV syntax"),
])
def test_bad_feature_kinds_are_refused_naming_the_key(changes, words):
    with pytest.raises(ConfigError) as error:
        load_config(RECOMMENDER, overrides=changes)
    assert words in str(error.value), str(error.value)
