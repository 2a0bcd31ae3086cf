"""A user's session from a new CSV to a pushed model: `python -m pipeline.init`, then the command
it prints, as typed (README: Start from a CSV), and the next night's span. (No new span is all
cache: tests/test_pipeline_e2e.py, on the session's pushed run.)"""
from __future__ import annotations


import numpy as np
import pytest

from tests import datasets
from tests.helpers import add_span, load_yaml, run_cli, versions
from tests.pipeline.test_init import fruit_csv
from tests.serving.test_warmup import warmup_logs
from tests.test_pipeline_e2e import summary_list

pytestmark = pytest.mark.e2e


def test_a_new_csv_becomes_a_pipeline_that_runs_pushes_and_takes_a_new_span_as_new_work(
        tmp_path):
    csv_path = fruit_csv(tmp_path / "fruit.csv", rows=300)
    init = run_cli("pipeline.init", "--csv", str(csv_path), "--label", "kind",
                   "--span", "20261130", "--configs", str(tmp_path / "configs"),
                   "--data", str(tmp_path / "data"), "--outputs", str(tmp_path / "outputs"))
    assert init.returncode == 0, init.stdout + init.stderr
    assert (tmp_path / "data" / "fruit" / "span-20261130" / "fruit.csv").is_file()
    config = load_yaml((tmp_path / "configs" / "fruit.yaml").read_text())
    assert config["features"] == {"label": "kind", "numeric": ["weight_g", "diameter_cm"],
                                  "categorical": ["color"], "ignored": ["id", "farm"]}
    assert config["schema_file"] == "fruit.schema.pbtxt"
    schema = (tmp_path / "configs" / "fruit.schema.pbtxt").read_text()
    assert 'name: "color"' in schema and 'name: "kind"' in schema
    floor = config["evaluation"]["thresholds"]["SparseCategoricalAccuracy"]["lower_bound"]
    assert 0.33 < floor < 0.5  # three classes of about a third each

    command = init.stdout.strip().splitlines()[-1].split()
    assert command[:3] == ["python", "-m", "pipeline.run"], init.stdout
    run = run_cli(*command[2:])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "blessed:    yes" in run.stdout
    assert versions(tmp_path / "outputs" / "fruit" / "serving" / "fruit"), run.stdout

    # The next night (README: Caching): a new dated span is new work from the reader on.
    add_span(tmp_path / "data" / "fruit", "span-20261201")
    night = run_cli(*command[2:])
    assert night.returncode == 0, night.stdout + night.stderr
    new_work = {"CsvExampleGen", "StatisticsGen", "Transform", "Trainer"}
    assert new_work <= set(summary_list(night.stdout, "ran")), night.stdout
    assert "no new span" not in night.stdout


# Rows far from the decision boundary (binary) and points of the generating function
# (regression), in the generated data's columns (tests/datasets.py).
FAR_ROWS = {
    "binary": ("x1,x2,color,churned\n3.0,-2.0,red,\n-3.0,2.0,blue,\n", ["yes", "no"]),
    "regression": ("x1,x2,size,price\n1.0,0.0,large,\n-1.0,1.0,small,\n0.5,NA,medium,\n",
                   [datasets.price(1.0, 0.0, "large"), datasets.price(-1.0, 1.0, "small"),
                    datasets.price(0.5, 0.0, "medium")]),  # NA: x2 becomes its mean, ~0
}
# The generated labels' noise has std 2 (MAE ~1.6); a trained model is this close.
VALUE_TOLERANCE = 6.0


@pytest.mark.parametrize("kind, label, make", [
    ("binary", "churned", datasets.binary_csv), ("regression", "price", datasets.regression_csv)])
def test_a_binary_or_regression_csv_becomes_a_pushed_model_that_answers_for_its_task(
        tmp_path, capsys, kind, label, make):
    from pipeline import predict
    from devtools.tf_serving.rest_stub import RestStub
    from devtools.tf_serving.session_model import SessionModel

    name = f"{kind}-data"
    csv_path = make(tmp_path / f"{name}.csv")
    init = run_cli("pipeline.init", "--csv", str(csv_path), "--label", label,
                   "--span", "20261130", "--configs", str(tmp_path / "configs"),
                   "--data", str(tmp_path / "data"), "--outputs", str(tmp_path / "outputs"))
    assert init.returncode == 0, init.stdout + init.stderr
    assert f"task {kind} (inferred" in init.stdout
    config_path = tmp_path / "configs" / f"{name}.yaml"
    config = load_yaml(config_path.read_text())
    if kind == "binary":
        assert config["task"] == {"kind": "binary", "positive_class": "yes",
                                  "decision_threshold": 0.5}
        assert set(config["evaluation"]["thresholds"]) == {"AUC"}
    else:
        assert config["task"] == {"kind": "regression"}
        bound = config["evaluation"]["thresholds"]["MeanAbsoluteError"]["upper_bound"]
        assert 5 < bound < 20  # what always answering the median scores on this data

    # The schema to review gates the label: a binary label's two values as its domain (a third
    # value in a new span is an anomaly), a regression label a number present in every row.
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = text_format.Parse((tmp_path / "configs" / f"{name}.schema.pbtxt").read_text(),
                               schema_pb2.Schema())
    [feature] = [f for f in schema.feature if f.name == label]
    if kind == "binary":
        [domain] = [d for d in schema.string_domain if d.name == feature.domain]
        assert sorted(domain.value) == ["no", "yes"]
    else:
        assert feature.type == schema_pb2.FLOAT and feature.presence.min_fraction == 1.0

    command = init.stdout.strip().splitlines()[-1].split()
    run = run_cli(*command[2:])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "blessed:    yes" in run.stdout
    metrics = {"binary": ("auc", "precision", "recall", "binary_accuracy"),
               "regression": ("mean_absolute_error", "root_mean_squared_error")}[kind]
    for metric in (*metrics, "loss"):
        assert f"\n  {metric} " in run.stdout, run.stdout  # the task's metrics in the summary
    model_base = tmp_path / "outputs" / name / "serving" / name
    [version] = versions(model_base)

    # The pushed model, loaded as TF Serving loads it, answered through the REST row format by
    # the predict client.
    model = SessionModel(model_base / version)
    outputs = {"binary": {"class_name", "probability"}, "regression": {"value"}}[kind]
    for signature in ("serving_default", "raw_features"):
        assert set(model.signatures[signature].outputs) == outputs
    # TF Serving replays these at load; one that fails would fail the version's load.
    for request in warmup_logs(model_base / version):
        answer = model.run_request(request.predict_log.request)
        assert set(answer) == outputs and all(v.dtype != np.float64 for v in answer.values())
    # saved_model_cli: TF Serving's loader in a process of its own, on raw_features.
    inputs = {"binary": "x1=[3.0];x2=[-2.0];color=['red']",
              "regression": "x1=[1.0];x2=[0.0];size=['large']"}[kind]
    cli = run_cli("tensorflow.python.tools.saved_model_cli", "run", "--dir",
                  str(model_base / version), "--tag_set", "serve", "--signature_def",
                  "raw_features", "--input_exprs", inputs, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert all(f"output key {name}" in cli.stdout for name in outputs), cli.stdout
    rows, expected = FAR_ROWS[kind]
    rows_path = tmp_path / "rows.csv"
    rows_path.write_text(rows)
    printed = {}
    with RestStub(name, model.predict_instances) as stub:
        for signature in predict.SIGNATURES:
            code = predict.main(["--url", stub.url, "--csv", str(rows_path), "--config",
                                 str(config_path), "--signature", signature])
            assert code == 0
            printed[signature] = capsys.readouterr().out.strip().splitlines()
    assert printed["raw_features"] == printed["serving_default"]
    lines = printed["raw_features"]
    assert [line.split(": ")[0] for line in lines] == [
        f"row {i + 1} (line {i + 2})" for i in range(len(expected))]
    if kind == "binary":  # `row N (line L): <class> p(yes)=<probability of yes>`
        assert [line.split()[-2] for line in lines] == expected, lines
        probabilities = [float(line.split("p(yes)=")[1]) for line in lines]
        assert probabilities[0] > 0.9 and probabilities[1] < 0.1, lines
    else:  # `row N (line L): <value>`
        values = [float(line.split()[-1]) for line in lines]
        assert all(abs(v - e) < VALUE_TOLERANCE for v, e in zip(values, expected,
                                                                 strict=True)), (lines, expected)
