"""Transform's preprocessing of the features: derived from the config, so new columns need no code.

Numerics: z-scored over the values present, then missing values set to 0 (the training mean).
Categoricals: missing as their own token, then a vocabulary with OOV buckets. The label is the
template's: Transform's entry (components/transform.py) adds it as the config's task kind trains
on it.
"""
from __future__ import annotations

from typing import Dict, Mapping

import tensorflow as tf
import tensorflow_transform as tft

from models.features import FeatureSpec, transformed_name

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
    return outputs
