"""The exported SavedModel: what TF Serving, TFMA and the warmup replay all see.

Signatures:
- serving_default(examples): serialized tf.Examples of raw features (label absent).
- raw_features(<feature>...): one rank-1 tensor per raw feature, for REST `instances` JSON; a
  missing value is NaN (numeric) or "" (text).
- transform_features(examples): the transformed features, label included; TFMA's preprocessing.
Both prediction signatures return the task kind's outputs (core/tasks.py Task.outputs), from
the model's float32 output by its head (components/heads.py serving_outputs).
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from components.heads import Head
from models.features import FeatureSpec, as_model_inputs

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
PREDICT_SIGNATURES = ("serving_default", "raw_features")


def _sparse_from_dense(values: tf.Tensor) -> tf.SparseTensor:
    """A [batch, 1] SparseTensor holding the present cells: NaN or "" marks a missing value."""
    present = (tf.not_equal(values, "") if values.dtype == tf.string
               else tf.logical_not(tf.math.is_nan(values)))
    rows = tf.where(present)
    return tf.SparseTensor(tf.concat([rows, tf.zeros_like(rows)], axis=1),
                           tf.boolean_mask(values, present),
                           tf.stack([tf.shape(values, out_type=tf.int64)[0], 1]))


def _serving_inputs(raw_feature_spec: Mapping, spec: FeatureSpec) -> Dict[str, tf.TensorSpec]:
    return {name: tf.TensorSpec([None], raw_feature_spec[name].dtype, name=name)
            for name in spec.inputs}


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

    def predict(layer, raw_features):
        return head.serving_outputs(
            tf.cast(model(as_model_inputs(layer(raw_features), spec)), tf.float32))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(examples):
        return predict(model.tft_layer_examples, tf.io.parse_example(examples, serving_spec))

    @tf.function(input_signature=[_serving_inputs(raw_spec, spec)])
    def serve_raw(features):
        inputs = {name: (_sparse_from_dense(features[name])
                         if isinstance(raw_spec[name], tf.io.VarLenFeature) else features[name])
                  for name in spec.inputs}
        return predict(model.tft_layer_raw, inputs)

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
    model.save(serving_dir, save_format="tf", signatures=signatures)
    write_warmup_requests(serving_dir, model_name, _sample_examples(warmup_files, warmup_rows),
                          {name: serving_spec[name].dtype for name in spec.inputs})


def _sample_examples(file_patterns: List[str], count: int) -> List[bytes]:
    files = [f for pattern in file_patterns for f in tf.io.gfile.glob(pattern)]
    dataset = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP").take(count)
    return [record.numpy() for record in dataset]


def _raw_columns(examples: List[bytes], dtypes: Dict[str, tf.DType]) -> Dict[str, list]:
    """The rows as raw_features takes them: one column per feature, NaN or "" when missing."""
    columns: Dict[str, list] = {name: [] for name in dtypes}
    for serialized in examples:
        features = tf.train.Example.FromString(serialized).features.feature
        for name, dtype in dtypes.items():
            if dtype == tf.string:
                values = features[name].bytes_list.value if name in features else []
                columns[name].append(values[0] if values else b"")
            else:
                values = features[name].float_list.value if name in features else []
                columns[name].append(values[0] if values else float("nan"))
    return columns


def write_warmup_requests(serving_dir: str, model_name: str, examples: List[bytes],
                          raw_dtypes: Dict[str, tf.DType]) -> str:
    """TF Serving replays these at load, so the first real request does not pay for tracing.

    For both prediction signatures, one request per batch size traffic is likely to use (1 and
    all the sample rows): each signature is a separate function to warm.
    """
    path = os.path.join(serving_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for signature in PREDICT_SIGNATURES:
            for batch in (examples[:1], examples):
                request = predict_pb2.PredictRequest(
                    model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
                if signature == "serving_default":
                    inputs = {"examples": tf.make_tensor_proto(batch, dtype=tf.string)}
                else:
                    inputs = {name: tf.make_tensor_proto(values, dtype=raw_dtypes[name])
                              for name, values in _raw_columns(batch, raw_dtypes).items()}
                for name, tensor in inputs.items():
                    request.inputs[name].CopyFrom(tensor)
                log = prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request))
                writer.write(log.SerializeToString())
    return path
