"""Strategy, cluster and precision settings: every bad one fails (or warns) before training."""
from __future__ import annotations

import json
import logging
import types

import pytest

from core.config import TrainingConfig

TWO_WORKERS = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
               "task": {"type": "worker", "index": 1}}
PS_CLUSTER = {"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
              "task": {"type": "ps", "index": 0}}


def test_single_process_strategies_ignore_tf_config():
    from components.trainer.distribution import Cluster, parse_tf_config

    assert parse_tf_config("one_device", "not json") == Cluster()
    assert Cluster().is_chief


def test_tf_config_is_parsed_into_the_cluster_and_this_task():
    from components.trainer.distribution import Cluster, parse_tf_config

    cluster = parse_tf_config("multi_worker_mirrored", json.dumps(TWO_WORKERS))
    assert cluster.jobs == TWO_WORKERS["cluster"] and cluster.task == "worker:1"
    assert not cluster.is_chief
    assert Cluster({"worker": ["a:1", "b:1"]}, "worker", 0).is_chief
    assert Cluster({"chief": ["a:1"], "worker": ["b:1"]}, "chief", 0).is_chief
    assert not Cluster({"chief": ["a:1"], "worker": ["b:1"]}, "worker", 0).is_chief
    assert parse_tf_config("parameter_server", json.dumps(PS_CLUSTER)).task == "ps:0"


@pytest.mark.parametrize("strategy, value, words", [
    ("multi_worker_mirrored", None, "TF_CONFIG environment variable"),
    ("multi_worker_mirrored", "", "it is not set"),
    ("multi_worker_mirrored", "{not json", "malformed"),
    ("multi_worker_mirrored", json.dumps({"cluster": {"worker": ["h:1"]}}), "malformed"),
    ("multi_worker_mirrored", json.dumps({"cluster": {"worker": ["nohostport"]},
                                          "task": {"type": "worker", "index": 0}}), "host:port"),
    ("multi_worker_mirrored", json.dumps({**TWO_WORKERS, "task": {"type": "worker",
                                                                   "index": 2}}),
     "not in its cluster"),
    ("multi_worker_mirrored", json.dumps({**PS_CLUSTER, "task": {"type": "worker",
                                                                  "index": 0}}),
     "needs 'worker'"),
    ("parameter_server", None, "not set"),
    ("parameter_server", json.dumps(TWO_WORKERS), "missing ['chief', 'ps']"),
])
def test_missing_or_malformed_tf_config_is_a_clear_error(strategy, value, words):
    from components.trainer.distribution import TrainingSetupError, parse_tf_config

    with pytest.raises(TrainingSetupError, match=None) as error:
        parse_tf_config(strategy, value)
    assert words in str(error.value)


def _training(**changes) -> TrainingConfig:
    """The section as the executor gets it; unvalidated, for settings the config would refuse
    before make_strategy sees them."""
    return TrainingConfig.model_construct(**{**TrainingConfig().model_dump(), **changes})


@pytest.mark.parametrize("changes, words", [
    ({"distribution_strategy": "horovod"}, "unknown distribution_strategy 'horovod'"),
    ({"distribution_strategy": "mirrored", "devices": ["/gpu:7"]}, "do not exist here"),
    ({"distribution_strategy": "mirrored", "devices": ["/cpu:0", "/cpu:3"]}, "'/cpu:3'"),
    ({"distribution_strategy": "multi_worker_mirrored", "collective_implementation": "nccl"},
     "needs GPUs"),
    ({"distribution_strategy": "tpu", "tpu": "local"}, "found no TPU"),
])
def test_impossible_strategy_settings_fail_before_training(changes, words):
    from components.trainer import distribution
    from components.trainer.distribution import Cluster, TrainingSetupError

    with pytest.raises(TrainingSetupError) as error:
        distribution.make_strategy(_training(**changes), Cluster())
    assert words in str(error.value)


def test_mirrored_on_an_existing_device_subset_and_one_device_work():
    import tensorflow as tf
    from components.trainer import distribution
    from components.trainer.distribution import Cluster

    strategy = distribution.make_strategy(
        _training(distribution_strategy="mirrored", devices=["/cpu:0"]), Cluster())
    assert strategy.num_replicas_in_sync == 1
    assert isinstance(distribution.make_strategy(_training(), Cluster()),
                      tf.distribute.OneDeviceStrategy)


def test_global_batch_must_split_evenly_over_replicas():
    from components.trainer import distribution
    from components.trainer.distribution import TrainingSetupError

    three = types.SimpleNamespace(num_replicas_in_sync=3)
    assert distribution.check_batch(33, three) == 11
    with pytest.raises(TrainingSetupError, match="multiple of 3"):
        distribution.check_batch(32, three)


def test_float16_on_a_cpu_only_machine_warns(caplog):
    import tensorflow as tf
    from components.trainer import distribution

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is present")
    with caplog.at_level(logging.WARNING):
        distribution.check_precision("mixed_float16", tf.distribute.get_strategy())
    assert "without a GPU" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        distribution.check_precision("mixed_bfloat16", tf.distribute.get_strategy())
    assert caplog.text == ""


def test_precision_policy_is_scoped_to_model_building():
    import tf_keras as keras
    from components.trainer import distribution

    before = keras.mixed_precision.global_policy().name
    with distribution.precision_policy("mixed_bfloat16"):
        layer = keras.layers.Dense(2)
    assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
    assert keras.mixed_precision.global_policy().name == before


def test_scratch_is_used_off_the_chief_and_removed(tmp_path):
    import tensorflow as tf
    from components.trainer import distribution
    from components.trainer.distribution import Cluster

    target = str(tmp_path / "model")
    assert distribution.write_dir(target, Cluster()) == target
    scratch = distribution.write_dir(target, Cluster({"worker": ["a:1", "b:1"]}, "worker", 1))
    assert scratch != target
    tf.io.gfile.makedirs(scratch + "/x")
    distribution.discard(scratch, target)
    assert not tf.io.gfile.exists(scratch)
    distribution.discard(target, target)  # never removes the target


@pytest.mark.parametrize("changes, words", [
    ({"devices": ["/gpu:0"]}, "mirrored strategy only"),
    ({"distribution_strategy": "mirrored", "devices": ["/gpu:0", "/gpu:0"]}, "twice"),
    ({"collective_implementation": "ring"}, "applies to mirrored and multi_worker_mirrored"),
    ({"distribution_strategy": "mirrored", "collective_implementation": "ring"},
     "'ring' is for multi_worker_mirrored"),
    ({"distribution_strategy": "tpu"}, "needs 'tpu'"),
    ({"tpu": "local"}, "tpu strategy only"),
    ({"distribution_strategy": "tpu", "tpu": "local", "precision": "mixed_float16"},
     "bfloat16"),
    ({"train_steps": 10, "steps_per_epoch": 20}, "more than train_steps"),
    ({"distribution_strategy": "horovod"}, "parameter_server"),
    ({"collective_implementation": "gloo"}, "nccl"),
])
def test_config_rejects_inconsistent_training_settings(changes, words):
    with pytest.raises(ValueError) as error:
        TrainingConfig(**changes)
    assert words in str(error.value)
