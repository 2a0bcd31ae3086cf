"""The exported SavedModel: what TF Serving, TFMA and the warmup replay all see.

Signatures:
- serving_default(examples): serialized tf.Examples of raw features (label absent).
- raw_features(<feature>...): one rank-1 tensor per raw feature, for REST `instances` JSON; a
  missing value is NaN (numeric) or "" (text).
- transform_features(examples): the transformed features, label included; TFMA's preprocessing.
Both prediction signatures return, by task (the config's `task:`):
- multiclass: `probabilities` (float32 [batch, classes], the label vocabulary's order) and
  `class_name` (the most probable class);
- binary: `probability` (float32 [batch], of task.positive_class) and `class_name` (the positive
  class when probability >= task.decision_threshold, else the negative class: the label's other
  value in the training data, from Transform's vocabulary of label values);
- regression: `value` (float32 [batch]), in the label's units.
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from models.features import BINARY, MULTICLASS, REGRESSION, FeatureSpec, as_model_inputs

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
PREDICT_SIGNATURES = ("serving_default", "raw_features")


class LabelError(ValueError):
    """Training labels that do not fit the configured task; the message says what to do."""


def class_names(tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec) -> List[str]:
    """multiclass: the class names in the order of the model's outputs (the label vocabulary's
    order); binary: [negative, positive], checked: the training labels must be exactly two
    values, one of them task.positive_class."""
    values = [v.decode() if isinstance(v, bytes) else v
              for v in tf_transform_output.vocabulary_by_name(spec.vocabulary_name(spec.label))]
    if spec.task != BINARY:
        return values
    others = [v for v in values if v != spec.positive_class]
    if spec.positive_class not in values or len(others) != 1:
        raise LabelError(
            f"task.positive_class is '{spec.positive_class}' but the training data's label "
            f"'{spec.label}' has the values {sorted(values)}: a binary task needs exactly two, "
            "one of them positive_class (values compare as text: quote it as it is written in "
            "the CSV); fix positive_class, or use task.kind multiclass")
    return [others[0], spec.positive_class]


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


def export_serving_model(model: keras.Model, tf_transform_output: tft.TFTransformOutput,
                         spec: FeatureSpec, serving_dir: str, model_name: str,
                         warmup_files: List[str], warmup_rows: int = 8) -> None:
    """Saves model + Transform graph as one SavedModel with the three signatures and warmup."""
    raw_spec = tf_transform_output.raw_feature_spec()
    serving_spec = {k: v for k, v in raw_spec.items() if k in spec.inputs}
    names = tf.constant(class_names(tf_transform_output, spec)) if spec.task != REGRESSION \
        else None
    # One Transform layer per signature (tensorflow/tfx#2920).
    model.tft_layer_examples = tf_transform_output.transform_features_layer()
    model.tft_layer_raw = tf_transform_output.transform_features_layer()
    model.tft_layer_eval = tf_transform_output.transform_features_layer()

    def predict(layer, raw_features):
        output = tf.cast(model(as_model_inputs(layer(raw_features), spec)), tf.float32)
        if spec.task == MULTICLASS:
            return {"probabilities": output,
                    "class_name": tf.gather(names, tf.argmax(output, axis=1))}
        output = tf.reshape(output, [-1])
        if spec.task == REGRESSION:
            return {"value": output}
        positive = tf.cast(output >= spec.decision_threshold, tf.int32)
        return {"probability": output, "class_name": tf.gather(names, positive)}

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
