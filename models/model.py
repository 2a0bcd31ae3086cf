"""The tf_keras network and the Trainer's run_fn.

The Trainer reads the raw examples and applies Transform's graph in the input pipeline (Transform
runs with materialize=False): the same graph serves, so training and serving cannot drift apart.
"""
from __future__ import annotations

import logging
import time
from typing import List, Mapping

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx_bsl.public import tfxio

from models import distribution, export
from models.features import FeatureSpec, as_model_inputs, transformed_name


def build_model(spec: FeatureSpec, categorical_sizes: Mapping[str, int], num_classes: int,
                hidden_units: List[int], dropout: float, learning_rate: float) -> keras.Model:
    """A small MLP over z-scored numerics and one-hot categoricals; outputs float32 softmax."""
    inputs, encoded = {}, []
    for name in spec.numeric:
        key = transformed_name(name)
        inputs[key] = keras.Input(shape=(1,), name=key, dtype=tf.float32)
        encoded.append(inputs[key])
    for name in spec.categorical:
        key = transformed_name(name)
        inputs[key] = keras.Input(shape=(1,), name=key, dtype=tf.int64)
        encoded.append(keras.layers.CategoryEncoding(
            num_tokens=categorical_sizes[key], output_mode="one_hot", name=f"{key}_onehot")(
                inputs[key]))
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    for i, units in enumerate(hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    # float32 output under any mixed-precision policy: softmax in half precision loses accuracy.
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(
        logits)
    model = keras.Model(inputs=inputs, outputs=probabilities)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model


def make_dataset(file_pattern: List[str], data_accessor, tf_transform_output, spec: FeatureSpec,
                 batch_size: int, seed: int) -> tf.data.Dataset:
    """Raw examples -> Transform's graph -> (features, label) batches, cached after one pass."""
    raw = data_accessor.tf_dataset_factory(
        file_pattern,
        tfxio.TensorFlowDatasetOptions(batch_size=batch_size, num_epochs=1, shuffle=True,
                                       shuffle_seed=seed),
        tf_transform_output.raw_metadata.schema)
    transform = tf_transform_output.transform_features_layer()

    def to_model(raw_batch):
        transformed = transform(raw_batch)
        return as_model_inputs(transformed, spec), transformed[spec.label_xf]

    return (raw.map(to_model, num_parallel_calls=tf.data.AUTOTUNE).cache()
            .shuffle(64, seed=seed).repeat().prefetch(tf.data.AUTOTUNE))


def run_fn(fn_args: FnArgs) -> None:
    """The TFX Trainer entry point (referenced by module path from pipeline/pipeline.py)."""
    cfg = fn_args.custom_config
    spec = FeatureSpec.from_custom_config(cfg)
    training, model_cfg = cfg["training"], cfg["model"]
    keras.utils.set_random_seed(training["seed"])
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)

    strategy = distribution.make_strategy(training["distribution_strategy"],
                                          training.get("devices"), cfg.get("tf_config"))
    distribution.set_precision(training["precision"])
    train = make_dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, spec,
                         training["batch_size"], training["seed"])
    evaluation = make_dataset(fn_args.eval_files, fn_args.data_accessor, tf_transform_output,
                              spec, training["batch_size"], training["seed"])
    class_names = export.class_names(tf_transform_output, spec)
    with strategy.scope():
        model = build_model(
            spec, spec.categorical_sizes(
                {f: tf_transform_output.vocabulary_size_by_name(spec.vocabulary_name(f))
                 for f in spec.categorical}),
            len(class_names), model_cfg["hidden_units"], model_cfg["dropout"],
            model_cfg["learning_rate"])
    logging.info("training on %s with %d replica(s), precision %s",
                 type(strategy).__name__, strategy.num_replicas_in_sync, training["precision"])
    started = time.monotonic()
    model.fit(train, steps_per_epoch=fn_args.train_steps, validation_data=evaluation,
              validation_steps=fn_args.eval_steps, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(fn_args.model_run_dir)])
    logging.info("trained %d steps in %.1fs", fn_args.train_steps, time.monotonic() - started)
    started = time.monotonic()
    export.export_serving_model(model, tf_transform_output, spec, fn_args.serving_model_dir,
                                model_name=cfg["model_name"], warmup_files=fn_args.eval_files)
    logging.info("exported the serving model in %.1fs", time.monotonic() - started)
