"""pipeline.predict without a model: CSV checks, request bodies, HTTP error handling (fast), on
a config of the test's own (neutral columns, not the bundled example's)."""
from __future__ import annotations

import math
import socket

import pytest

from pipeline import predict
from core.config import load_config
from tests.helpers import write_config
from devtools.tf_serving.rest_stub import RestStub, StubError

HEADER = "kind,site,length_a,depth_a,length_b,mass,grp,yr"
GOOD = f"{HEADER}\nka,st,39.1,18.7,181,3750,gm,2007\nkg,sb,NA,,NA,NA,NA,2009\n"


FEATURES = {"label": "kind", "numeric": ["length_a", "depth_a", "length_b", "mass"],
            "categorical": ["site", "grp"], "ignored": ["yr"]}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("client"), {
        "features": FEATURES, "schema_file": None, "serving.model_name": "demo"})


@pytest.fixture(scope="module")
def config(config_path):
    return load_config(config_path)


def write(tmp_path, text, name="rows.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def canned(signature, instances):
    return [{"class_name": "ka", "probabilities": [0.9, 0.06, 0.04]} for _ in instances]


def run_main(config_path, *args):
    return predict.main(["--config", str(config_path), *map(str, args)])


def test_rows_are_typed_and_label_and_ignored_columns_dropped(tmp_path, config):
    rows = predict.read_rows(write(tmp_path, GOOD), config.features, config.data.null_markers)
    assert [r.line for r in rows] == [2, 3]
    assert rows[0].values == {"length_a": 39.1, "depth_a": 18.7,
                              "length_b": 181.0, "mass": 3750.0,
                              "site": "st", "grp": "gm"}
    # Null markers ("NA" and "") become the missing values raw_features expects.
    assert all(math.isnan(rows[1].values[n]) for n in config.features.numeric)
    assert rows[1].values["grp"] == "" and rows[1].values["site"] == "sb"


def test_feature_columns_only_in_any_order(tmp_path, config):
    text = "grp,mass,site,length_b,depth_a,length_a\n" \
           "gf,3500,sd,192,17.9,46.5\n\n"
    rows = predict.read_rows(write(tmp_path, text), config.features, config.data.null_markers)
    assert len(rows) == 1 and rows[0].values["site"] == "sd"
    assert rows[0].values["mass"] == 3500.0


@pytest.mark.parametrize("text, expected", [
    ("", ["is empty"]),
    (f"{HEADER}\n", ["header but no rows"]),
    (HEADER.replace(",grp", "") + "\nka,sd,1,2,3,4,2007\n", ["missing feature", "'grp'"]),
    (HEADER + ",colour\nka,sd,1,2,3,4,gm,2007,red\n", ["unknown column", "'colour'"]),
    (HEADER + ",site\n" + "ka,sd,1,2,3,4,gm,2007,sd\n", ["more than once"]),
    (f"{HEADER}\nka,sd,1,2,3,4,gm,2007\nka,sd,1,x2,3,4,gm,2007\n",
     ["rows.csv, line 3, column 'depth_a': 'x2' is not a number"]),
    (f"{HEADER}\nka,sd,nan,2,3,4,gm,2007\n", ["line 2, column 'length_a': 'nan'"]),
    (f"{HEADER}\nka,sd,1,2,3,1e39,gm,2007\n",
     ["line 2, column 'mass': '1e39' is out of float32 range", "infinity"]),
    (f"{HEADER}\nka,sd,1,-3.5e38,3,4,gm,2007\n",
     ["line 2, column 'depth_a': '-3.5e38' is out of float32 range"]),
    (f"{HEADER}\nka,sd,1,2,3,4,gm\n", ["line 2: 7 cells where the header has 8"]),
])
def test_unusable_csv_is_rejected_with_its_place(tmp_path, config, text, expected):
    with pytest.raises(predict.InputError) as error:
        predict.read_rows(write(tmp_path, text), config.features, config.data.null_markers)
    for part in expected:
        assert part in str(error.value)


def test_numbers_float32_holds_are_sent_as_written(tmp_path, config):
    # TF Serving reads both into a float32 input: the largest float32, and an integer above 2^24
    # that float32 rounds (json_tensor.cc accepts both; see tests/serving/test_rest_stub.py).
    text = f"{HEADER}\nka,sd,3.4028235e38,16777217,3,4,gm,2007\n"
    rows = predict.read_rows(write(tmp_path, text), config.features, config.data.null_markers)
    assert rows[0].values["length_a"] == 3.4028235e38
    assert rows[0].values["depth_a"] == 16777217.0


def test_out_of_float32_range_exits_2_before_sending_anything(tmp_path, config_path, config,
                                                             capsys):
    # The server would take 1e39 (as infinity): only the client's own check stops it.
    text = GOOD + "ka,sd,1,2,3,1e39,gm,2007\n"
    with RestStub(config.serving.model_name, canned) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, text),
                        "--batch-size", 1)
    err = capsys.readouterr().err
    assert code == 2 and stub.received == []
    assert "rows.csv, line 4, column 'mass': '1e39' is out of float32 range" in err


def test_request_body_is_rest_row_format(config):
    row = {"site": "sb", "grp": "", "length_a": 50.0, "depth_a": math.nan,
           "length_b": 220.0, "mass": 5550.0, "kind": "ignored"}
    body = predict.build_request([row, row], config.features)
    assert body["signature_name"] == "raw_features"
    assert len(body["instances"]) == 2
    instance = body["instances"][0]
    assert set(instance) == set(config.features.model_inputs)  # TF Serving wants every input
    assert instance["grp"] == "" and math.isnan(instance["depth_a"])
    with pytest.raises(ValueError, match="unknown signature"):
        predict.build_request([row], config.features, "predict")


def test_client_prints_one_line_per_row_in_batches(tmp_path, config_path, config, capsys):
    text = GOOD + "kc,sd,46.5,17.9,192,3500,gf,2007\n"
    with RestStub(config.serving.model_name, canned) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, text),
                        "--batch-size", 2)
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out == ["row 1 (line 2): ka 0.900", "row 2 (line 3): ka 0.900",
                   "row 3 (line 4): ka 0.900"]
    assert [len(body["instances"]) for body in stub.received] == [2, 1]


def test_bad_row_exits_2_before_sending_anything(tmp_path, config_path, config, capsys):
    # One row per request, the bad row last: a client that checked each batch just before
    # sending it would already have sent the two good rows.
    text = GOOD + "ka,sd,1,2,three,4,gm,2007\n"
    with RestStub(config.serving.model_name, canned) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, text),
                        "--batch-size", 1)
    err = capsys.readouterr().err
    assert code == 2 and stub.received == []
    assert "rows.csv, line 4, column 'length_b': 'three' is not a number" in err


def test_server_down_exits_1_with_one_line(tmp_path, config_path, capsys):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = run_main(config_path, "--url", f"http://127.0.0.1:{port}", "--csv",
                    write(tmp_path, GOOD))
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "cannot reach TF Serving" in err and "Connection refused" in err


def test_server_error_answer_exits_1_with_its_message(tmp_path, config_path, config, capsys):
    def failing(signature, instances):
        raise StubError(400, "JSON Value: ... is not of expected type: float")

    with RestStub(config.serving.model_name, failing) as stub:
        code = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, GOOD))
        wrong_model = run_main(config_path, "--url", stub.url, "--csv", write(tmp_path, GOOD),
                               "--model", "x")
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and "answered 400: JSON Value" in err[0]
    assert wrong_model == 1 and "answered 404: Servable not found" in err[1]


@pytest.mark.parametrize("task, thresholds, answer, line", [
    ({"kind": "binary", "positive_class": "kg"}, {"AUC": {"lower_bound": 0.7}},
     {"class_name": "ka", "probability": 0.125}, "row 1 (line 2): ka p(kg)=0.125"),
    ({"kind": "regression"}, {"MeanAbsoluteError": {"upper_bound": 500}},
     {"value": 4321.5}, "row 1 (line 2): 4321.5"),
])
def test_client_prints_the_answer_of_the_configs_task(tmp_path, capsys, task, thresholds, answer,
                                                      line):
    config_path = write_config(tmp_path, {"features": FEATURES, "schema_file": None,
                                          "serving.model_name": "demo", "task": task,
                                          "evaluation.thresholds": thresholds})
    rows = write(tmp_path, f"{HEADER}\nka,st,39.1,18.7,181,3750,gm,2007\n")
    with RestStub("demo", lambda signature, instances: [answer for _ in instances]) as stub:
        assert run_main(config_path, "--url", stub.url, "--csv", rows) == 0
        assert capsys.readouterr().out.splitlines() == [line]
        # A model of another task (here the multiclass one) is named, not misread.
        wrong = {"class_name": "ka", "probabilities": [0.9, 0.05, 0.05]}
        stub.predict = lambda signature, instances: [wrong for _ in instances]
        assert run_main(config_path, "--url", stub.url, "--csv", rows) == 1
    assert f"a task.kind {task['kind']} model returns" in capsys.readouterr().err


def test_a_single_output_answer_is_read_as_tf_serving_writes_it(tmp_path, capsys):
    # A regression signature has one output, `value`: TF Serving's row format then answers each
    # row's value unnamed (json_tensor.cc at 2.16.1, MakeRowFormatJsonFromTensors).
    config_path = write_config(tmp_path, {"features": FEATURES, "schema_file": None,
                                          "serving.model_name": "demo",
                                          "task": {"kind": "regression"},
                                          "evaluation.thresholds": {
                                              "MeanAbsoluteError": {"upper_bound": 500}}})
    rows = write(tmp_path, f"{HEADER}\nka,st,39.1,18.7,181,3750,gm,2007\n")
    with RestStub("demo", lambda signature, instances: [4321.5 for _ in instances]) as stub:
        assert run_main(config_path, "--url", stub.url, "--csv", rows) == 0
    assert capsys.readouterr().out.splitlines() == ["row 1 (line 2): 4321.5"]
