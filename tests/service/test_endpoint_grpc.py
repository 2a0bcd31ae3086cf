"""The endpoint's gRPC client of `retrieve` (service/endpoint/tf_serving_grpc.py) against the gRPC
stand-in (devtools/tf_serving/grpc_stub.py) answering the endpoint tests' canned `retrieve`: the
same pairs as the REST client, the model status, and the same failure handling as REST (one
retry on refusal, the deadline, TF Serving's refusals a 502 without fallback). Its protos: the
committed set is the official one, and the endpoint loads no TensorFlow for them."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from devtools.loopback import free_port
from devtools.tf_serving.rest_stub import RestStub
from devtools.tf_serving.servables import Servables
from service.endpoint.metrics import Metrics
from service.endpoint.tf_serving import TFServing, TFServingError
from tests.service.endpoint_env import V1_ITEMS, canned_retrieve

INSTANCE = {"user_click_history": ["sku1001", "sku1002"] + [""] * 8, "hour": 3.0, "device": ""}


class CannedModel:
    """canned_retrieve as the gRPC stand-in's model: `retrieve` takes the history (string
    [?, ?]), hour (float [?]) and device (string [?]); `delay_s` slows every call."""

    def __init__(self, delay_s: float = 0.0):
        from tensorflow.core.framework import types_pb2
        from tensorflow.core.protobuf import meta_graph_pb2

        self.predict, self.delay_s = canned_retrieve(V1_ITEMS), delay_s
        signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
        for name, dtype, rank in (("user_click_history", types_pb2.DT_STRING, 2),
                                  ("hour", types_pb2.DT_FLOAT, 1),
                                  ("device", types_pb2.DT_STRING, 1)):
            info = signature.inputs[name]
            info.dtype = dtype
            for _ in range(rank):
                info.tensor_shape.dim.add(size=-1)
        signature.outputs["item_ids"].dtype = types_pb2.DT_STRING
        signature.outputs["scores"].dtype = types_pb2.DT_FLOAT
        self.signatures = {"retrieve": signature}

    def run(self, signature, inputs):
        time.sleep(self.delay_s)
        histories = [[h.decode() for h in row] for row in inputs["user_click_history"]]
        rows = self.predict(signature, [{"user_click_history": h} for h in histories])
        return {"item_ids": np.array([r["item_ids"] for r in rows], dtype=object),
                "scores": np.array([r["scores"] for r in rows], dtype=np.float32)}


@pytest.fixture(scope="module")
def stand_in():
    from devtools.tf_serving.grpc_stub import GrpcStub

    with GrpcStub(Servables("recommender", [1]), CannedModel()) as running:
        yield running


def _client(target: str, timeout_ms: int = 2000, cls=None):
    from service.endpoint.tf_serving_grpc import GrpcTFServing

    return (cls or GrpcTFServing)(target, "recommender", timeout_ms, Metrics())


def _run(target: str, make=_client, **kw):
    async def call():
        client = make(target, **kw)
        try:
            return await client.retrieve(INSTANCE), client
        finally:
            await client.close()
    return asyncio.run(call())


def test_grpc_retrieve_answers_what_rest_answers(stand_in):
    pairs, _ = _run(stand_in.target)

    async def rest():
        client = TFServing(rest_stub.url, "recommender", 2000, Metrics())
        try:
            return await client.retrieve(INSTANCE)
        finally:
            await client.close()
    with RestStub("recommender", canned_retrieve(V1_ITEMS), versions=[1]) as rest_stub:
        rest_pairs = asyncio.run(rest())
    # float32 on the wire both ways; REST's JSON prints it shortest (0.95), gRPC carries it.
    assert [i for i, _ in pairs] == [i for i, _ in rest_pairs]
    assert [s for _, s in pairs] == pytest.approx([s for _, s in rest_pairs], abs=1e-6)
    assert pairs[0] == ("sku1002", pytest.approx(0.95)) and len(pairs) > 2


def test_grpc_status_reads_the_versions_and_retrieve_dtypes(stand_in):
    async def status():
        client = _client(stand_in.target)
        try:
            return await client.status(), client.dtypes
        finally:
            await client.close()
    answer, dtypes = asyncio.run(status())
    assert answer == {"model_version_status": [{"version": "1", "state": "AVAILABLE"}]}
    assert set(dtypes) == {"user_click_history", "hour", "device"}


def test_grpc_refused_is_retried_once_then_falls_back(stand_in):
    from service.endpoint.tf_serving_grpc import PREDICTION, GrpcTFServing
    from service.endpoint.tf_serving_protos import unary

    class RefusedFirst(GrpcTFServing):
        refusals, calls = 1, 0

        async def call(self, request, timeout_s):
            self.calls += 1
            if self.calls <= self.refusals:  # a port nobody listens on: UNAVAILABLE
                async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as channel:
                    return await unary(channel, PREDICTION, "Predict")(request,
                                                                       timeout=timeout_s)
            return await super().call(request, timeout_s)

    pairs, client = _run(stand_in.target, cls=RefusedFirst)
    assert pairs and client.calls == 2
    RefusedFirst.refusals = 2  # negative control: refused twice is no answer
    with pytest.raises(TFServingError) as failed:
        _run(stand_in.target, cls=RefusedFirst)
    assert failed.value.kind == "refused" and failed.value.fallback == "tf_serving_refused"


def test_grpc_deadline_is_the_budget():
    from devtools.tf_serving.grpc_stub import GrpcStub

    with GrpcStub(Servables("recommender", [1]), CannedModel(delay_s=0.5)) as slow:
        start = time.perf_counter()
        with pytest.raises(TFServingError) as failed:
            _run(slow.target, timeout_ms=150)
        assert time.perf_counter() - start < 0.45
        assert failed.value.fallback == "tf_serving_timeout"
        assert _run(slow.target, timeout_ms=2000)[0]  # negative control: in budget, it answers


def test_grpc_refused_request_is_the_endpoints_bug_no_fallback(stand_in):
    from service.endpoint.tf_serving_grpc import GrpcTFServing

    class WrongDtype(GrpcTFServing):
        def request(self, instance):
            request = super().request(instance)
            request.inputs["hour"].dtype = 2  # DT_DOUBLE: INVALID_ARGUMENT at TF Serving
            return request

    with pytest.raises(TFServingError) as failed:
        _run(stand_in.target, cls=WrongDtype)
    assert failed.value.status == 502 and failed.value.fallback is None
    assert "Expects arg" in str(failed.value)


def test_committed_protos_are_the_installed_tf_serving_apis():
    """A TF Serving (or TensorFlow) upgrade that changes a proto, or just their versions, fails
    here until the set is regenerated."""
    from devtools.tf_serving_protos import SET, SOURCE, descriptor_set, source

    regenerate = "regenerate it: .venv/bin/python -m devtools.tf_serving_protos"
    assert SET.read_bytes() == descriptor_set(), f"{SET.name} is not the installed protos: " \
        f"{regenerate}"
    assert SOURCE.read_text() == source(), f"{SOURCE.name} names other versions: {regenerate}"


def test_the_grpc_client_loads_no_tensorflow():
    """The service image has no TensorFlow: making the client and a request imports none."""
    code = """if True:
        import asyncio, sys
        import service.endpoint.app
        from service.endpoint.metrics import Metrics
        from service.endpoint.tf_serving_grpc import GrpcTFServing

        async def make():
            client = GrpcTFServing("127.0.0.1:1", "recommender", 100, Metrics())
            client.request({"user_click_history": ["a"], "hour": 3.0})
            await client.close()
        asyncio.run(make())
        print(sorted(m for m in sys.modules if m.split(".")[0] in
                     ("tensorflow", "tensorflow_serving", "keras")))"""
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
