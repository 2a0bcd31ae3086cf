"""The tf.distribute strategy and precision policy named in the config, built with clear errors."""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

import tensorflow as tf
import tf_keras as keras


class TrainingSetupError(ValueError):
    """A strategy or precision setting that cannot work on this machine or cluster."""


def _cluster_from_tf_config(strategy: str, tf_config: Optional[str]) -> dict:
    if not tf_config:
        raise TrainingSetupError(
            f"distribution_strategy '{strategy}' needs the cluster in the TF_CONFIG environment "
            "variable (set by Kubeflow's TFJob or Vertex); it is not set")
    try:
        parsed = json.loads(tf_config)
        cluster, task = parsed["cluster"], parsed["task"]
        task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise TrainingSetupError(
            f"TF_CONFIG is malformed for '{strategy}' ({e!r}); expected JSON like "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}'
        ) from None
    return {"cluster": cluster, "task": task}


def make_strategy(name: str, devices: Optional[list] = None,
                  tf_config: Optional[str] = None) -> tf.distribute.Strategy:
    """Builds the strategy; TF_CONFIG is passed in by the caller, not read here."""
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        if devices:
            known = {d.name for d in tf.config.list_logical_devices()}
            known |= {n.replace("/job:localhost/replica:0/task:0", "") for n in known}
            missing = [d for d in devices if d not in known]
            if missing:
                raise TrainingSetupError(
                    f"mirrored devices {missing} do not exist here; available: {sorted(known)}")
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker_mirrored":
        _cluster_from_tf_config(name, tf_config)
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "parameter_server":
        _cluster_from_tf_config(name, tf_config)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    if name == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as e:
            raise TrainingSetupError(f"distribution_strategy 'tpu' found no TPU here: {e}") from None
        return tf.distribute.TPUStrategy(resolver)
    raise TrainingSetupError(f"unknown distribution_strategy '{name}'")


def set_precision(policy: str) -> None:
    """Sets the Keras global policy; the model keeps its output layer float32 regardless."""
    if policy == "mixed_float16" and not tf.config.list_logical_devices("GPU"):
        logging.warning("precision 'mixed_float16' on a machine without a GPU runs slower than "
                        "float32 and gains nothing; use float32 or mixed_bfloat16 here")
    keras.mixed_precision.set_global_policy(policy)


def tf_config_from_env() -> Optional[str]:
    """The one place that reads TF_CONFIG: entry points call it and pass the value down."""
    return os.environ.get("TF_CONFIG")
