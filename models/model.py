"""The tf_keras network: what a user edits to change the model.

The template's Trainer runtime (components/trainer/: run_fn, the input pipeline that applies
Transform's graph, distribution, export) calls build_model; nothing here imports it.
"""
from __future__ import annotations

from typing import Annotated, List, Mapping, Optional

import tensorflow as tf
import tf_keras as keras
from pydantic import Field

from models.features import FeatureSpec, transformed_name


@keras.utils.register_keras_serializable(package="models")
class OneHot(keras.layers.Layer):
    """Ids [batch, 1] -> one-hot [batch, num_tokens] in the compute dtype.

    Keras' CategoryEncoding counts with a bincount that XLA runs ~100x slower on CPU (and
    asserts on the ids); Transform's vocabulary with OOV buckets keeps ids in range anyway.
    """

    def __init__(self, num_tokens: int, **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = num_tokens

    def call(self, ids):
        return tf.one_hot(tf.reshape(ids, [-1]), self.num_tokens, dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens}


@keras.utils.register_keras_serializable(package="models")
class MaskedMean(keras.layers.Layer):
    """The mean of a list's vectors [batch, length, dim] over its positions that hold a value:
    ids other than the padding id 0, or numbers that are not NaN (a ragged list's padding). An
    empty list's mean is 0 (Keras' masked pooling divides by zero there)."""

    def call(self, values, present):
        present = tf.cast(present, values.dtype)
        if values.shape.rank == 3:
            present = tf.expand_dims(present, -1)
        total = tf.reduce_sum(tf.math.multiply_no_nan(values, present), axis=1)
        return total / tf.maximum(tf.reduce_sum(present, axis=1), 1.0)


def encoded_inputs(spec: FeatureSpec, categorical_sizes: Mapping[str, int],
                   embedding_dim: int, features: Optional[List[str]] = None,
                   embeddings: Optional[dict] = None):
    """(keras.Input per transformed feature, one encoded tensor per feature): numerics as they
    are, categoricals one-hot, ids embedded, lists embedded (or, numeric, as numbers) and
    averaged over their values. `embeddings`: layers by vocabulary name, shared by the features
    of one vocabulary (filled in as they are made)."""
    embeddings = {} if embeddings is None else embeddings
    inputs, encoded = {}, []
    for name in spec.inputs if features is None else features:
        key, column = transformed_name(name), spec.lists.get(name)
        length = column["length"] if column else 1
        if name in spec.numeric or (column and column["element"] == "numeric"):
            inputs[key] = keras.Input(shape=(length,), name=key, dtype=tf.float32)
            if column and length is None:
                values = inputs[key]
                encoded.append(MaskedMean(name=f"{key}_mean")(
                    tf.expand_dims(values, -1), tf.logical_not(tf.math.is_nan(values))))
            else:
                encoded.append(inputs[key])
            continue
        inputs[key] = keras.Input(shape=(length,), name=key, dtype=tf.int64)
        if name in spec.categorical:
            encoded.append(OneHot(categorical_sizes[key], name=f"{key}_onehot")(inputs[key]))
            continue
        vocabulary = spec.vocabulary_name(name)
        if vocabulary not in embeddings:
            embeddings[vocabulary] = keras.layers.Embedding(
                categorical_sizes[key], embedding_dim, name=f"{vocabulary}_embedding")
        vectors = embeddings[vocabulary](inputs[key])
        encoded.append(MaskedMean(name=f"{key}_mean")(vectors, tf.not_equal(inputs[key], 0)))
    return inputs, encoded


def compiled(model: keras.Model, head, learning_rate: float, jit_compile: bool,
             steps_per_execution: int) -> keras.Model:
    """The model compiled with Adam and the head's loss and metrics."""
    optimizer = keras.optimizers.Adam(learning_rate)
    if keras.mixed_precision.global_policy().name == "mixed_float16":
        # float16 gradients underflow without it; bfloat16 has float32's range and needs none.
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss=head.loss(), metrics=head.metrics(),
                  jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model


def build_model(spec: FeatureSpec, categorical_sizes: Mapping[str, int], head, *,
                hidden_units: Annotated[List[Annotated[int, Field(ge=1)]],
                                        Field(min_length=1)] = (32, 16),
                dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0,
                learning_rate: Annotated[float, Field(gt=0.0)] = 0.01,
                embedding_dim: Annotated[int, Field(ge=1)] = 16,
                jit_compile: bool = False, steps_per_execution: int = 1) -> keras.Model:
    """A small MLP over z-scored numerics, one-hot categoricals and embedded ids and lists
    (averaged over a list's values), for any task kind.

    `head` is what the config's task kind adds (the template's, components/heads.py): `head(x)`
    puts its output layer on the network's last tensor (float32 under any precision policy: a
    softmax, a sigmoid or a value in the label's units), and the model is compiled with its
    `head.loss()` and `head.metrics()`.

    The keyword-only parameters but jit_compile and steps_per_execution (set from `training:`)
    are the hyper-parameters: the config's `model:` section sets them, checked on load against
    these annotations (core/hyperparameters.py). A new one is a new keyword argument here.

    Layers take the Keras dtype policy in force when this runs (see
    distribution.precision_policy); under mixed_float16 the loss is scaled.
    """
    inputs, encoded = encoded_inputs(spec, categorical_sizes, embedding_dim)
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    for i, units in enumerate(hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    return compiled(keras.Model(inputs=inputs, outputs=head(x)), head, learning_rate,
                    jit_compile, steps_per_execution)

