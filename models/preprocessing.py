"""Transform's preprocessing of the features: derived from the config, so new columns need no code.

Numerics: z-scored over the values present, then missing values set to 0 (the training mean).
Categoricals: missing as their own token, then a vocabulary with OOV buckets.
Ids: a vocabulary of the top_k most frequent values (shared with the lists that name it: a click
history and the candidate are the same items) with OOV buckets, or hash buckets; 0 is reserved for
a missing id and a list's padding. Lists: each value as its element kind, then truncated or padded
to the configured length (ragged: as long as each is).
The label is the template's: Transform's entry (components/transform.py) adds it as the config's
task kind trains on it.
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


def _ragged(x) -> tf.RaggedTensor:
    """A feature's values per example, [batch, None] (a missing value: an empty row)."""
    if isinstance(x, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(x)
    return tf.RaggedTensor.from_tensor(tf.reshape(x, [tf.shape(x)[0], -1]))


def _shaped(values: tf.RaggedTensor, column: Mapping, padding):
    """A list's values as the config's length says: [batch, length] (truncated keeping the
    first or last values, padded at the end), or ragged as a SparseTensor."""
    length = column["length"]
    if length is None:
        return values.to_sparse()
    if column["keep"] == "last":
        starts = tf.maximum(values.row_lengths() - length, 0)
        values = tf.ragged.boolean_mask(
            values, tf.ragged.range(values.row_lengths()) >= tf.expand_dims(starts, 1))
    else:
        values = values[:, :length]
    return values.to_tensor(default_value=padding, shape=[None, length])


def _id_columns(inputs: Mapping[str, tf.Tensor], spec: FeatureSpec) -> Dict[str, tf.Tensor]:
    """Id columns and categorical lists as ids (0 reserved); features sharing a vocabulary have
    it computed once, over all their values."""
    values = {f: _ragged(inputs[f]) for f in spec.id_valued}
    sharing: Dict[str, list] = {}
    for f in spec.id_valued:
        sharing.setdefault(spec.vocabulary_name(f), []).append(f)
    vocabularies = {}  # vocabulary name -> the deferred vocabulary file
    outputs = {}
    for f in spec.id_valued:
        settings, vocabulary = spec.id_settings(f), spec.vocabulary_name(f)
        if settings.get("hash_buckets") is not None:
            ids = values[f].with_flat_values(tf.strings.to_hash_bucket_fast(
                values[f].flat_values, settings["hash_buckets"]) + 1)
        else:
            if vocabulary not in vocabularies:
                vocabularies[vocabulary] = tft.vocabulary(
                    tf.concat([values[g].flat_values for g in sharing[vocabulary]], axis=0),
                    top_k=settings.get("top_k"), vocab_filename=vocabulary)
            ids = values[f].with_flat_values(tft.apply_vocabulary(
                values[f].flat_values, vocabularies[vocabulary],
                num_oov_buckets=settings["oov_buckets"]) + 1)
        column = spec.lists.get(f)
        if column is None:  # one id: the first value, 0 when missing
            outputs[transformed_name(f)] = tf.reshape(
                ids[:, :1].to_tensor(default_value=0, shape=[None, 1]), [-1])
        else:
            outputs[transformed_name(f)] = _shaped(ids, column, tf.constant(0, tf.int64))
    return outputs


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
    outputs.update(_id_columns(inputs, spec))
    for name in spec.list_of("numeric"):
        values = _ragged(inputs[name])
        z_scores = values.with_flat_values(
            tft.scale_to_z_score(tf.cast(values.flat_values, tf.float32)))
        padding = spec.lists[name].get("padding")
        outputs[transformed_name(name)] = _shaped(
            z_scores, spec.lists[name], tf.constant(0.0 if padding is None else padding))
    return outputs
