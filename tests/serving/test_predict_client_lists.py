"""pipeline.predict with list columns and `retrieve`, against the REST stand-in (fast, no model):
a `|`-separated cell goes out as a JSON list, padded to one length per request as TF Serving's
row format needs (the stand-in refuses unequal lists as the server does: the negative control),
bad cells are named, and `--signature retrieve` prints each row's top-k items."""
from __future__ import annotations

import json
import math

import pytest
import requests

from core.config import load_config
from pipeline import predict
from tests.serving.list_rows import GOOD, HEADER, recs_config, write
from devtools.tf_serving.rest_stub import RestStub, StubError, row_format_inputs

QUERY = ["hr", "dev", "hist", "waits"]  # every model input but the candidate, `item`
# The inputs of the exported signatures (components/trainer/export.py), as DataTypeString.
RAW_FEATURES = {"hr": "float", "dev": "string", "item": "string", "hist": "string",
                "waits": "float"}
RETRIEVE = {name: RAW_FEATURES[name] for name in QUERY}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return recs_config(tmp_path_factory.mktemp("lists"))


@pytest.fixture(scope="module")
def config(config_path):
    return load_config(config_path)


def run_main(config_path, *args):
    return predict.main(["--config", str(config_path), *map(str, args)])


def like_the_server(signature, instances):
    """Reads the instances as TF Serving does (row_format_inputs, the signatures' inputs) and
    answers with what each signature returns: a click probability, or the k items ranked by how
    often they are in the history (absent positions, the "" padding, count for nothing)."""
    inputs = row_format_inputs(instances, RETRIEVE if signature == "retrieve" else RAW_FEATURES)
    answers = []
    for history in inputs["hist"]:
        present = [item for item in history if item]
        if signature == "retrieve":
            ranked = sorted({"i1", "i2", "i3", "i4"}, key=lambda i: (-present.count(i), i))[:3]
            answers.append({"item_ids": ranked, "scores": [float(present.count(i)) / 4
                                                           for i in ranked]})
        else:
            answers.append({"class_name": "1", "probability": len(present) / 8})
    return answers


def test_list_cells_are_read_as_the_pipelines_reader_reads_them(tmp_path, config):
    rows = predict.read_rows(write(tmp_path, GOOD), config.features, config.data.null_markers,
                             config.data.list_separator)
    assert [r.values["hist"] for r in rows] == [["i1", "i3", "i4"], ["i4"], []]
    assert [r.values["waits"] for r in rows] == [[1.5, 2.0], [], [3.0, 4.0, 0.5]]
    assert rows[0].values["item"] == "i2" and math.isnan(rows[2].values["hr"])
    # Another separator, from the config's data.list_separator.
    text = GOOD.replace("i1|i3|i4", "i1;i3;i4").replace("1.5|2", "1.5;2").replace("3|4|0.5", "3")
    rows = predict.read_rows(write(tmp_path, text), config.features, config.data.null_markers,
                             ";")
    assert rows[0].values["hist"] == ["i1", "i3", "i4"] and rows[0].values["waits"] == [1.5, 2.0]


def test_each_request_pads_its_lists_to_its_longest(tmp_path, config):
    rows = predict.read_rows(write(tmp_path, GOOD), config.features, config.data.null_markers)
    body = json.loads(json.dumps(predict.build_request([r.values for r in rows],
                                                       config.features)))
    assert body["signature_name"] == "raw_features"
    hist = [i["hist"] for i in body["instances"]]
    assert hist == [["i1", "i3", "i4"], ["i4", "", ""], ["", "", ""]]
    waits = [i["waits"] for i in body["instances"]]
    assert waits[0][:2] == [1.5, 2.0] and math.isnan(waits[0][2])
    assert all(math.isnan(w) for w in waits[1]) and waits[2] == [3.0, 4.0, 0.5]
    # A request of empty lists only still sends one (absent) position: no [batch, 0] tensor.
    alone = predict.build_request([rows[2].values], config.features)["instances"][0]
    assert alone["hist"] == [""] and alone["waits"] == [3.0, 4.0, 0.5]
    # The rows themselves are left as read.
    assert rows[1].values["hist"] == ["i4"]


def test_unequal_lists_in_one_request_are_refused_as_tf_serving_refuses_them(tmp_path, config):
    """Negative control: the client's body without its padding is what TF Serving refuses
    (json_tensor.cc AddInstanceItem: every instance of a request gives the same shape)."""
    rows = predict.read_rows(write(tmp_path, GOOD), config.features, config.data.null_markers)
    body = predict.build_request([r.values for r in rows], config.features)
    unpadded = {**body, "instances": [{**i, "hist": r.values["hist"]}
                                      for i, r in zip(body["instances"], rows, strict=True)]}
    with RestStub("recs", like_the_server) as stub:
        url = f"{stub.url}/v1/models/recs:predict"
        refused = requests.post(url, data=json.dumps(unpadded), timeout=10)
        accepted = requests.post(url, data=json.dumps(body), timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error"] == (
        "Failed to process element: 1 key: hist of 'instances' list. Error: INVALID_ARGUMENT: "
        "Expecting tensor size: 3 but got: 1")
    assert accepted.status_code == 200
    assert [p["probability"] for p in accepted.json()["predictions"]] == [3 / 8, 1 / 8, 0.0]


@pytest.mark.parametrize("instances, error", [
    # A ragged value; another shape than the first instance's; a number for a string; ...
    ([{"x": [["a"], "b"]}], "Failed to process element: 0 key: x of 'instances' list. "
     "Error: INVALID_ARGUMENT: JSON Value: \"b\" found at incorrect level: 2 in the JSON DOM. "
     "Expected at level: 2"),
    ([{"x": [["a"]]}, {"x": ["a"]}], "Failed to process element: 1 key: x of 'instances' list. "
     "Error: INVALID_ARGUMENT: Expecting shape [1,1] but got: [1]"),
    ([{"x": ["a", 3]}], "Error: INVALID_ARGUMENT: JSON Value: 3 Type: Number is not of "
     "expected type: string"),
    ([{"x": ["a", "b"]}, {"x": "a"}], "Expecting tensor size: 2 but got: 1"),
    ([{"x": [["a", "b"]]}, {"x": [["a"], ["b"]]}], "Expecting shape [1,2] but got: [2,1]"),
    ([{"x": ["a"], "y": 1}], "JSON object: does not have named input: y"),
    ([{}], "Failed to process element: 0 of 'instances' list. JSON object: {} keys must be "
     "equal to: x"),
])
def test_the_stand_in_reads_row_format_as_json_tensor_cc(instances, error):
    with pytest.raises(StubError) as refused:
        row_format_inputs(instances, {"x": "string"})
    assert refused.value.status == 400 and error in str(refused.value)
    assert row_format_inputs([{"x": []}, {"x": []}], {"x": "string"}) == {"x": [[], []]}


def test_the_client_prints_each_rows_answer_with_lists_in_batches(tmp_path, config_path,
                                                                  capsys):
    with RestStub("recs", like_the_server) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, GOOD),
                        "--batch-size", 2)
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines() == [
        "row 1 (line 2): 1 p(1)=0.375", "row 2 (line 3): 1 p(1)=0.125",
        "row 3 (line 4): 1 p(1)=0.000"]
    # Each request padded to its own longest list.
    assert [[len(i["hist"]) for i in body["instances"]] for body in stub.received] == \
        [[3, 3], [1]]


def test_retrieve_sends_the_query_and_prints_the_top_k_items(tmp_path, config_path, capsys):
    # The candidate column may be there (dropped) or not.
    text = "hist,waits,hr,dev\ni1|i3|i3,1,7,mobile\ni4|i2|i4|i4,,9,tablet\n"
    with RestStub("recs", like_the_server) as stub:
        assert run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, text),
                        "--signature", "retrieve") == 0
        assert run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, GOOD),
                        "--signature", "retrieve", "--batch-size", 1) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["row 1 (line 2): i3 (0.500), i1 (0.250), i2 (0.000)",
                       "row 2 (line 3): i4 (0.750), i2 (0.250), i1 (0.000)"]
    assert out[2] == "row 1 (line 2): i1 (0.250), i3 (0.250), i4 (0.250)"
    assert len(out) == 5
    bodies = stub.received
    assert {b["signature_name"] for b in bodies} == {"retrieve"}
    assert all(sorted(i) == sorted(QUERY) for b in bodies for i in b["instances"])


def test_retrieve_needs_the_retrieval_config_and_its_answer(tmp_path, config_path, capsys):
    no_retrieval = recs_config(tmp_path / "plain", retrieval=False)
    rows = write(tmp_path, GOOD)
    with RestStub("recs", like_the_server) as stub:
        assert run_main(no_retrieval, "--url", stub.url, "--csv", rows,
                        "--signature", "retrieve") == 2
        assert "has no `retrieval:` section" in capsys.readouterr().err
        assert stub.received == []
        # A model answering another signature's outputs is named, not misread.
        stub.predict = lambda signature, instances: [{"probability": 0.5} for _ in instances]
        assert run_main(config_path, "--url", stub.url, "--csv", rows,
                        "--signature", "retrieve") == 1
    assert "a prediction lacks item_ids and scores" in capsys.readouterr().err


@pytest.mark.parametrize("cells, expected", [
    ({"waits": "1.5|x"}, "rows.csv, line 3, column 'waits': the list '1.5|x' holds 'x' is not "
                         "a number"),
    ({"waits": "2|nan"}, "rows.csv, line 3, column 'waits': the list '2|nan' holds 'nan' is "
                         "not a number the pipeline accepts"),
    ({"waits": "1|4e39"}, "rows.csv, line 3, column 'waits': the list '1|4e39' holds '4e39' is "
                          "out of float32 range"),
    ({"hist": "i1||i2"}, "rows.csv, line 3, column 'hist': 'i1||i2' has an empty value between "
                         "separators ('|')"),
    ({"waits": "1|"}, "rows.csv, line 3, column 'waits': '1|' has an empty value"),
])
def test_a_bad_list_cell_exits_2_naming_its_place_and_sends_nothing(tmp_path, config_path,
                                                                    capsys, cells, expected):
    header = HEADER.split(",")
    second = dict(zip(header, "u9,i1,i2,1,3,mobile,0".split(","), strict=True))
    bad = ",".join({**second, **cells}[name] for name in header)
    path = write(tmp_path, GOOD.splitlines()[0] + "\n" + GOOD.splitlines()[1] + "\n" + bad + "\n")
    with RestStub("recs", like_the_server) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", path, "--batch-size", 1)
    assert code == 2 and stub.received == []
    assert expected in capsys.readouterr().err
