"""The client of TF Serving's gRPC API (port 8500): `retrieve` as a PredictRequest, the model
status through ModelService.GetModelStatus. The REST client's twin (tf_serving.py): the same
budget, one retry on refusal, circuit breaker, fallback reasons and metrics (its `retrieve` is
inherited); what differs is the wire.

- One grpc.aio channel for the process, opened at start: HTTP/2 multiplexes every request on it.
- UNAVAILABLE (nothing listening, a pod going away, a connection the server closed) is REST's
  "refused": retried once within the budget; DEADLINE_EXCEEDED is "timeout"; INTERNAL, UNKNOWN,
  RESOURCE_EXHAUSTED and the like are TF Serving failing ("status", the fallback answers);
  INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION are the endpoint's own bug (a request TF
  Serving refuses every time: 502, TF Serving's message, as a REST 4xx).
- Inputs are TensorProtos of the dtypes `retrieve` declares (GetModelMetadata, read with each
  status call: start-up and the refresh task), so a numeric feature exported int64 is sent
  int64 (gRPC casts nothing, REST's JSON parser did).

The messages and method paths come from the committed copy of TF Serving's protos
(tf_serving_protos.py), not tensorflow-serving-api, which imports all of TensorFlow.
"""
from __future__ import annotations

import asyncio
import math
from typing import Dict, List, Tuple

import grpc
import numpy as np

from service.endpoint import tf_serving_protos as protos
from service.endpoint.tf_serving import TFServing, TFServingError, _failed

STATUS_TIMEOUT_S = 1.0
# Keep-alive: while calls are in flight, a ping after 30 s without data, answered within 10 s or
# the connection is dropped and redialled (a peer gone without a FIN is found in 40 s, not the
# kernel's hours). No pings on an idle channel: TF Serving's server (gRPC core defaults) answers
# more than 2 pings without data with GOAWAY "too_many_pings".
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 0),
    # TF Serving answers messages up to INT32_MAX; retrieve's answer is a few KB, but a large
    # k must not fail on gRPC's 4 MiB default receive limit.
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
# The endpoint's bug (TF Serving refuses this request every time): no fallback hides it.
_REFUSED_REQUEST = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED}
PREDICTION, MODELS = "tensorflow.serving.PredictionService", "tensorflow.serving.ModelService"
DT = {name: protos.enum_value("tensorflow.DataType", name)
      for name in ("DT_STRING", "DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_INT64")}
PredictRequest = protos.message("tensorflow.serving.PredictRequest")
GetModelStatusRequest = protos.message("tensorflow.serving.GetModelStatusRequest")
GetModelMetadataRequest = protos.message("tensorflow.serving.GetModelMetadataRequest")
SignatureDefMap = protos.message("tensorflow.serving.SignatureDefMap")
VERSION_STATES = protos.POOL.FindMessageTypeByName(
    "tensorflow.serving.ModelVersionStatus").enum_types_by_name["State"]


def tf_serving_client(settings, model_name: str, metrics) -> TFServing:
    """The client of settings.protocol (service/config.py TFServingSettings)."""
    breaker = (settings.breaker_failures, settings.breaker_cooldown_s)
    if settings.protocol == "grpc":
        return GrpcTFServing(settings.grpc_target, model_name, settings.timeout_ms, metrics,
                             *breaker)
    return TFServing(settings.url, model_name, settings.timeout_ms, metrics, *breaker)


class GrpcTFServing(TFServing):
    def __init__(self, target: str, model_name: str, timeout_ms: int, metrics,
                 breaker_failures: int = 5, breaker_cooldown_s: float = 5.0):
        """Made inside the running event loop (the aio channel belongs to it). target:
        host:port of TF Serving's gRPC port."""
        self.target = target
        super().__init__(f"grpc://{target}", model_name, timeout_ms, metrics, breaker_failures,
                         breaker_cooldown_s)

    def _connect(self) -> None:
        """The wire: one grpc.aio channel and the three methods called on it."""
        self.channel = grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)
        self.predict = protos.unary(self.channel, PREDICTION, "Predict")
        self.metadata = protos.unary(self.channel, PREDICTION, "GetModelMetadata")
        self.model_status = protos.unary(self.channel, MODELS, "GetModelStatus")
        self.dtypes: Dict[str, int] = {}

    async def status(self) -> dict:
        """GetModelStatus as REST's GET /v1/models/<name> answers it (versions as strings), and
        retrieve's input dtypes refreshed from GetModelMetadata. Raises on any failure."""
        request = GetModelStatusRequest()
        request.model_spec.name = self.model_name
        try:
            answer = await self.model_status(request, timeout=STATUS_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:  # its str() is a multi-line dump: one line here
            raise ConnectionError(f"GetModelStatus at {self.url}: {e.code().name}: "
                                  + " ".join((e.details() or "").split())[:300]) from None
        status = {"model_version_status": [
            {"version": str(s.version), "state": VERSION_STATES.values_by_number[s.state].name}
            for s in answer.model_version_status]}
        try:
            await self._read_dtypes()
        except grpc.RpcError:  # the status stands; retrieve reads them when it needs to
            if not self.dtypes:
                raise
        return status

    async def _read_dtypes(self, timeout_s: float = STATUS_TIMEOUT_S) -> None:
        request = GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = self.model_name
        answer = await self.metadata(request, timeout=timeout_s)
        signatures = SignatureDefMap()
        answer.metadata["signature_def"].Unpack(signatures)
        inputs = signatures.signature_def["retrieve"].inputs
        self.dtypes = {name: info.dtype for name, info in inputs.items()}

    def request(self, instance: dict):
        """retrieve's PredictRequest for one instance: each feature a batch of one row."""
        request = PredictRequest()
        request.model_spec.name = self.model_name
        request.model_spec.signature_name = "retrieve"
        for name, value in instance.items():
            proto = request.inputs[name]
            values = value if isinstance(value, list) else [value]
            proto.tensor_shape.dim.add(size=1)
            if isinstance(value, list):
                proto.tensor_shape.dim.add(size=len(values))
            dtype = self.dtypes.get(name) or (
                DT["DT_STRING"] if values and isinstance(values[0], str) else DT["DT_FLOAT"])
            proto.dtype = dtype
            if dtype == DT["DT_STRING"]:
                proto.string_val.extend(str(v).encode() for v in values)
            elif dtype == DT["DT_FLOAT"]:
                proto.float_val.extend(values)
            elif dtype == DT["DT_DOUBLE"]:
                proto.double_val.extend(values)
            elif dtype == DT["DT_INT64"]:
                proto.int64_val.extend(0 if math.isnan(v) else int(v) for v in values)
            else:
                proto.int_val.extend(0 if math.isnan(v) else int(v) for v in values)
        return request

    async def _predict(self, instance: dict) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        for attempt in (1, 2):
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise _failed("timeout", f"TF Serving at {self.url} did not answer within "
                                  f"{self.timeout_s * 1000:.0f} ms: no time left for the retry")
                if not self.dtypes:
                    await self._read_dtypes(left)
                    left = deadline - loop.time()
                answer = await self.call(self.request(instance), left)
                break
            except grpc.aio.AioRpcError as e:
                code, message = e.code(), (e.details() or "")[:300]
                if code == grpc.StatusCode.UNAVAILABLE:
                    if attempt == 2:
                        raise _failed("refused", f"TF Serving at {self.url} refused the call "
                                      f"(tried twice): {message}") from None
                elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise _failed("timeout", f"TF Serving at {self.url} did not answer within "
                                  f"{self.timeout_s * 1000:.0f} ms") from None
                elif code in _REFUSED_REQUEST:
                    raise TFServingError(502, "status", f"TF Serving at {self.url} refused the "
                                         f"request ({code.name}): {message}") from None
                else:
                    raise _failed("status", f"TF Serving at {self.url} failed ({code.name}): "
                                  f"{message}") from None
        return {"predictions": [_row(answer.outputs)]}

    async def call(self, request, timeout_s: float):
        """One Predict call. The seam the retry test refuses through."""
        return await self.predict(request, timeout=timeout_s)

    async def close(self) -> None:
        await self.channel.close()


def _values(proto) -> list:
    """A TensorProto's values, from its typed field or its packed tensor_content."""
    if proto.string_val:
        return [v.decode("utf-8", "replace") for v in proto.string_val]
    if proto.tensor_content:
        dtype = {DT["DT_FLOAT"]: np.float32, DT["DT_DOUBLE"]: np.float64,
                 DT["DT_INT32"]: np.int32, DT["DT_INT64"]: np.int64}.get(proto.dtype)
        return np.frombuffer(proto.tensor_content, dtype=dtype).tolist() if dtype else []
    return list(proto.float_val or proto.double_val or proto.int64_val or proto.int_val)


def _row(outputs) -> dict:
    """The first row of item_ids and scores (absent: {} and _pairs names the broken answer)."""
    row: Dict[str, List] = {}
    for name in ("item_ids", "scores"):
        if name in outputs:
            values = _values(outputs[name])
            dims = [d.size for d in outputs[name].tensor_shape.dim]
            width = dims[-1] if len(dims) == 2 else len(values)
            row[name] = values[:width]
    return row


__all__: Tuple[str, ...] = ("GrpcTFServing", "CHANNEL_OPTIONS", "tf_serving_client")
