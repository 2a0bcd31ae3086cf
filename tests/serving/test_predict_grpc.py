"""`python -m pipeline.predict --grpc` (pipeline/predict_grpc.py) prints what the REST path prints,
line for line, against the TF Serving stand-in's own process serving the pushed model, and refuses
as the REST path does (exit 1, the same message shape)."""
from __future__ import annotations

import socket

import pytest

from pipeline import predict
from tests.serving.sample_rows import SAMPLE_CSV
from tests.serving.test_grpc_stub import _started


@pytest.mark.e2e
@pytest.mark.parametrize("signature", predict.SIGNATURES)
def test_grpc_prints_the_rest_paths_lines(pushed_run, pushed_config, signature, tmp_path,
                                          capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text(SAMPLE_CSV)
    process, url, target = _started(pushed_run, pushed_config)
    try:
        printed = {}
        for flag, address in (("--url", url), ("--grpc", target)):
            argv = [flag, address, "--csv", str(rows), "--signature", signature,
                    "--batch-size", "2", "--batching-config", "none",
                    "--model", pushed_config.serving.model_name,
                    "--config", str(pushed_run.config_path)]
            code = predict.main(argv)
            out, err = capsys.readouterr()
            assert code == 0, err
            printed[flag] = out.splitlines()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert len(printed["--url"]) == SAMPLE_CSV.count("\n") - 1
    assert printed["--grpc"] == printed["--url"]


def test_an_unreachable_grpc_server_is_refused_as_rest_refuses_it(tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text(SAMPLE_CSV)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = predict.main(["--grpc", f"127.0.0.1:{port}", "--csv", str(rows), "--timeout", "5",
                         "--batching-config", "none"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"error: cannot reach TF Serving at 127.0.0.1:{port}: ")
    assert "is the server running?" in err


# The messages a non-Python client sends (README.md, "To query a running server"), written from
# the .proto files' field numbers alone (tensorflow/core/framework/tensor.proto, tensor_shape.proto,
# types.proto; tensorflow_serving/apis/model.proto, predict.proto): no generated module, so no
# TensorFlow, in building or reading them.
_PROTOS = {
    "Dim": [("size", 1, "int64"), ("name", 2, "string")],
    "TensorShapeProto": [("dim", 2, "Dim*")],
    "TensorProto": [("dtype", 1, "int32"), ("tensor_shape", 2, "TensorShapeProto"),
                    ("tensor_content", 4, "bytes"), ("float_val", 5, "float*"),
                    ("string_val", 8, "bytes*")],
    "ModelSpec": [("name", 1, "string"), ("signature_name", 3, "string")],
    # map<string, TensorProto>: a repeated nested {key = 1, value = 2} entry, as protoc writes it
    "PredictRequest": [("model_spec", 1, "ModelSpec"), ("inputs", 2, "map")],
    "PredictResponse": [("outputs", 1, "map"), ("model_spec", 2, "ModelSpec")],
}
DT_FLOAT, DT_STRING = 1, 7


def _messages():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="from_protos.proto", package="p",
                                              syntax="proto3")
    scalar = {"int64": 3, "int32": 5, "string": 9, "bytes": 12, "float": 2}
    for name, fields in _PROTOS.items():
        message = file.message_type.add(name=name)
        for field, number, kind in fields:
            if kind == "map":
                entry = message.nested_type.add(name=f"{field.capitalize()}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=1, type=9)
                entry.field.add(name="value", number=2, label=1, type=11,
                                type_name=".p.TensorProto")
                message.field.add(name=field, number=number, label=3, type=11,
                                  type_name=f".p.{name}.{entry.name}")
                continue
            repeated, kind = kind.endswith("*"), kind.rstrip("*")
            added = message.field.add(name=field, number=number, label=3 if repeated else 1)
            if kind in scalar:
                added.type = scalar[kind]
            else:
                added.type, added.type_name = 11, f".p.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    factory = message_factory.MessageFactory(pool)
    return {name: factory.GetPrototype(pool.FindMessageTypeByName(f"p.{name}"))
            for name in _PROTOS}


@pytest.mark.e2e
def test_a_request_built_from_the_protos_alone_gets_the_rest_answer(pushed_run, pushed_config,
                                                                    tmp_path):
    import json

    import grpc
    import numpy as np
    import requests

    rows = tmp_path / "rows.csv"
    rows.write_text(SAMPLE_CSV)
    features = pushed_config.features
    values = [row.values for row in predict.read_rows(rows, features,
                                                      pushed_config.data.null_markers)]
    assert not features.lists, "a list feature's [rows, longest] shape is not built here"
    messages = _messages()
    request = messages["PredictRequest"]()
    name = pushed_config.serving.model_name
    request.model_spec.name, request.model_spec.signature_name = name, predict.RAW_FEATURES
    for feature in features.model_inputs:
        tensor = request.inputs[feature]
        tensor.tensor_shape.dim.add(size=len(values))
        if feature in features.numeric:
            tensor.dtype = DT_FLOAT
            tensor.float_val.extend(row[feature] for row in values)
        else:
            tensor.dtype = DT_STRING
            tensor.string_val.extend(row[feature].encode() for row in values)
    process, url, target = _started(pushed_run, pushed_config)
    try:
        with grpc.insecure_channel(target) as channel:
            call = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=messages["PredictResponse"].FromString)
            outputs = call(request, timeout=60).outputs
        body = predict.build_request(values, features)
        rest = requests.post(f"{url}/v1/models/{name}:predict", data=json.dumps(body), timeout=60)
        assert rest.status_code == 200, rest.text
    finally:
        process.terminate()
        process.wait(timeout=30)
    answers = rest.json()["predictions"]
    probabilities = outputs["probabilities"]
    got = (np.frombuffer(probabilities.tensor_content, np.float32) if probabilities.tensor_content
           else np.asarray(probabilities.float_val, np.float32))
    np.testing.assert_allclose(got.reshape(len(values), -1),
                               [a["probabilities"] for a in answers], atol=1e-6)
    assert [c.decode() for c in outputs["class_name"].string_val] == \
        [a["class_name"] for a in answers]


def test_the_messages_are_built_without_tensorflow():
    import subprocess
    import sys

    code = ("import sys; from tests.serving.test_predict_grpc import _messages; "
            "m = _messages()['PredictRequest'](); m.inputs['x'].float_val.append(1.0); "
            "m.SerializeToString(); assert 'tensorflow' not in sys.modules, 'TF loaded'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
