"""Warmup records are fed as TF Serving feeds them, in the record's own dtype (predict_util.cc at
2.16.1 and 2.20.0 alike; components/trainer/warmup.py), and the export refuses a record the
server would refuse: a mistyped record would fail the whole version's load. On a small SavedModel
of its own (one numeric input, the export's two prediction signatures), not the pushed one."""
from __future__ import annotations

import pytest

# Imported when the module's first test runs, not at collection (tests/README.md).
tf = export = warmup = StubError = SPEC = None


@pytest.fixture(scope="module", autouse=True)
def _imports():
    global tf, export, warmup, StubError, SPEC
    import tensorflow
    from components.trainer import export as export_module, warmup as warmup_module
    from models.features import FeatureSpec
    from devtools.tf_serving.rest_stub import StubError as stub_error

    tf, export, warmup, StubError = tensorflow, export_module, warmup_module, stub_error
    SPEC = FeatureSpec(label="target", numeric=["size"], categorical=[])


def doubler():
    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve_examples(self, examples):
            parsed = tf.io.parse_example(
                examples, {"size": tf.io.FixedLenFeature([], tf.float32, default_value=0.0)})
            return {"value": parsed["size"] * 2.0}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="size")])
        def serve_raw(self, size):
            return {"value": size * 2.0}

    return Doubler()


def examples(count=3):
    return [tf.train.Example(features=tf.train.Features(feature={
        "size": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)]))}))
        .SerializeToString() for i in range(count)]


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, _imports):
    path = tmp_path_factory.mktemp("doubler") / "1"
    module = doubler()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.serve_examples, "raw_features": module.serve_raw})
    return path


def test_records_of_the_signatures_dtypes_are_written_and_replay(saved_model):
    path = export.write_warmup_requests(str(saved_model), "demo", examples(),
                                        {"size": tf.float32}, SPEC)
    assert len(warmup.read_records(path)) == 4  # 2 signatures x (1 row, all rows)
    assert warmup.replay(str(saved_model)) == 4


def test_a_mistyped_record_fails_the_export(saved_model):
    # float64 values for a float32 input (records 1-2 are serving_default's): a Python session
    # would cast them; TF Serving does not.
    with pytest.raises(warmup.WarmupError) as error:
        export.write_warmup_requests(str(saved_model), "demo", examples(),
                                     {"size": tf.float64}, SPEC)
    message = str(error.value)
    assert "tf_serving_warmup_requests, record 3 (signature raw_features)" in message
    assert "fail the version's load" in message
    assert message.endswith("INVALID_ARGUMENT: Expects arg[0] to be float but double is provided")


def request(signature, tensor):
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "demo", signature
    request.inputs["size" if signature == "raw_features" else "examples"].CopyFrom(tensor)
    return request


def test_the_stand_in_feeds_a_record_in_its_own_dtype(saved_model):
    from devtools.tf_serving.session_model import SessionModel

    model = SessionModel(saved_model)
    typed = request("raw_features", tf.make_tensor_proto([1.5, 2.0], dtype=tf.float32))
    assert list(model.run_request(typed)["value"]) == [3.0, 4.0]  # control
    for dtype, name in ((tf.float64, "double"), (tf.int64, "int64")):
        mistyped = request("raw_features", tf.make_tensor_proto([1, 2], dtype=dtype))
        with pytest.raises(StubError, match=f"Expects arg\\[0\\] to be float but {name} is "
                                            "provided"):
            model.run_request(mistyped)


@pytest.mark.parametrize("tensor, problem", [
    (lambda: tf.make_tensor_proto([[1.0], [2.0]], dtype=tf.float32),
     "input size of raw_features has shape [2, 1]; the signature takes ['?']"),
    (lambda: tf.make_tensor_proto(1.0, dtype=tf.float32),
     "input size of raw_features has shape []; the signature takes ['?']"),
], ids=["rank 2", "scalar"])
def test_a_record_of_another_rank_is_refused(saved_model, tensor, problem):
    from devtools.tf_serving.session_model import SessionModel

    with pytest.raises(StubError, match=problem.replace("[", "\\[").replace("?", "\\?")):
        SessionModel(saved_model).run_request(request("raw_features", tensor()))


def test_a_record_for_an_unknown_signature_or_inputs_is_refused(saved_model):
    signatures = warmup_signatures(saved_model)
    wrong = request("raw_features", tf.make_tensor_proto([1.0], dtype=tf.float32))
    wrong.inputs["extra"].CopyFrom(tf.make_tensor_proto([1.0], dtype=tf.float32))
    assert warmup.request_problem(signatures, wrong) == (
        "INVALID_ARGUMENT: input size does not match signature: 2!=1 len({extra,size}) != "
        "len({size}). Sent extra: {extra}. Missing but required: {}.")
    unknown = request("raw_features", tf.make_tensor_proto([1.0], dtype=tf.float32))
    unknown.model_spec.signature_name = "nope"
    assert warmup.request_problem(signatures, unknown) == \
        'FAILED_PRECONDITION: Serving signature key "nope" not found.'
    empty = request("serving_default", tf.make_tensor_proto(examples(1), dtype=tf.string))
    empty.model_spec.signature_name = ""  # RunPredict: the default signature
    assert warmup.request_problem(signatures, empty) is None


def warmup_signatures(saved_model):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel.FromString((saved_model / "saved_model.pb").read_bytes())
    return proto.meta_graphs[0].signature_def
