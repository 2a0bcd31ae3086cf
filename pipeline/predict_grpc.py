"""pipeline.predict's gRPC transport: the REST body's rows sent as TF Serving's PredictRequest
(tensorflow_serving/apis/predict.proto) to PredictionService/Predict, and the PredictResponse's
output tensors turned back into REST's row format, so that both paths print the same lines.

Each input's dtype comes from the model's signature (ModelService... GetModelMetadata, the
`signature_def` field, asked once per model and signature), as a client in any language builds
it: a TensorProto per input, dim 0 the rows, raw_features' and retrieve's one per feature
(float32 or string; a list feature [rows, longest]), serving_default's `examples` the serialized
tf.Examples. Loads TensorFlow (its generated protos import it), as --signature serving_default
does.
"""
from __future__ import annotations

import base64
from typing import Dict, List, Tuple



class ServingError(RuntimeError):
    """TF Serving could not be reached or did not answer with predictions (pipeline.predict
    prints it as its own ServingError: the same message, exit 1)."""

_SIGNATURES: Dict[Tuple[str, str, str], object] = {}


def predict(target: str, model: str, body: dict, timeout: float) -> List[dict]:
    """Sends one REST predict body as a PredictRequest; returns one dict of outputs per row."""
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    signature = body["signature_name"]
    with grpc.insecure_channel(target) as channel:
        client = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            inputs = _signature(client, target, model, signature, timeout).inputs
            request = predict_pb2.PredictRequest()
            request.model_spec.name, request.model_spec.signature_name = model, signature
            for name, info in inputs.items():
                request.inputs[name].CopyFrom(_tensor(body["instances"], name, info.dtype, np, tf))
            outputs = client.Predict(request, timeout=timeout).outputs
        except grpc.RpcError as error:
            raise _serving_error(error, target, timeout) from None
    arrays = {name: tf.make_ndarray(tensor) for name, tensor in outputs.items()}
    rows = len(body["instances"])
    if any(len(array) != rows for array in arrays.values()):
        raise ServingError(f"TF Serving at {target} answered without one prediction per row")
    return [{name: _plain(array[i]) for name, array in arrays.items()} for i in range(rows)]


def _signature(client, target: str, model: str, signature: str, timeout: float):
    from tensorflow_serving.apis import get_model_metadata_pb2

    key = (target, model, signature)
    if key not in _SIGNATURES:
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = model
        found = get_model_metadata_pb2.SignatureDefMap()
        client.GetModelMetadata(request, timeout=timeout).metadata["signature_def"].Unpack(found)
        if signature not in found.signature_def:
            raise ServingError(f"TF Serving at {target} answered INVALID_ARGUMENT: Serving "
                               f"signature name: \"{signature}\" not found in signature def")
        _SIGNATURES[key] = found.signature_def[signature]
    return _SIGNATURES[key]


def _tensor(instances: list, name: str, dtype: int, np, tf):
    """One input's TensorProto from the REST instances (row format; {"b64": ...} for bytes)."""
    dtype = tf.dtypes.as_dtype(dtype)
    values = [row["b64"] if "b64" in row else row[name] for row in instances]
    values = [base64.b64decode(v) if "b64" in instances[0] else v for v in values]
    if dtype == tf.string:
        values = [[x.encode() for x in v] if isinstance(v, list) else
                  (v if isinstance(v, bytes) else v.encode()) for v in values]
    return tf.make_tensor_proto(np.asarray(values, dtype=dtype.as_numpy_dtype))


def _plain(value):
    """A row's output as REST's JSON has it: numbers, lists, text (bytes decoded)."""
    value = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _serving_error(error, target: str, timeout: float) -> ServingError:
    """The REST path's messages for the same failures (pipeline/predict.py predict)."""
    import grpc

    code, details = error.code(), error.details()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ServingError(f"TF Serving at {target} did not answer within {timeout:g} s")
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServingError(f"cannot reach TF Serving at {target}: {details}; is the server "
                            "running? (deploy/serving/README.md)")
    return ServingError(f"TF Serving at {target} answered {code.name}: {details}")
