"""A SavedModel loaded the way TF Serving loads it: the TF1 loader, in its own graph and session.

tf.saved_model.load (TF2) can run a model that the TF1 loader cannot (a Keras 3 export did exactly
that), so the serving tests run signatures through a session, as the server does.
"""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Dict, List, Mapping

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

from tests.serving.rest_stub import StubError


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
        """A gRPC PredictRequest (e.g. a warmup record), as TF Serving would run it."""
        signature = request.model_spec.signature_name or "serving_default"
        return self.run(signature, {name: tf.make_ndarray(proto)
                                    for name, proto in request.inputs.items()})

    def predict_instances(self, signature: str, instances: list) -> List[dict]:
        """TF Serving's REST row format: one object per example, one key per signature input
        (all of them), strings possibly as {"b64": ...}; one object of outputs per example back."""
        spec = self.signatures.get(signature)
        if spec is None or spec.method_name != "tensorflow/serving/predict":
            raise StubError(400, f'Serving signature name: "{signature}" not found in '
                            "signature def")
        names = sorted(spec.inputs)
        if len(names) == 1 and not _is_named_object(instances[0]):
            instances = [{names[0]: item} for item in instances]
        columns: Dict[str, list] = {name: [] for name in names}
        for index, instance in enumerate(instances):
            if not isinstance(instance, dict) or sorted(instance) != names:
                raise StubError(400, f"Failed to process element: {index} of 'instances' list. "
                                f"keys must be equal to: {','.join(names)}")
            for name in names:
                columns[name].append(_json_value(instance[name], spec.inputs[name].dtype, name))
        outputs = self.run(signature, columns)
        if len(outputs) == 1:
            # One output: its values, unnamed (tensorflow_serving/util/json_tensor.cc at 2.16.1,
            # MakeRowFormatJsonFromTensors: elements_are_objects = tensor_map.size() > 1).
            [values] = outputs.values()
            return [_jsonable(values[row]) for row in range(len(instances))]
        return [{name: _jsonable(values[row]) for name, values in outputs.items()}
                for row in range(len(instances))]


def _is_named_object(item) -> bool:
    return isinstance(item, dict) and set(item) != {"b64"}


def _json_value(value, dtype: int, name: str):
    if dtype == tf.string.as_datatype_enum:
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        if isinstance(value, str):
            return value.encode()
    elif dtype == tf.float32.as_datatype_enum and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        # json_tensor.cc AddValueToTensor: any JSON number, read as a double and cast to float
        # (1e39 becomes inf, 16777217 becomes 16777216), as the feed's float32 array does.
        return float(value)
    raise StubError(400, f"JSON Value: {value!r} for input {name} is not of expected type: "
                    f"{tf.dtypes.as_dtype(dtype).name}")


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item()  # a NaN stays NaN: json.dumps writes it as TF Serving does
