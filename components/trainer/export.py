"""The exported SavedModel: what TF Serving, TFMA and the warmup replay all see.

Signatures:
- serving_default(examples): serialized tf.Examples of raw features (label absent).
- raw_features(<feature>...): one tensor per raw feature, for REST `instances` JSON: rank 1, or
  [batch, values] for a list feature (a JSON list per row; rows of one request padded to one
  length); a missing value (or a list's padding) is NaN (numeric) or "" (text).
- transform_features(examples): the transformed features, label included; TFMA's preprocessing.
- retrieve(<query feature>...), with the config's `retrieval`: the k items of the candidate
  column's vocabulary whose candidate-tower vectors score highest against the query tower's
  vector of the other inputs (as raw_features takes them): `item_ids` and `scores` [batch, k].
  Beside it, ITEMS_FILE (assets.extra/, which TF Serving does not read) lists the candidates it
  ranks, most frequent in the training data first, and k: what the recommend endpoint validates
  item ids against and serves as its popularity fallback for this very version
  (service/endpoint/model_items.py).
Both prediction signatures return the task kind's outputs (core/tasks.py Task.outputs), from
the model's float32 output by its head (components/heads.py serving_outputs).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Mapping, Optional

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from components.heads import Head
from components.trainer import retrieval, warmup
from core import storage
from models.features import FeatureSpec, as_model_inputs, transformed_name
from models.two_tower import CANDIDATE_TOWER, QUERY_TOWER

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
ITEMS_FILE = os.path.join("assets.extra", "retrieval_items.json")
PREDICT_SIGNATURES = ("serving_default", "raw_features")
RETRIEVE = "retrieve"


def _sparse_from_dense(values: tf.Tensor) -> tf.SparseTensor:
    """A [batch, values] SparseTensor holding the present cells, as parsing a tf.Example gives:
    NaN or "" marks a missing value (a list's padding), wherever it is in the row."""
    values = tf.reshape(values, [tf.shape(values)[0], -1])  # rank 1: one value per row
    present = (tf.not_equal(values, "") if values.dtype == tf.string
               else tf.logical_not(tf.math.is_nan(values)))
    return tf.ragged.boolean_mask(values, present).to_sparse()


def _serving_inputs(raw_feature_spec: Mapping, spec: FeatureSpec,
                    features: Optional[List[str]] = None) -> Dict[str, tf.TensorSpec]:
    return {name: tf.TensorSpec([None, None] if name in spec.lists else [None],
                                raw_feature_spec[name].dtype, name=name)
            for name in (spec.inputs if features is None else features)}


def export_serving_model(model: keras.Model, head: Head,
                         tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec,
                         serving_dir: str, model_name: str, warmup_files: List[str],
                         warmup_rows: int = 8) -> None:
    """Saves model + Transform graph as one SavedModel with the three signatures and warmup;
    `head`: the one the model was built with."""
    raw_spec = tf_transform_output.raw_feature_spec()
    serving_spec = {k: v for k, v in raw_spec.items() if k in spec.inputs}
    # One Transform layer per signature (tensorflow/tfx#2920).
    model.tft_layer_examples = tf_transform_output.transform_features_layer()
    model.tft_layer_raw = tf_transform_output.transform_features_layer()
    model.tft_layer_eval = tf_transform_output.transform_features_layer()

    def sparse_inputs(features):
        return {name: (_sparse_from_dense(features[name])
                       if isinstance(raw_spec[name], tf.io.VarLenFeature) else features[name])
                for name in features}

    def predict(layer, raw_features):
        return head.serving_outputs(
            tf.cast(model(as_model_inputs(layer(raw_features), spec)), tf.float32))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(examples):
        return predict(model.tft_layer_examples, tf.io.parse_example(examples, serving_spec))

    @tf.function(input_signature=[_serving_inputs(raw_spec, spec)])
    def serve_raw(features):
        return predict(model.tft_layer_raw, sparse_inputs(features))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_features(examples):
        return model.tft_layer_eval(tf.io.parse_example(examples, raw_spec))

    signatures = {
        "serving_default": serve_examples.get_concrete_function(),
        # A flat keyword signature: TF Serving's REST `instances` rows map onto its inputs.
        "raw_features": tf.function(lambda **kw: serve_raw(kw)).get_concrete_function(
            **_serving_inputs(raw_spec, spec)),
        "transform_features": transform_features.get_concrete_function(),
    }
    if spec.retrieval:
        signatures[RETRIEVE] = _retrieve_signature(model, tf_transform_output, spec, raw_spec,
                                                   sparse_inputs)
    model.save(serving_dir, save_format="tf", signatures=signatures)
    write_warmup_requests(serving_dir, model_name, _sample_examples(warmup_files, warmup_rows),
                          {name: serving_spec[name].dtype for name in spec.inputs}, spec)
    if spec.retrieval:
        _write_items(serving_dir, tf_transform_output, spec)


def _retrieve_signature(model: keras.Model, tf_transform_output: tft.TFTransformOutput,
                        spec: FeatureSpec, raw_spec: Mapping, sparse_inputs):
    """`retrieve`: the query tower's vector of the query features against every candidate's,
    which are computed here once and kept in the SavedModel (components/trainer/retrieval.py)."""
    try:
        query_tower = model.get_layer(QUERY_TOWER)
        candidate_tower = model.get_layer(CANDIDATE_TOWER)
    except ValueError:
        raise ValueError(f"the config's `retrieval` needs a model with the sub-models "
                         f"'{QUERY_TOWER}' and '{CANDIDATE_TOWER}' (models/two_tower.py); this "
                         "model has neither: set model_module: two_tower, or remove "
                         "`retrieval`") from None
    candidate = spec.retrieval["candidate"]
    names = tf_transform_output.vocabulary_by_name(spec.vocabulary_name(candidate))
    model.top_k = retrieval.BruteForceTopK(
        retrieval.candidate_embeddings(candidate_tower, transformed_name(candidate), len(names)),
        names, int(spec.retrieval["k"]))
    model.tft_layer_retrieve = tf_transform_output.transform_features_layer()
    query_features = spec.query_inputs

    def query_vectors(features):
        transformed = model.tft_layer_retrieve(sparse_inputs(features))
        return query_tower(as_model_inputs(transformed, spec, query_features))

    return retrieval.retrieval_signature(model.top_k, query_vectors,
                                         _serving_inputs(raw_spec, spec, query_features))


def _write_items(serving_dir: str, tf_transform_output: tft.TFTransformOutput,
                 spec: FeatureSpec) -> None:
    """ITEMS_FILE: the vocabulary `retrieve` ranks (Transform's order: most frequent in the
    training split first, so its first k are what the Trainer measures as the popularity
    floor), the candidate feature and k."""
    candidate = spec.retrieval["candidate"]
    names = tf_transform_output.vocabulary_by_name(spec.vocabulary_name(candidate))
    items = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]
    # assets.extra/ exists: the warmup file is in it (no second makedirs: on S3 it would write
    # a folder-marker object).
    with tf.io.gfile.GFile(os.path.join(serving_dir, ITEMS_FILE), "w") as f:
        json.dump({"schema": 1, "feature": candidate, "k": int(spec.retrieval["k"]),
                   "items": items}, f)


def _sample_examples(file_patterns: List[str], count: int) -> List[bytes]:
    files = [f for pattern in file_patterns for f in tf.io.gfile.glob(pattern)]
    dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP").take(count)
    return [record.numpy() for record in dataset]


def _raw_columns(examples: List[bytes], dtypes: Dict[str, tf.DType], spec: FeatureSpec
                 ) -> Dict[str, list]:
    """The rows as raw_features takes them: one column per feature, NaN or "" when missing; a
    list feature's rows padded with them to the batch's longest."""
    columns: Dict[str, list] = {name: [] for name in dtypes}
    for serialized in examples:
        features = tf.train.Example.FromString(serialized).features.feature
        for name, dtype in dtypes.items():
            kind = "bytes_list" if dtype == tf.string else "float_list"
            values = list(getattr(features[name], kind).value) if name in features else []
            if name in spec.lists:
                columns[name].append(values)
            else:
                columns[name].append(values[0] if values else (b"" if dtype == tf.string
                                                               else float("nan")))
    for name in spec.lists:
        if name in columns:
            width = max([len(row) for row in columns[name]] + [1])
            pad = b"" if dtypes[name] == tf.string else float("nan")
            columns[name] = [row + [pad] * (width - len(row)) for row in columns[name]]
    return columns


def write_warmup_requests(serving_dir: str, model_name: str, examples: List[bytes],
                          raw_dtypes: Dict[str, tf.DType], spec: FeatureSpec) -> str:
    """TF Serving replays these at load, so the first real request does not pay for tracing.

    For every signature clients call (both prediction signatures, and `retrieve` when there is
    one), one request per batch size traffic is likely to use (1 and all the sample rows): each
    signature is a separate function to warm.

    The records are then replayed as the server replays them (components/trainer/warmup.py):
    each tensor in its own dtype, which must be the signature's exactly (TF Serving casts
    nothing, so a float64 record for a float32 input fails the whole version's load), of the
    signature's rank and fixed sizes. A record it would refuse fails the export (WarmupError).
    """
    path = os.path.join(serving_dir, WARMUP_FILE)
    storage.makedirs(os.path.dirname(path), tf.io.gfile.makedirs)
    signatures = [*PREDICT_SIGNATURES, *([RETRIEVE] if spec.retrieval else [])]
    with tf.io.TFRecordWriter(path) as writer:
        for signature in signatures:
            for batch in (examples[:1], examples):
                request = predict_pb2.PredictRequest(
                    model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
                if signature == "serving_default":
                    inputs = {"examples": tf.make_tensor_proto(batch, dtype=tf.string)}
                else:
                    wanted = spec.query_inputs if signature == RETRIEVE else spec.inputs
                    inputs = {name: tf.make_tensor_proto(values, dtype=raw_dtypes[name])
                              for name, values in _raw_columns(batch, raw_dtypes, spec).items()
                              if name in wanted}
                for name, tensor in inputs.items():
                    request.inputs[name].CopyFrom(tensor)
                log = prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request))
                writer.write(log.SerializeToString())
    warmup.replay(serving_dir)
    return path
