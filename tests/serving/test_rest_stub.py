"""The REST stand-in refuses what TF Serving 2.16.1 refuses and accepts what it accepts (the
sources are named in rest_stub.py): a client test against it means something for the real server."""
from __future__ import annotations

import json

import pytest
import requests

from tests.serving.rest_stub import RestStub

# The stub serves any model: its own name and row, not the example's.
ROW = {"site": "north", "grp": "b", "length": 50.0, "depth": 15.3, "width": 220.0,
       "weight": 5550.0}


def echo(signature, instances):
    return [{"class_name": "first", "probabilities": [1.0, 0.0, 0.0]} for _ in instances]


@pytest.fixture(scope="module")
def stub():
    with RestStub("demo", echo, versions=(1717171717, 1717258117)) as running:
        yield running


def post(stub, path, data):
    answer = requests.post(stub.url + path, data=data, timeout=10)
    return answer.status_code, answer.json()


def body(**row) -> str:
    return json.dumps({"signature_name": "raw_features", "instances": [{**ROW, **row}]})


def test_loaded_versions_and_latest_answer(stub):
    for path in ("/v1/models/demo:predict", "/v1/models/demo/versions/1717258117:predict",
                 "/v1/models/demo/versions/01717171717:predict"):
        assert post(stub, path, body())[0] == 200, path


@pytest.mark.parametrize("path, error", [
    ("/v1/models/demo/versions/7:predict",
     "Servable not found for request: Specific(demo, 7)"),
    ("/v1/models/unknown:predict", "Servable not found for request: Latest(unknown)"),
    ("/v1/models/unknown/versions/1717171717:predict",
     "Servable not found for request: Specific(unknown, 1717171717)"),
])
def test_a_model_or_version_never_loaded_is_404(stub, path, error):
    assert post(stub, path, body()) == (404, {"error": error})


def test_numbers_the_server_reads_as_floats_are_accepted(stub):
    # json_tensor.cc: DT_FLOAT takes any JSON number; 1e39 becomes inf, 2e308 parses to inf,
    # 16777217 rounds to 16777216. The server does not refuse them, so neither does the stub.
    for raw in ("1e39", "2e308", "16777217", "NaN", "-Infinity"):
        data = body().replace('"weight": 5550.0', f'"weight": {raw}')
        assert post(stub, "/v1/models/demo:predict", data)[0] == 200, raw


@pytest.mark.parametrize("raw", ["1e400", "-1e309", "1" + "0" * 310, "0.5e400"],
                         ids=["1e400", "-1e309", "311 digits", "0.5e400"])
def test_a_number_too_big_for_a_double_is_a_parse_error_at_its_offset(stub, raw):
    data = body().replace('"weight": 5550.0', f'"weight": {raw}')
    assert post(stub, "/v1/models/demo:predict", data) == (400, {
        "error": "JSON Parse error: Number too big to be stored in double. at offset: "
                 f"{data.index(raw)}"})
    # Only where a number is: the same text inside a string is a string.
    quoted = body(site=raw)
    assert post(stub, "/v1/models/demo:predict", quoted)[0] == 200


def test_parse_errors_come_before_the_servable_lookup(stub):
    status, answer = post(stub, "/v1/models/demo/versions/7:predict", "{not json")
    assert status == 400 and answer["error"].startswith("JSON Parse error: ")


@pytest.mark.parametrize("data, error", [
    ("[1]", "JSON Value: [1] Is not object"),
    ('{"signature_name": "raw_features"}', "Missing 'inputs' or 'instances' key"),
    ('{"instances": []}', "JSON Value: {\"instances\": []} No values in 'instances' array"),
])
def test_malformed_bodies_are_400(stub, data, error):
    assert post(stub, "/v1/models/demo:predict", data) == (400, {"error": error})


def test_a_path_that_is_not_a_predict_call_is_malformed(stub):
    assert post(stub, "/v1/models/demo:explain", body()) == \
        (400, {"error": "Malformed request: POST /v1/models/demo:explain"})
