"""Warmup records as TF Serving replays them at load: what it refuses before the session runs, and
the replay itself. A record the server refuses fails the whole version's load.

TF Serving's warmup (servables/tensorflow/saved_model_warmup.cc RunWarmupRequest, at 2.16.1 and
2.20.0 alike) hands each PredictLog's request to RunPredict (servables/tensorflow/predict_util.cc),
which checks the number and names of the inputs (VerifyRequestInputsSize; TF's
cc/saved_model/util.cc GetInputValues) and feeds each TensorProto as it is, in the record's dtype:
nothing casts it to the signature's. The session then refuses a tensor of another dtype
(TF's core/framework/function.cc FunctionCallFrame::SetArgs: "Expects arg[i] to be <dtype> but
<dtype> is provided"). Python's Session.run would cast a feed to the placeholder's dtype, so the
replay here checks the dtype first, exactly, as the server's call frame does.
"""
from __future__ import annotations

from typing import List, Optional

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
MAX_RECORDS = 1000  # saved_model_warmup_util.cc WarmupConsts::kMaxNumRecords
DEFAULT_SIGNATURE = "serving_default"


class WarmupError(ValueError):
    """A warmup record TF Serving would refuse, so the version would not load."""


def dtype_string(dtype: int) -> str:
    """TF's DataTypeString: DT_FLOAT -> "float", DT_STRING -> "string" (not numpy's names)."""
    return types_pb2.DataType.Name(dtype)[3:].lower()


def request_problem(signature_defs, request: predict_pb2.PredictRequest) -> Optional[str]:
    """Why TF Serving refuses this PredictRequest before or at the session's feed, as the status
    text it answers; None when it feeds it. signature_defs: the MetaGraphDef's signature_def map.
    Shapes are checked against the signature's dims too (rank, and every fixed size): the server
    does not check them at the feed, but a tensor of another shape fails in the graph or, worse,
    warms a shape no client sends."""
    name = request.model_spec.signature_name or DEFAULT_SIGNATURE  # predict_util.cc RunPredict
    if name not in signature_defs:
        return f'FAILED_PRECONDITION: Serving signature key "{name}" not found.'
    spec = signature_defs[name]
    sent, wanted = set(request.inputs), set(spec.inputs)
    if sent != wanted:
        return (f"INVALID_ARGUMENT: input size does not match signature: {len(sent)}!="
                f"{len(wanted)} len({{{','.join(sorted(sent))}}}) != "
                f"len({{{','.join(sorted(wanted))}}}). Sent extra: "
                f"{{{','.join(sorted(sent - wanted))}}}. Missing but required: "
                f"{{{','.join(sorted(wanted - sent))}}}.")
    # The call frame's argument index: here the input's place among the sorted names (the
    # server's order is its map's; the index is the only part of the text that may differ).
    for index, input_name in enumerate(sorted(wanted)):
        tensor, info = request.inputs[input_name], spec.inputs[input_name]
        if tensor.dtype != info.dtype:
            return (f"INVALID_ARGUMENT: Expects arg[{index}] to be {dtype_string(info.dtype)} "
                    f"but {dtype_string(tensor.dtype)} is provided")
        shape = [d.size for d in tensor.tensor_shape.dim]
        if not info.tensor_shape.unknown_rank:
            dims = [d.size for d in info.tensor_shape.dim]
            if len(dims) != len(shape) or any(
                    d not in (-1, s) for d, s in zip(dims, shape, strict=True)):
                return (f"INVALID_ARGUMENT: input {input_name} of {name} has shape {shape}; the "
                        f"signature takes {['?' if d == -1 else d for d in dims]}")
    return None


def read_records(path: str) -> List[prediction_log_pb2.PredictionLog]:
    return [prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(path)]


def replay(saved_model_dir: str) -> int:
    """Replays every warmup record of a SavedModel as TF Serving does at load (the TF1 loader,
    one session); raises WarmupError naming the file, the record, its signature and the reason
    on the first one the server would refuse or that fails to run. Returns how many ran."""
    path = f"{saved_model_dir.rstrip('/')}/{WARMUP_FILE}"
    if not tf.io.gfile.exists(path):
        return 0
    logs = read_records(path)
    if len(logs) > MAX_RECORDS:
        raise WarmupError(f"{path}: {len(logs)} warmup records; TF Serving reads at most "
                          f"{MAX_RECORDS} and fails the load past that")
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model_dir)
        signatures = meta_graph.signature_def
        for number, log in enumerate(logs, start=1):
            if log.WhichOneof("log_type") != "predict_log":
                raise WarmupError(f"{path}, record {number}: a {log.WhichOneof('log_type')}; "
                                  "this model's records are predict_log")
            request = log.predict_log.request
            signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
            problem = request_problem(signatures, request)
            if problem is not None:
                raise WarmupError(f"{path}, record {number} (signature {signature}): TF Serving "
                                  f"would refuse it and fail the version's load: {problem}")
            spec = signatures[signature]
            feed = {spec.inputs[name].name: tf.make_ndarray(tensor)
                    for name, tensor in request.inputs.items()}
            try:
                session.run({key: info.name for key, info in spec.outputs.items()}, feed)
            except (tf.errors.OpError, ValueError) as error:
                raise WarmupError(f"{path}, record {number} (signature {signature}): fails to "
                                  f"run, so the version would not load: {error}") from None
    return len(logs)
