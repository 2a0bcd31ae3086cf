"""The REST stand-in refuses what TF Serving refuses and accepts what it accepts, at each release
it follows (2.16.1 and 2.20.0; the sources are named in rest_stub.py and rapidjson.py): a client
test against it means something for the real server. Every test runs at both versions; where
they differ, the expectation names the version."""
from __future__ import annotations

import json

import pytest
import requests

from devtools.tf_serving.rapidjson import SERVER_VERSIONS
from devtools.tf_serving.rest_stub import RestStub, row_format_inputs

# The stub serves any model: its own name and row, not the example's.
ROW = {"site": "north", "grp": "b", "length": 50.0, "depth": 15.3, "width": 220.0,
       "weight": 5550.0}


def echo(signature, instances):
    return [{"class_name": "first", "probabilities": [1.0, 0.0, 0.0]} for _ in instances]


@pytest.fixture(scope="module", params=SERVER_VERSIONS)
def stub(request):
    with RestStub("demo", echo, versions=(1717171717, 1717258117),
                  server_version=request.param) as running:
        yield running


def post(stub, path, data):
    answer = requests.post(stub.url + path, data=data, timeout=10)
    return answer.status_code, answer.json()


def post_raw(stub, path, data):
    """As post, with the path sent byte for byte (requests would decode %6D to m itself)."""
    import http.client

    host, port = stub.url.rsplit("/", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", path, body=data.encode(),
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


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


def test_the_model_status_api_lists_the_loaded_versions(stub):
    """GET /v1/models/<name>[/versions/<v>]: every version AVAILABLE, as GetModelStatusResponse
    prints with preserve_proto_field_names (model_servers/get_model_status_impl.cc)."""
    answer = requests.get(stub.url + "/v1/models/demo", timeout=10)
    assert answer.status_code == 200
    assert answer.json() == {"model_version_status": [
        {"version": str(v), "state": "AVAILABLE",
         "status": {"error_code": "OK", "error_message": ""}} for v in (1717171717, 1717258117)]}
    one = requests.get(stub.url + "/v1/models/demo/versions/1717258117", timeout=10).json()
    assert [s["version"] for s in one["model_version_status"]] == ["1717258117"]


@pytest.mark.parametrize("path, error", [
    ("/v1/models/unknown", "Could not find any versions of model unknown"),
    ("/v1/models/demo/versions/7", "Could not find version 7 of model demo"),
])
def test_the_status_of_a_model_or_version_never_loaded_is_404(stub, path, error):
    answer = requests.get(stub.url + path, timeout=10)
    assert (answer.status_code, answer.json()) == (404, {"error": error})


def test_a_kept_alive_connection_is_closed_when_the_server_stops():
    """As a TF Serving process that exits: a client's pooled connection must not go on being
    answered (the endpoint's 503 on a stopped TF Serving depends on it)."""
    with requests.Session() as session:
        with RestStub("demo", echo) as running:
            url = running.url + "/v1/models/demo:predict"
            assert session.post(url, data=body(), timeout=10).status_code == 200
        with pytest.raises(requests.ConnectionError):
            session.post(url, data=body(), timeout=10)


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
    # json_tensor.cc quotes with RapidJSON's PrettyWriter; 2.20.0 keeps arrays on one line.
    ("[1]", {"2.16.1": "JSON Value: [\n    1\n] Is not object",
             "2.20.0": "JSON Value: [1] Is not object"}),
    ('{"signature_name": "raw_features"}', "Missing 'inputs' or 'instances' key"),
    ('{"instances": []}', "JSON Value: {\n    \"instances\": []\n} No values in 'instances' array"),
])
def test_malformed_bodies_are_400(stub, data, error):
    if isinstance(error, dict):
        error = error[stub.server_version]
    assert post(stub, "/v1/models/demo:predict", data) == (400, {"error": error})


def test_a_path_that_is_not_a_predict_call_is_malformed(stub):
    assert post(stub, "/v1/models/demo:explain", body()) == \
        (400, {"error": "Malformed request: POST /v1/models/demo:explain"})


# The behaviours where the stand-in once differed from the server (each with the request the
# server refuses, refused here too, beside the one it accepts).

@pytest.mark.parametrize("method", ["PREDICT", "Predict", "predicT"])
def test_the_method_is_predict_exactly(stub, method):
    # http_rest_api_handler.cc ProcessRequest: the regex matches any case, `*method ==
    # "predict"` does not, so the request keeps its initial status, "Malformed request".
    path = f"/v1/models/demo:{method}"
    assert post(stub, path, body()) == (400, {"error": f"Malformed request: POST {path}"})
    assert post(stub, "/v1/models/demo:predict", body())[0] == 200  # control
    assert post(stub, "/V1/MODELS/demo/VERSIONS/1717171717:predict", body())[0] == 200


def test_a_query_string_is_part_of_the_path_the_handler_matches(stub):
    # evhttp_request.cc: uri_path() is path_and_query; the anchored regex then fails.
    path = "/v1/models/demo:predict?verbose=1"
    assert post_raw(stub, path, body()) == (400, {"error": f"Malformed request: POST {path}"})
    assert post(stub, "/v1/models/demo:predict", body())[0] == 200  # control


def test_a_percent_encoded_model_name_is_served_under_its_decoded_name(stub):
    # http_rest_api_util.cc ParseModelInfo: DecodeArg (curl_easy_unescape) on the model name.
    assert post_raw(stub, "/v1/models/de%6Do:predict", body())[0] == 200
    assert post_raw(stub, "/v1/models/%64emo/versions/1717171717:predict", body())[0] == 200
    # control: decoded, it names a model that is not loaded
    assert post_raw(stub, "/v1/models/de%6Dx:predict", body()) == \
        (404, {"error": "Servable not found for request: Latest(demx)"})


def test_inputs_and_instances_together_are_refused(stub):
    data = json.dumps({"instances": [1], "inputs": [1]})
    quoted = {"2.16.1": '{\n    "instances": [\n        1\n    ],\n    "inputs": [\n        1\n'
                        '    ]\n}',
              "2.20.0": '{\n    "instances": [1],\n    "inputs": [1]\n}'}[stub.server_version]
    assert post(stub, "/v1/models/demo:predict", data) == (400, {
        "error": f"JSON Value: {quoted} Not formatted correctly expecting only one of 'inputs' "
                 "or 'instances' keys to exist "})
    assert post(stub, "/v1/models/demo:predict", json.dumps({"instances": [1]}))[0] == 200


def test_an_empty_signature_name_is_serving_default(stub):
    seen = []
    with RestStub("demo", lambda signature, instances: seen.append(signature) or
                  [0.5 for _ in instances], server_version=stub.server_version) as running:
        assert post(running, "/v1/models/demo:predict",
                    json.dumps({"signature_name": "", "instances": [1]}))[0] == 200
        assert post(running, "/v1/models/demo:predict", json.dumps({"instances": [1]}))[0] == 200
        assert seen == ["serving_default", "serving_default"]
        # control: a signature_name that is not a string is refused (FillSignature)
        status, answer = post(running, "/v1/models/demo:predict",
                              json.dumps({"signature_name": 0, "instances": [1]}))
        assert status == 400 and answer["error"].endswith(
            "not formatted correctly. 'signature_name' key must be a string value.")


def b64_model(signature, instances, server_version):
    row_format_inputs(instances, {"examples": "string"}, server_version)
    return [0.5 for _ in instances]


@pytest.mark.parametrize("encoded, accepted", [
    ("QQ==", True), ("QQ", True), ("Q Q\n==", True), ("QQ..", True), ("QUJD", True),
    ("QQ=", False), ("QQ===", False), ("QUJD=", False), ("Q", False), ("QQ==QQ", False),
    ("QQ!!", False),
], ids=["padded", "unpadded", "whitespace", "dots", "no pad needed", "short pad", "long pad",
        "pad not needed", "one left over", "data after pad", "stray character"])
def test_base64_is_decoded_as_absl_decodes_it(stub, encoded, accepted):
    # json_tensor.cc JsonDecodeBase64Object: absl::Base64Unescape; padding optional but exact.
    with RestStub("demo", b64_model, server_version=stub.server_version) as running:
        answer = post(running, "/v1/models/demo:predict",
                      json.dumps({"instances": [{"b64": encoded}]}))
    assert answer == ((200, {"predictions": [0.5]}) if accepted else (400, {
        "error": "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
                 "Unable to base64 decode"}))


def test_data_after_the_document_is_refused_at_2_16_1_and_ignored_at_2_20_0(stub):
    data = body() + ' {"instances": 0}'
    offset = len(body()) + 1
    expected = {"2.16.1": (400, {"error": "JSON Parse error: The document root must not be "
                                          f"followed by other values. at offset: {offset}"}),
                "2.20.0": (200, {"predictions": [echo(None, [0])[0]]})}[stub.server_version]
    assert post(stub, "/v1/models/demo:predict", data) == expected
    # controls: whitespace after it is no data; a broken document is refused at both
    assert post(stub, "/v1/models/demo:predict", body() + " \r\n\t")[0] == 200
    assert post(stub, "/v1/models/demo:predict", body()[:-1])[0] == 400


def test_an_empty_body_is_the_empty_document(stub):
    assert post(stub, "/v1/models/demo:predict", "") == \
        (400, {"error": "JSON Parse error: The document is empty"})
    assert post(stub, "/v1/models/demo:predict", "  \n") == \
        (400, {"error": "JSON Parse error: The document is empty. at offset: 3"})


def test_a_json_value_in_an_error_is_quoted_as_the_tag_quotes_it(stub):
    long = {"signature_name": 7, "instances": [{"site": "x" * 40} for _ in range(10)]}
    status, answer = post(stub, "/v1/models/demo:predict", json.dumps(long))
    assert status == 400
    quoted = answer["error"][len("JSON Value: "):answer["error"].index(" not formatted")]
    if stub.server_version == "2.16.1":  # JsonValueToString: all of it, pretty-printed
        assert json.loads(quoted) == long and quoted.startswith('{\n    "signature_name": 7,')
    else:  # JsonValueToDebugString: cut once 256 bytes are written
        assert 256 <= len(quoted.encode()) < 320 and quoted.startswith(
            '{\n    "signature_name": 7,\n    "instances": [{\n')


@pytest.mark.parametrize("value, dtype, error", [
    ("a", "float", 'JSON Value: "a" Type: String is not of expected type: float'),
    (1.5, "string", "JSON Value: 1.5 Type: Number is not of expected type: string"),
    (True, "int64", "JSON Value: true Type: True is not of expected type: int64"),
])
def test_type_errors_name_tensorflow_dtypes(stub, value, dtype, error):
    # DataTypeString: "float", not numpy's "float32".
    with pytest.raises(Exception) as raised:
        row_format_inputs([value], {"x": dtype}, stub.server_version)
    assert str(raised.value) == ("Failed to process element: 0 of 'instances' list. Error: "
                                 f"INVALID_ARGUMENT: {error}")
    assert row_format_inputs([{"b64": "QQ=="} if dtype == "string" else 1], {"x": dtype},
                             stub.server_version)  # control


def test_a_request_over_max_batch_size_is_refused_as_the_batch_scheduler_does(stub):
    with RestStub("demo", echo, server_version=stub.server_version, max_batch_size=4) as running:
        rows = {"signature_name": "raw_features", "instances": [ROW] * 5}
        assert post(running, "/v1/models/demo:predict", json.dumps(rows)) == (400, {
            "error": "Task size 5 is larger than maximum input batch size 4"})
        rows["instances"] = [ROW] * 4  # control: at the limit
        assert post(running, "/v1/models/demo:predict", json.dumps(rows))[0] == 200
