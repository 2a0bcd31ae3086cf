"""Transform's preprocessing_fn: derived from the config, so new columns need no code.

Numerics: z-scored over the values present, then missing values set to 0 (the training mean).
Categoricals: missing as their own token, then a vocabulary with OOV buckets. Label, by task
(the config's `task:`): multiclass, the id in a vocabulary of class names; binary, 1 for the
positive class and 0 for any other value (the vocabulary of values is still written: the export
names the negative class from it); regression, the number as float32 (a missing label, which the
schema gate refuses when the reviewed schema requires the label, becomes the label's mean).
"""
from __future__ import annotations

from typing import Dict, Mapping

import tensorflow as tf
import tensorflow_transform as tft

from models.features import BINARY, REGRESSION, FeatureSpec, transformed_name

MISSING_TOKEN = "__missing__"


def _fill(x, default) -> tf.Tensor:
    """A rank-1 dense tensor from a feature that may be sparse (missing values) or dense."""
    if isinstance(x, tf.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default)
    return tf.reshape(x, [-1])


def preprocessing_fn(inputs: Mapping[str, tf.Tensor], custom_config: Mapping
                     ) -> Dict[str, tf.Tensor]:
    spec = FeatureSpec.from_custom_config(custom_config)
    outputs = {}
    for name in spec.numeric:
        # Statistics over the present values only; one analysis pass (no mean-then-scale phase).
        z_scores = tft.scale_to_z_score(tf.cast(inputs[name], tf.float32))
        outputs[transformed_name(name)] = _fill(z_scores, 0.0)
    for name in spec.categorical:
        outputs[transformed_name(name)] = tft.compute_and_apply_vocabulary(
            _fill(inputs[name], MISSING_TOKEN), num_oov_buckets=spec.num_oov_buckets,
            vocab_filename=spec.vocabulary_name(name))
    outputs[spec.label_xf] = _label(inputs[spec.label], spec)
    return outputs


def _label(label, spec: FeatureSpec) -> tf.Tensor:
    if spec.task == REGRESSION:
        values = tf.cast(label, tf.float32)
        return _fill(values, tft.mean(values))
    names = _fill(label, "")
    if spec.task == BINARY:
        tft.vocabulary(names, vocab_filename=spec.vocabulary_name(spec.label))
        return tf.cast(tf.equal(names, spec.positive_class), tf.int64)
    return tft.compute_and_apply_vocabulary(names, vocab_filename=spec.vocabulary_name(spec.label))
