"""The client's list requests through the TF1 session loader TF Serving uses: a small SavedModel
whose `raw_features` and `retrieve` take [batch, n] list inputs as the export's do ("" / NaN for
an absent position), served by the REST stand-in (session_model.SessionModel). The padding must
count for nothing, and an unpadded request must be refused before it reaches the model."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from core.config import load_config
from pipeline import predict
from devtools.tf_serving.rest_stub import RestStub, StubError
from tests.serving.list_rows import GOOD, recs_config, write

ITEMS = ["i1", "i2", "i3", "i4"]
K = 3


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return recs_config(tmp_path_factory.mktemp("recs"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A SavedModel of two signatures over the test config's inputs: raw_features' probability
    is (present history items) / 8 + (sum of present waits) / 100; retrieve ranks ITEMS by how
    often each is in the history (ties: ITEMS' order), scores those counts."""
    import tensorflow as tf

    from devtools.tf_serving.session_model import SessionModel

    def present_counts(hist):
        return tf.reduce_sum(tf.cast(tf.equal(hist[:, :, None], tf.constant(ITEMS)), tf.float32),
                             axis=1)  # [batch, items]

    def raw(hr, dev, item, hist, waits):
        present = tf.reduce_sum(tf.cast(tf.not_equal(hist, ""), tf.float32), axis=1)
        wait = tf.reduce_sum(tf.where(tf.math.is_nan(waits), 0.0, waits), axis=1)
        probability = present / 8 + wait / 100
        return {"probability": probability,
                "class_name": tf.where(probability >= 0.5, "1", "0")}

    def retrieve(hr, dev, hist, waits):
        scores, indices = tf.math.top_k(present_counts(hist), k=K)
        return {"item_ids": tf.gather(tf.constant(ITEMS), indices), "scores": scores}

    def spec(dtype, rank, name):
        return tf.TensorSpec([None] * rank, dtype, name=name)

    inputs = {"hr": spec(tf.float32, 1, "hr"), "dev": spec(tf.string, 1, "dev"),
              "item": spec(tf.string, 1, "item"), "hist": spec(tf.string, 2, "hist"),
              "waits": spec(tf.float32, 2, "waits")}
    query = {k: v for k, v in inputs.items() if k != "item"}
    module = tf.Module()
    module.raw = tf.function(lambda **kw: raw(**kw))
    module.retrieve = tf.function(lambda **kw: retrieve(**kw))
    folder = tmp_path_factory.mktemp("list_model") / "1"
    tf.saved_model.save(module, str(folder), signatures={
        "raw_features": module.raw.get_concrete_function(**inputs),
        "retrieve": module.retrieve.get_concrete_function(**query)})
    return SessionModel(folder)


def expected(rows):
    """What the model answers for the CSV's rows, computed from the cells themselves."""
    probabilities, retrieved = [], []
    for row in rows:
        history = row.values["hist"]
        probabilities.append(len(history) / 8 + sum(row.values["waits"]) / 100)
        counts = {item: history.count(item) for item in ITEMS}
        ranked = sorted(ITEMS, key=lambda i: (-counts[i], ITEMS.index(i)))[:K]
        retrieved.append([(item, float(counts[item])) for item in ranked])
    return probabilities, retrieved


def test_padded_lists_answer_as_the_unpadded_rows(served, tmp_path, config_path, capsys):
    config = load_config(config_path)
    path = write(tmp_path, GOOD + "u4,i4,i2|i2|i1|i2|i4,0.25|0.25|0.5,3,mobile,0\n")
    rows = predict.read_rows(path, config.features, config.data.null_markers)
    probabilities, retrieved = expected(rows)
    with RestStub("recs", served.predict_instances) as stub:
        for batch in ("1", "2", "4"):
            assert predict.main(["--config", str(config_path), "--url", stub.url, "--csv",
                                 str(path), "--batch-size", batch]) == 0
            out = capsys.readouterr().out.splitlines()
            assert [float(line.split("=")[1]) for line in out] == \
                pytest.approx(probabilities, abs=1e-3), batch
            assert predict.main(["--config", str(config_path), "--url", stub.url, "--csv",
                                 str(path), "--batch-size", batch, "--signature",
                                 "retrieve"]) == 0
            out = capsys.readouterr().out.splitlines()
            assert out == [f"row {n} (line {n + 1}): " + ", ".join(
                f"{item} ({score:.3f})" for item, score in top)
                for n, top in enumerate(retrieved, 1)], batch
    assert stub.received[-1]["signature_name"] == "retrieve"


def test_an_unpadded_request_is_refused_before_the_model(served, tmp_path, config_path):
    """Negative control: the same rows without the client's padding."""
    config = load_config(config_path)
    rows = predict.read_rows(write(tmp_path, GOOD), config.features, config.data.null_markers)
    instances = [dict(row.values) for row in rows]
    with pytest.raises(StubError, match="Expecting tensor size: 3 but got: 1"):
        served.predict_instances("raw_features", json.loads(json.dumps(instances)))
    body = json.loads(json.dumps(predict.build_request([r.values for r in rows],
                                                       config.features)))
    assert len(served.predict_instances("raw_features", body["instances"])) == 3


def test_serving_default_examples_hold_each_list_as_the_reader_writes_it(tmp_path,
                                                                         config_path):
    """The client's tf.Examples, as the pipeline's CSV reader builds them from the same rows
    (an empty cell: the feature present, with no values)."""
    from components.example_gen.csv_reader import parse_csv
    from tensorflow.core.example import example_pb2

    config = load_config(config_path)
    path = write(tmp_path, GOOD)
    rows = predict.read_rows(path, config.features, config.data.null_markers)
    body = predict.build_request([r.values for r in rows], config.features, "serving_default")
    sent = [example_pb2.Example.FromString(base64.b64decode(i["b64"])) for i in body["instances"]]
    read = list(parse_csv(str(path), GOOD, config.reader_features, config.data.null_markers))
    for client, reader in zip(sent, read, strict=True):
        for name in ("hist", "waits"):
            assert client.features.feature[name] == reader.features.feature[name], name
    assert np.allclose(sent[2].features.feature["waits"].float_list.value, [3, 4, 0.5])
    empty = sent[2].features.feature
    assert "hist" in empty and not empty["hist"].bytes_list.value
