"""The gRPC stand-in (devtools/tf_serving/grpc_stub.py) answers TF Serving's own Python client
(tensorflow_serving.apis PredictionServiceStub / ModelServiceStub over a real channel) as TF
Serving 2.16.1 and 2.20.0 do: the same predictions as the REST path for the pushed model's
signatures (end to end, the stand-in's own process), and each status TF Serving answers, exact
code and message, against a small real SavedModel loaded through the TF1 session loader."""
from __future__ import annotations

import base64
import json
import math
import re
import subprocess
import sys

import grpc
import numpy as np
import pytest
import requests

from devtools.tf_serving.metrics import Metrics
from devtools.tf_serving.rest_stub import RestStub
from devtools.tf_serving.servables import ServableError, Servables
from tests.helpers import LazyModules

# TF Serving's generated protos import TensorFlow: loaded at first use, not when pytest collects
# this module (tests/test_collection.py).
apis = LazyModules("tensorflow_serving.apis", "classification_pb2", "get_model_metadata_pb2",
                   "get_model_status_pb2", "model_service_pb2_grpc", "predict_pb2",
                   "prediction_service_pb2_grpc", "regression_pb2")

VERSIONS = (1717171717, 1717258117)


def _build_model(path):
    """A TF1-graph SavedModel: `serving_default` (predict: x float [?, 2] -> y = x1 + 2 x2),
    `classify` and `regress` over serialized tf.Examples (feature f), as Estimators export."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        x = v1.placeholder(tf.float32, [None, 2], name="x")
        y = tf.identity(x[:, 0] + 2 * x[:, 1], name="y")
        serialized = v1.placeholder(tf.string, [None], name="examples")
        f = v1.io.parse_example(serialized, {"f": v1.io.FixedLenFeature([1], tf.float32)})["f"]
        scores = tf.concat([1 - tf.sigmoid(f), tf.sigmoid(f)], axis=1, name="scores")
        classes = tf.tile(tf.constant([["no", "yes"]]), [tf.shape(f)[0], 1], name="classes")
        info = v1.saved_model.utils.build_tensor_info
        sig = v1.saved_model.signature_def_utils.build_signature_def
        builder = v1.saved_model.builder.SavedModelBuilder(str(path))
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
            "serving_default": sig({"x": info(x)}, {"y": info(y)}, "tensorflow/serving/predict"),
            "classify": sig({"inputs": info(serialized)},
                            {"classes": info(classes), "scores": info(scores)},
                            "tensorflow/serving/classify"),
            "regress": sig({"inputs": info(serialized)}, {"outputs": info(3 * f[:, 0])},
                           "tensorflow/serving/regress")})
        builder.save()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from devtools.tf_serving.session_model import SessionModel

    path = tmp_path_factory.mktemp("grpc") / "1"
    _build_model(path)
    return SessionModel(path)


@pytest.fixture(scope="module")
def stub(model):
    from devtools.tf_serving.grpc_stub import GrpcStub

    servables = Servables("demo", VERSIONS, labels={"stable": VERSIONS[0]})
    with GrpcStub(servables, model, max_batch_size=3) as running:
        channel = grpc.insecure_channel(running.target)
        running.client = apis.prediction_service_pb2_grpc.PredictionServiceStub(channel)
        running.status_client = apis.model_service_pb2_grpc.ModelServiceStub(channel)
        yield running
        channel.close()


def predict_request(x=((1.0, 2.0),), name="demo", **spec):
    import tensorflow as tf

    request = apis.predict_pb2.PredictRequest()
    request.model_spec.name = name
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, key, value)
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.asarray(x, np.float32)))
    return request


def refused(call, request):
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    return caught.value.code().name, caught.value.details()


def test_predict_answers_the_signature_with_the_resolved_version(stub):
    import tensorflow as tf

    response = stub.client.Predict(predict_request([[1, 2], [3, 4]]), timeout=30)
    assert tf.make_ndarray(response.outputs["y"]).tolist() == [5.0, 11.0]
    # the latest version and the default signature, as predict_util.cc fills the ModelSpec
    assert (response.model_spec.name, response.model_spec.version.value,
            response.model_spec.signature_name) == ("demo", VERSIONS[1], "serving_default")
    labelled = stub.client.Predict(predict_request(version_label="stable"), timeout=30)
    assert labelled.model_spec.version.value == VERSIONS[0]
    pinned = stub.client.Predict(predict_request(version=VERSIONS[0]), timeout=30)
    assert pinned.model_spec.version.value == VERSIONS[0]


@pytest.mark.parametrize("spec, code, message", [
    ({"name": ""}, "INVALID_ARGUMENT", "ModelSpec has no name specified."),
    ({"name": "unknown"}, "NOT_FOUND", "Servable not found for request: Latest(unknown)"),
    ({"version": 7}, "NOT_FOUND", "Servable not found for request: Specific(demo, 7)"),
    ({"version_label": "canary"}, "INVALID_ARGUMENT",
     "Unrecognized servable version label: canary"),
    ({"signature_name": "nope"}, "FAILED_PRECONDITION",
     'Serving signature key "nope" not found.'),
])
def test_a_bad_model_spec_gets_tf_servings_status(stub, spec, code, message):
    assert refused(stub.client.Predict, predict_request(**spec)) == (code, message)


def test_bad_inputs_are_invalid_argument(stub):
    import tensorflow as tf

    extra = predict_request()
    extra.inputs["z"].CopyFrom(tf.make_tensor_proto([1.0]))
    assert refused(stub.client.Predict, extra) == ("INVALID_ARGUMENT", (
        "input size does not match signature: 2!=1 len({x,z}) != len({x}). Sent extra: {z}. "
        "Missing but required: {}."))
    wrong_dtype = predict_request()
    wrong_dtype.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 2), np.float64)))
    assert refused(stub.client.Predict, wrong_dtype) == (
        "INVALID_ARGUMENT", "Expects arg[0] to be float but double is provided")
    code, message = refused(stub.client.Predict, predict_request([[1.0, 2.0, 3.0]]))
    assert code == "INVALID_ARGUMENT" and message.startswith("input x of serving_default has "
                                                             "shape [1, 3]")
    filtered = predict_request()
    filtered.output_filter.append("w")
    assert refused(stub.client.Predict, filtered) == (
        "INVALID_ARGUMENT", "output tensor alias not found in signature: w Outputs expected to "
                            "be in the set {y}.")


def test_more_rows_than_max_batch_size_are_refused_as_the_rest_path_does(stub):
    assert refused(stub.client.Predict, predict_request([[1, 2]] * 4)) == (
        "INVALID_ARGUMENT", "Task size 4 is larger than maximum input batch size 3")
    # control: max_batch_size rows are served
    served = stub.client.Predict(predict_request([[1, 2]] * 3), timeout=30).outputs["y"]
    assert [d.size for d in served.tensor_shape.dim] == [3]


def test_a_request_over_grpcs_4_mib_default_is_received(stub):
    """server.cc SetMaxMessageSize(kint32max): a 6 MiB request reaches the handler (refused
    there for its extra input), not RESOURCE_EXHAUSTED by gRPC's receive limit."""
    big = predict_request()
    big.inputs["pad"].string_val.append(b"x" * (6 << 20))
    code, message = refused(stub.client.Predict, big)
    assert code == "INVALID_ARGUMENT" and message.startswith("input size does not match")


def examples(*values):
    import tensorflow as tf

    request = apis.classification_pb2.ClassificationRequest()
    for v in values:
        request.input.example_list.examples.add().CopyFrom(tf.train.Example(
            features=tf.train.Features(feature={
                "f": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))})))
    return request.input


def test_classify_and_regress_run_their_signatures(stub):
    request = apis.classification_pb2.ClassificationRequest(input=examples(0.0, 2.0))
    request.model_spec.name, request.model_spec.signature_name = "demo", "classify"
    result = stub.client.Classify(request, timeout=30).result.classifications
    assert [[c.label for c in r.classes] for r in result] == [["no", "yes"], ["no", "yes"]]
    assert result[0].classes[1].score == pytest.approx(0.5)
    assert result[1].classes[1].score == pytest.approx(1 / (1 + math.exp(-2)))
    request = apis.regression_pb2.RegressionRequest(input=examples(1.5))
    request.model_spec.name, request.model_spec.signature_name = "demo", "regress"
    assert [r.value for r in stub.client.Regress(request, timeout=30).result.regressions] == \
        [pytest.approx(4.5)]


def test_classify_refuses_a_signature_that_is_not_a_classifiers(stub):
    request = apis.classification_pb2.ClassificationRequest(input=examples(1.0))
    request.model_spec.name = "demo"  # serving_default: x -> y, no "inputs"
    code, message = refused(stub.client.Classify, request)
    assert code == "INVALID_ARGUMENT" and message.startswith(
        "No classification inputs found in SignatureDef: ")
    request.model_spec.signature_name = "regress"  # one output, neither classes nor scores
    code, message = refused(stub.client.Classify, request)
    assert message.startswith('Expected classification signature outputs to contain at least '
                              'one of "classes" or "scores". Signature was: ')
    request.model_spec.signature_name = "nope"
    assert refused(stub.client.Classify, request) == (
        "INVALID_ARGUMENT", "No signature was found with the name: nope")
    regress = apis.regression_pb2.RegressionRequest(input=examples(1.0))
    regress.model_spec.name, regress.model_spec.signature_name = "demo", "classify"
    assert refused(stub.client.Regress, regress) == ("INVALID_ARGUMENT",
                                                     "Expected one output Tensor.")


def test_model_metadata_is_the_signature_def_map(stub, model):
    request = apis.get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "demo"
    assert refused(stub.client.GetModelMetadata, request) == (
        "INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field")
    request.metadata_field.append("signature_def")
    response = stub.client.GetModelMetadata(request, timeout=30)
    signatures = apis.get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signatures)
    assert dict(signatures.signature_def) == model.signatures
    assert response.model_spec.version.value == VERSIONS[1]
    request.metadata_field.append("graph")
    assert refused(stub.client.GetModelMetadata, request) == (
        "INVALID_ARGUMENT", "Metadata field graph is not supported")


def test_model_status_lists_the_loaded_versions(stub):
    request = apis.get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "demo"
    statuses = stub.status_client.GetModelStatus(request, timeout=30).model_version_status
    assert [(s.version, apis.get_model_status_pb2.ModelVersionStatus.State.Name(s.state))
            for s in statuses] == [(v, "AVAILABLE") for v in VERSIONS]
    request.model_spec.version.value = 7
    assert refused(stub.status_client.GetModelStatus, request) == (
        "NOT_FOUND", "Could not find version 7 of model demo")
    request.model_spec.name = "unknown"
    request.model_spec.ClearField("version")
    assert refused(stub.status_client.GetModelStatus, request) == (
        "NOT_FOUND", "Could not find any versions of model unknown")


def test_a_label_on_a_version_not_available_is_refused():
    """server_core.cc UpdateModelVersionLabelMap: FAILED_PRECONDITION, the config refused."""
    with pytest.raises(ServableError) as caught:
        Servables("demo", [1], labels={"canary": 2})
    assert (caught.value.code, str(caught.value)) == (
        "FAILED_PRECONDITION", "Request to assign label to version 2 of model demo, which is "
                               "not currently available for inference")


def test_grpc_calls_are_counted_on_the_rest_ports_prometheus_endpoint(model):
    from devtools.tf_serving.grpc_stub import GrpcStub

    metrics = Metrics()
    servables = Servables("demo", [1])
    with GrpcStub(servables, model, metrics=metrics) as grpc_stub, \
            RestStub("demo", lambda s, i: [0.0 for _ in i], metrics=metrics) as rest:
        client = apis.prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(grpc_stub.target))
        client.Predict(predict_request(), timeout=30)
        refused(client.Predict, predict_request(version=7))
        requests.post(rest.url + "/v1/models/demo:predict", json={"instances": [1]}, timeout=10)
        text = requests.get(rest.url + "/monitoring/prometheus/metrics", timeout=10).text
    assert ':tensorflow:serving:request_count{model_name="demo",status="OK"} 2' in text
    assert ':tensorflow:serving:request_count{model_name="demo",status="NOT_FOUND"} 1' in text
    assert re.search(r':tensorflow:serving:request_latency_count\{model_name="demo",'
                     r'API="Predict",entrypoint="GRPC"\} 1\n', text)
    assert re.search(r':tensorflow:serving:request_latency_count\{model_name="demo",'
                     r'API="predict",entrypoint="REST"\} 1\n', text)


# -- end to end: the stand-in's process, the pushed model, REST and gRPC side by side ----------

def _started(pushed_run, pushed_config):
    process = subprocess.Popen(
        [sys.executable, "-m", "devtools.tf_serving", "--model-base-path",
         str(pushed_run.model_base_path), "--model-name", pushed_config.serving.model_name,
         "--port", "0", "--grpc-port", "0"], stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    found = re.search(r"on (http://\S+) and gRPC (\S+) ", line)
    if not found:
        process.kill()
        raise AssertionError(f"the stand-in did not start: {line!r}")
    return process, found[1], found[2]


def _tensors(instances, signature_def):
    """The REST body's instances as TensorProtos, each input in the dtype GetModelMetadata
    names (as a client in another language builds them from the metadata)."""
    import tensorflow as tf

    tensors = {}
    for name, info in signature_def.inputs.items():
        dtype = tf.dtypes.as_dtype(info.dtype)
        values = [row[name] if isinstance(row, dict) and "b64" not in row else row
                  for row in instances]
        values = [base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in values]
        if dtype == tf.string:
            values = [[x.encode() for x in v] if isinstance(v, list) else
                      (v if isinstance(v, bytes) else v.encode()) for v in values]
        tensors[name] = tf.make_tensor_proto(np.asarray(values, dtype=dtype.as_numpy_dtype))
    return tensors


@pytest.mark.e2e
def test_the_grpc_client_gets_the_rest_paths_predictions(pushed_run, pushed_config, tmp_path):
    import tensorflow as tf

    from pipeline import predict
    from tests.serving.sample_rows import SAMPLE_CSV

    features, nulls = pushed_config.features, pushed_config.data.null_markers
    path = tmp_path / "rows.csv"
    path.write_text(SAMPLE_CSV)
    rows = [row.values for row in predict.read_rows(path, features, nulls)]
    name = pushed_config.serving.model_name
    process, url, target = _started(pushed_run, pushed_config)
    try:
        channel = grpc.insecure_channel(target)
        client = apis.prediction_service_pb2_grpc.PredictionServiceStub(channel)
        metadata = apis.get_model_metadata_pb2.GetModelMetadataRequest(
            metadata_field=["signature_def"])
        metadata.model_spec.name = name
        signatures = apis.get_model_metadata_pb2.SignatureDefMap()
        client.GetModelMetadata(metadata, timeout=60).metadata["signature_def"].Unpack(signatures)
        for signature in predict.SIGNATURES:
            body = json.loads(json.dumps(predict.build_request(rows, features, signature)))
            # NaN for a missing number, written as the client writes it (json.dumps)
            rest = requests.post(f"{url}/v1/models/{name}:predict", data=json.dumps(body),
                                 timeout=60)
            assert rest.status_code == 200, rest.text
            request = apis.predict_pb2.PredictRequest()
            request.model_spec.name, request.model_spec.signature_name = name, signature
            for key, tensor in _tensors(body["instances"],
                                        signatures.signature_def[signature]).items():
                request.inputs[key].CopyFrom(tensor)
            outputs = client.Predict(request, timeout=60).outputs
            answers = rest.json()["predictions"]
            np.testing.assert_allclose(tf.make_ndarray(outputs["probabilities"]),
                                       [a["probabilities"] for a in answers], atol=1e-6,
                                       err_msg=signature)
            assert [c.decode() for c in tf.make_ndarray(outputs["class_name"])] == \
                [a["class_name"] for a in answers], signature
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_stand_in_refuses_to_start_with_a_label_on_a_version_it_does_not_serve(tmp_path):
    """As TF Serving refuses the model config (server_core.cc): exit 1, the status on stderr,
    before the model loads."""
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "saved_model.pb").write_bytes(b"")
    result = subprocess.run(
        [sys.executable, "-m", "devtools.tf_serving", "--model-base-path", str(tmp_path),
         "--model-name", "demo", "--port", "0", "--grpc-port", "0", "--version-label",
         "canary=2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "error: FAILED_PRECONDITION: Request to assign label to version 2 of model demo, " \
           "which is not currently available for inference" in result.stderr


def multi_request(*tasks):
    from tensorflow_serving.apis import inference_pb2

    request = inference_pb2.MultiInferenceRequest(input=examples(0.0, 1.0))
    for signature, method in tasks:
        task = request.tasks.add(method_name=method)
        task.model_spec.name, task.model_spec.signature_name = "demo", signature
    return request


def test_multi_inference_runs_each_task_on_the_same_examples(stub):
    response = stub.client.MultiInference(multi_request(
        ("classify", "tensorflow/serving/classify"), ("regress", "tensorflow/serving/regress")),
        timeout=30)
    classified, regressed = response.results
    assert [c.classes[1].score for c in classified.classification_result.classifications] == \
        [pytest.approx(0.5), pytest.approx(1 / (1 + math.exp(-1)))]
    assert [r.value for r in regressed.regression_result.regressions] == [0.0, 3.0]
    assert (regressed.model_spec.signature_name, regressed.model_spec.version.value) == \
        ("regress", VERSIONS[1])


def test_multi_inference_refuses_as_multi_inference_cc_does(stub):
    assert refused(stub.client.MultiInference, multi_request(
        ("serving_default", "tensorflow/serving/predict"))) == (
        "UNIMPLEMENTED", "Unsupported signature method_name: tensorflow/serving/predict")
    assert refused(stub.client.MultiInference, multi_request(
        ("classify", "tensorflow/serving/classify"), ("classify", "tensorflow/serving/classify")
    )) == ("INVALID_ARGUMENT", "Duplicate evaluation of signature: classify")
    assert refused(stub.client.MultiInference, multi_request()) == (
        "INVALID_ARGUMENT", "ModelSpec has no name specified.")
