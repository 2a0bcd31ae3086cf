"""A SavedModel loaded the way TF Serving loads it: the TF1 loader, in its own graph and session.

tf.saved_model.load (TF2) can run a model that the TF1 loader cannot (a Keras 3 export did exactly
that), so the serving tests run signatures through a session, as the server does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

from components.trainer.warmup import request_problem
from devtools.tf_serving.rapidjson import DEFAULT_SERVER_VERSION
from devtools.tf_serving.rest_stub import StubError, row_format_inputs


class SessionModel:
    def __init__(self, model_dir: Path):
        self.session = tf.compat.v1.Session(graph=tf.Graph())
        meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], str(model_dir))
        self.signatures = dict(meta_graph.signature_def)

    def run(self, signature: str, inputs: Mapping[str, object]) -> Dict[str, np.ndarray]:
        """Outputs of one signature; inputs keyed by the signature's input names, all of them."""
        spec = self.signatures[signature]
        if set(inputs) != set(spec.inputs):
            raise KeyError(f"{signature} takes inputs {sorted(spec.inputs)}, got {sorted(inputs)}")
        feed = {spec.inputs[name].name:
                np.asarray(value, dtype=tf.dtypes.as_dtype(spec.inputs[name].dtype).as_numpy_dtype)
                for name, value in inputs.items()}
        return self.session.run({name: info.name for name, info in spec.outputs.items()}, feed)

    def run_request(self, request: predict_pb2.PredictRequest) -> Dict[str, np.ndarray]:
        """A gRPC PredictRequest (e.g. a warmup record), as TF Serving would run it: each tensor
        fed in its own dtype, never cast (servables/tensorflow/predict_util.cc RunPredict at
        2.16.1 and 2.20.0: GetInputValues feeds the TensorProto as it is), so one of another
        dtype than the signature's is refused (components/trainer/warmup.py request_problem;
        StubError 400 with the server's text)."""
        problem = request_problem(self.signatures, request)
        if problem is not None:
            raise StubError(400, problem)
        signature = request.model_spec.signature_name or "serving_default"
        return self.run(signature, {name: tf.make_ndarray(proto)
                                    for name, proto in request.inputs.items()})

    def predict_instances(self, signature: str, instances: list,
                          server_version: str = DEFAULT_SERVER_VERSION) -> List[dict]:
        """TF Serving's REST row format: one object per example, one key per signature input
        (all of them), strings possibly as {"b64": ...}, a [batch, n] input's value a list of n
        (n alike in one request); one object of outputs per example back. The JSON is read as
        the server reads it: rest_stub.row_format_inputs."""
        spec = self.signatures.get(signature)
        if spec is None or spec.method_name != "tensorflow/serving/predict":
            raise StubError(400, f'Serving signature name: "{signature}" not found in '
                            "signature def")
        dtypes = {name: _DTYPE_STRINGS[tf.dtypes.as_dtype(info.dtype).name]
                  for name, info in spec.inputs.items()}
        columns = row_format_inputs(instances, dtypes, server_version)
        for name, values in columns.items():
            rank = len(spec.inputs[name].tensor_shape.dim)
            fed = np.asarray(values, dtype=object)
            if fed.ndim != rank:  # the session refuses the feed, as the server's does
                raise StubError(400, f"input {name} of {signature} is [batch{', n' * (rank - 1)}]"
                                f"; the request's instances give it shape {list(fed.shape)}")
        outputs = self.run(signature, {name: _encoded(values) for name, values in columns.items()})
        if len(outputs) == 1:
            # One output: its values, unnamed (tensorflow_serving/util/json_tensor.cc at 2.16.1,
            # MakeRowFormatJsonFromTensors: elements_are_objects = tensor_map.size() > 1).
            [values] = outputs.values()
            return [_jsonable(values[row]) for row in range(len(instances))]
        return [{name: _jsonable(values[row]) for name, values in outputs.items()}
                for row in range(len(instances))]


# TensorFlow's dtype names -> the DataTypeString the server's messages (and the stub) use.
_DTYPE_STRINGS = {"string": "string", "float32": "float", "float64": "double", "int32": "int32",
                  "int64": "int64", "bool": "bool"}


def _encoded(values):
    """Text as the bytes a string tensor holds; numbers as sent (json_tensor.cc AddValueToTensor:
    a float input reads any JSON number as a double and casts it to float, 1e39 becoming inf
    and 16777217 becoming 16777216, as the feed's float32 array does)."""
    if isinstance(values, list):
        return [_encoded(v) for v in values]
    return values.encode() if isinstance(values, str) else values


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item()  # a NaN stays NaN: json.dumps writes it as TF Serving does
