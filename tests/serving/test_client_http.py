"""`python -m pipeline.predict` as a user runs it, against a loopback server that answers TF
Serving's REST predict calls with the pushed model (rest_stub + session_model)."""
from __future__ import annotations

import re

import pytest

from tests.helpers import DEFAULT_CONFIG, example_config, run_cli
from devtools.tf_serving.rest_stub import RestStub
from tests.serving.sample_rows import SAMPLE_CSV, SAMPLE_ROWS, with_cell

LINE = re.compile(r"^row (\d+) \(line (\d+)\): (\S+) (\d\.\d{3})$")


def client(stub_url, csv_path, config_path, *extra):
    return run_cli("pipeline.predict", "--url", stub_url, "--csv", str(csv_path),
                   "--config", str(config_path), *extra, timeout=300)


@pytest.mark.e2e  # needs the pushed model of the session's pipeline run
@pytest.mark.parametrize("signature", ["raw_features", "serving_default"])
def test_client_prints_the_models_classes(serving_stub, session_model, pushed_run,
                                          pushed_config, tmp_path, signature):
    path = tmp_path / "rows.csv"
    path.write_text(SAMPLE_CSV)
    result = client(serving_stub.url, path, pushed_run.config_path, "--signature", signature)
    assert result.returncode == 0, result.stderr
    printed = [LINE.match(line) for line in result.stdout.splitlines()]
    assert len(printed) == SAMPLE_ROWS and all(printed), result.stdout

    from components.example_gen.csv_reader import parse_csv

    examples = [e.SerializeToString() for e in parse_csv(
        str(path), SAMPLE_CSV, pushed_config.reader_features,
        pushed_config.data.null_markers)]
    expected = session_model.run("serving_default", {"examples": examples})
    assert [m[3] for m in printed] == [c.decode() for c in expected["class_name"]]
    assert [float(m[4]) for m in printed] == \
        pytest.approx(expected["probabilities"].max(axis=1).tolist(), abs=1e-3)
    assert [int(m[2]) for m in printed] == list(range(2, SAMPLE_ROWS + 2))
    assert [body["signature_name"] for body in serving_stub.received] == [signature]


@pytest.mark.e2e
def test_bad_row_exits_2_and_sends_nothing(serving_stub, pushed_run, tmp_path):
    path = tmp_path / "rows.csv"
    numeric = example_config().features.numeric[-1]
    path.write_text(SAMPLE_CSV + with_cell(numeric, "186 mm"))
    result = client(serving_stub.url, path, pushed_run.config_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{path}, line {SAMPLE_ROWS + 2}, column '{numeric}': '186 mm' is not a " \
           "number" in result.stderr
    assert result.stdout == "" and serving_stub.received == []


def test_server_down_exits_1_with_a_clear_message(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text(SAMPLE_CSV)
    model = example_config().serving.model_name
    with RestStub(model, lambda signature, instances: []) as stub:
        url = stub.url
    # The server has gone away; nothing answers on its port any more.
    result = client(url, path, DEFAULT_CONFIG)
    assert result.returncode == 1
    expected = (f"error: cannot reach TF Serving at {url}/v1/models/{model}:predict: "
                "Connection refused; is the server running? (deploy/serving/README.md)")
    assert result.stderr.strip().splitlines() == [expected]
